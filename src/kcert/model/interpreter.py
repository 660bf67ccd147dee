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
                    name: str) -> list[str]:
    """The Triton kernels one forward of ``prod_model`` launches in the interpreter, each named once in
    launch order (none outside the interpreter: nothing is run then). Refuses a low-precision ``dtype``
    when there is one (:class:`kcert.TritonPrecisionError`)."""
    if not interpreter_requested():
        return []
    try:
        with torch.no_grad(), interpreter_compat(), counting_launches() as launched:
            prod_model(**kwargs, **extra)
    except Exception as exc:
        raise KernelError(f"certify_model({name!r}): prod_model raised {type(exc).__name__} on the drawn inputs: "
                          f"{exc}") from exc
    kernels = list(dict.fromkeys(launched))
    if kernels and dtype in LOW_PRECISION:
        why = refusal("the models' dtype", dtype)
        raise TritonPrecisionError(f"certify_model({name!r}): prod_model launches Triton kernels "
                                   f"({', '.join(kernels)}) and {why}; on this CPU "
                                   "certify float32 copies of both models (model.float(), dtype=torch.float32)")
    return kernels


__all__ = ["interpreter_compat", "triton_launches"]
