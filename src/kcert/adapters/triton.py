"""Triton kernels as prods.

On a CUDA device a Triton kernel is an ordinary prod: wrap its launch in a function that takes the
probes as keyword arguments, allocates its output and returns it, and certify with
``kcert.certify(case, device="cuda")``. The oracle comes from ref (real mode), so the bias and
variance gates need nothing more. Real mode cannot follow a Triton launch (it reads ``data_ptr``,
or in the interpreter ``numpy()``), so the algebra gate runs the precision ladder instead
(docs/method.md): the launch is called with the probes in the working dtype, float32 and float64
(``Case(prod_precisions=...)`` to choose), a precision it refuses (an exception, or an output coarser
than its inputs) is left out, and prod's error against the float64 oracle must fall like rounding. A
launch that accepts float32 tensors gets an algebra test this way; one that accepts a single
precision gets none (SKIPPED, never a silent PASS) unless the case gives a ``prod_math`` (the
kernel's math written in torch) or accepts the untested algebra explicitly.

On CPU, Triton runs only in its interpreter (``TRITON_INTERPRET=1``), which emulates the kernel
with numpy. Measured here with triton 3.6.0: bfloat16 arithmetic operates on the raw 16-bit
patterns (a bf16 add gave nan, a bf16 multiply 2.3e38 on N(0, 1) inputs) and float32 -> bfloat16
stores truncate instead of rounding to nearest even (50% of N(0, 1) values one ULP off); float16
goes through numpy's float16 arithmetic, not the GPU's. A certificate of a low-precision kernel
run there would describe the interpreter, not the kernel, so this module refuses bfloat16 and
float16 in the interpreter: CPU runs of Triton kernels are float32 (or float64) only, and their
cases say so in their description.

Third-party kernels written for the GPU compiler mostly fail in triton 3.6's interpreter as shipped
(tensor loop bounds under numpy >= 2.4, float arguments, libdevice functions, autotuning, functions
jitted before ``TRITON_INTERPRET=1`` was set): a prod wrapped here runs inside
:func:`interpreter_compat` (kcert/adapters/triton_interpreter.py), which patches each of those for
the duration of the call (``compat=False`` to run the interpreter as shipped).

Nothing here imports triton at import time.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..case import Case
from ..errors import TritonPrecisionError, TritonUnavailable
from .triton_interpreter import PATCHES as INTERPRETER_PATCHES
from .triton_interpreter import interpreter_compat, interpreter_requested

INTERPRETER_DTYPES = (torch.float32, torch.float64)
LOW_PRECISION = (torch.bfloat16, torch.float16)

__all__ = [
    "INTERPRETER_DTYPES", "INTERPRETER_PATCHES", "TritonKernel", "TritonPrecisionError", "TritonUnavailable",
    "check_precision", "execution_mode", "interpreter_compat", "interpreter_requested", "refusal", "triton_case",
    "triton_prod",
]


def execution_mode() -> str:
    """``"interpreter"`` (TRITON_INTERPRET set), ``"cuda"`` (a CUDA device), or ``"unavailable"``."""
    if interpreter_requested():
        return "interpreter"
    return "cuda" if torch.cuda.is_available() else "unavailable"


def refusal(what: str, dtype: torch.dtype) -> str:
    """Why ``what`` (in ``dtype``) cannot run in the interpreter, and what to do instead."""
    name = str(dtype).removeprefix("torch.")
    return (
        f"{what} is {name}, but Triton kernels here run in the CPU interpreter (TRITON_INTERPRET=1), which "
        "computes low precision wrongly: bfloat16 arithmetic operates on the raw 16-bit patterns and float32 "
        "-> bfloat16 stores truncate (measured with triton 3.6.0), float16 uses numpy's arithmetic, not the "
        "GPU's. CPU runs of Triton kernels are float32 only: use dtype=torch.float32 here, and certify "
        f"{name} on a CUDA device (kcert.certify(case, device='cuda'))"
    )


def check_precision(dtype: torch.dtype, *, where: str = "triton") -> str:
    """The execution mode, after refusing what it cannot run faithfully: a low-precision ``dtype``
    in the interpreter (:class:`TritonPrecisionError`), any run without CUDA or interpreter
    (:class:`TritonUnavailable`)."""
    mode = execution_mode()
    if mode == "unavailable":
        raise TritonUnavailable(
            f"{where}: no CUDA device and TRITON_INTERPRET is not set, so a Triton kernel cannot run; run on a "
            "GPU, or set TRITON_INTERPRET=1 before triton is imported to use the CPU interpreter (float32 only)"
        )
    if mode == "interpreter" and dtype in LOW_PRECISION:
        raise TritonPrecisionError(f"{where}: {refusal('the case dtype', dtype)}")
    return mode


@dataclass(frozen=True, eq=False)
class TritonKernel:
    """A Triton launch used as prod. In the interpreter every floating argument is checked before
    the launch (a bf16 tensor is refused even when the case dtype is float32, e.g. a Fixed probe),
    and with ``compat`` the call runs inside :func:`interpreter_compat`."""

    fn: Callable[..., Any]
    name: str
    compat: bool = True

    def __call__(self, **kwargs):
        if execution_mode() == "interpreter":
            for key, value in kwargs.items():
                if isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION:
                    raise TritonPrecisionError(f"{self.name}: {refusal(f'argument {key!r}', value.dtype)}")
        with interpreter_compat() if self.compat else contextlib.nullcontext():
            return self.fn(**kwargs)


def triton_prod(fn: Callable[..., Any], *, name: str | None = None, compat: bool = True) -> TritonKernel:
    """Wrap a function that launches a Triton kernel (keyword arguments named like the probes,
    returns its output tensors) as a prod with the interpreter guard. ``compat``: run each call
    inside :func:`interpreter_compat` (a no-op outside the interpreter). Wrap a gradient case's prod
    (``kcert.gradients``) again so that the backward kernels, launched after the forward returned,
    run inside it too."""
    if not callable(fn):
        raise TypeError(f"triton_prod: fn must be callable, got {type(fn).__name__}")
    return TritonKernel(fn, name or getattr(fn, "__name__", "triton kernel"), compat)


def triton_case(name: str, ref: Callable[..., Any], prod: Callable[..., Any], *,
                dtype: torch.dtype = torch.bfloat16, prod_math: Callable[..., Any] | None = None,
                description: str = "", compat: bool = True, **case_kwargs) -> Case:
    """A :class:`kcert.Case` with a Triton prod. Refuses what this machine cannot run faithfully
    (see :func:`check_precision`); in the interpreter the description records that the run is a
    float32 CPU emulation. ``prod_math``: the kernel's real-number definition in torch, for the
    algebra gate's identity test (without it that gate runs the precision ladder: a Triton launch
    cannot run in real mode; in the interpreter the ladder's rungs are float32 and float64).
    ``compat``: a plain callable prod runs inside :func:`interpreter_compat` (see :func:`triton_prod`)."""
    mode = check_precision(dtype, where=f"triton_case({name!r})")
    notes = [description] if description else []
    if mode == "interpreter":
        notes.append(f"prod runs in the Triton CPU interpreter in {str(dtype).removeprefix('torch.')} "
                     "(float32 only on CPU; low precision needs a GPU)")
    kernel = prod if isinstance(prod, TritonKernel) else triton_prod(prod, compat=compat)
    return Case(name=name, ref=ref, prod=kernel, dtype=dtype, prod_math=prod_math, description="; ".join(notes),
                **case_kwargs)
