"""Models with Triton kernels inside (a model patched by a fused-kernel library such as Liger), on a CPU.

There Triton runs in its interpreter (``TRITON_INTERPRET=1``). Kernels written for the GPU compiler need
``kcert.adapters.triton.interpreter_compat`` to run in it, so every row runs inside it (a no-op outside the
interpreter), and the interpreter computes bfloat16 and float16 wrongly (docs/adapters.md), so a
low-precision model pair whose prod launches a Triton kernel is refused before any row: a certificate
would describe the interpreter, not the kernel. A model does not say whether it launches Triton
kernels; one forward of prod finds out, and the certificate names the kernels.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..adapters.triton import LOW_PRECISION, refusal
from ..adapters.triton_interpreter import counting_launches, interpreter_compat, interpreter_requested
from ..errors import KernelError, TritonPrecisionError


def triton_launches(prod_model: nn.Module, kwargs: Mapping, extra: Mapping, dtype: torch.dtype,
                    name: str, ref_model: nn.Module | None = None,
                    ref_extra: Mapping | None = None,
                    autocast: torch.dtype | None = None) -> tuple[list[str], list[str]]:
    """The Triton kernels one forward of ``prod_model`` launches in the interpreter, and those one forward of
    ``ref_model`` launches, each named once in launch order (none outside the interpreter: nothing is run then).
    ref launching any is a patch that reached both models (a fused-kernel library that replaces a function of
    the architecture's module, not of one model: Liger's ``apply_rotary_pos_emb``): the rows that run it compare
    it with itself, and :func:`shared_patch_warning` says so. Refuses a low-precision ``dtype`` when either
    launches one (:class:`kcert.TritonPrecisionError`), or a 16-bit ``autocast`` (float32 models whose kernels then
    receive 16-bit tensors). ``extra``: prod's forward keywords kcert adds (``ref_extra``: ref's, when they differ)."""
    if not interpreter_requested():
        return [], []
    found = {}
    for role, model, keywords in (("prod", prod_model, extra), ("ref", ref_model, extra if ref_extra is None
                                                                    else ref_extra)):
        if model is None:
            found[role] = []
            continue
        try:
            with torch.no_grad(), interpreter_compat(), counting_launches() as launched:
                model(**kwargs, **keywords)
        except Exception as exc:
            raise KernelError(f"certify_model({name!r}): {role}_model raised {type(exc).__name__} on the drawn "
                              f"inputs: {exc}") from exc
        found[role] = list(dict.fromkeys(launched))
    precision, what = (autocast, "autocast") if autocast is not None else (dtype, "the models' dtype")
    for role in ("prod", "ref"):
        if found[role] and precision in LOW_PRECISION:
            why = refusal(what, precision)
            instead = ("certify them without autocast (float32 throughout)" if autocast is not None else
                       "certify float32 copies of both models (model.float(), dtype=torch.float32)")
            raise TritonPrecisionError(f"certify_model({name!r}): {role}_model launches Triton kernels "
                                       f"({', '.join(found[role])}) and {why}; on this CPU {instead}")
    return found["prod"], found["ref"]


def shared_patch_warning(ref_kernels: list[str]) -> str | None:
    """The certificate's warning when ref launches Triton kernels (None when it launches none)."""
    if not ref_kernels:
        return None
    return (f"ref_model launches Triton kernels too ({', '.join(ref_kernels)}): a patch reached ref as well (a "
            "fused-kernel library that replaces a function of the architecture's module for every model, as "
            "Liger's apply_liger_kernel_to_* do with apply_rotary_pos_emb); rows that run it compare the patched "
            "function with itself, and ref's float64 oracle cannot follow a Triton kernel. Keep the patch off ref "
            "(for Liger: rope=False, which leaves the rotary embedding unpatched in both), or certify the kernel "
            "itself with kcert certify")


__all__ = ["interpreter_compat", "shared_patch_warning", "triton_launches"]
