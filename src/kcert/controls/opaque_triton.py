"""Triton kernels of the ``opaque`` control family, for Triton's CPU interpreter.

Import this module only after ``TRITON_INTERPRET=1`` is set (``opaque_kernels.triton_kernels`` does):
triton 3.6 decides at decoration time whether a kernel is interpreted. ``torch._dynamo`` imports
triton early, before that variable is set, so triton's own jitted helpers (``tl.sum``, ``tl.max``)
were decorated for the GPU and cannot run in the interpreter: these kernels reduce with
``tl.reduce`` and the combine functions of controls/triton_combine.py. Arithmetic is in the loaded
dtype (float32 or float64); the interpreter evaluates it with numpy.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import KernelError
from .triton_combine import add, maximum


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, EPS: tl.constexpr, EPS_ON_RMS: tl.constexpr, BLOCK: tl.constexpr):
    # one program per row
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    ms = tl.reduce(x * x, 0, add) / n_cols
    if EPS_ON_RMS:
        y = x / (tl.sqrt(ms) + EPS) * w
    else:
        y = x / tl.sqrt(ms + EPS) * w
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask)


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, POLY_EXP: tl.constexpr, BLOCK: tl.constexpr):
    # one program per row: max, exp, sum, divide
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    z = x - tl.reduce(x, 0, maximum)
    if POLY_EXP:
        # 2^t as 2^floor(t) times a degree-4 polynomial of the fraction (a fast-math exp)
        t = z * 1.4426950408889634
        n = tl.floor(t)
        f = t - n
        p = 1.0 + f * (0.6931471805599453 + f * (0.2402265069591007 + f * (0.0555041086648216
                                                                          + f * 0.009618129107628477)))
        e = p * tl.exp2(n)
    else:
        e = tl.exp(z)
    e = tl.where(mask, e, 0.0)
    tl.store(y_ptr + row * n_cols + cols, e / tl.reduce(e, 0, add), mask=mask)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, eps_on_rms: bool = False) -> torch.Tensor:
    x2 = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty_like(x2)
    rms_norm_kernel[(x2.shape[0],)](x2, w.contiguous(), y, x2.shape[1], EPS=eps, EPS_ON_RMS=eps_on_rms,
                                    BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.reshape(x.shape)


def softmax(x: torch.Tensor, poly_exp: bool = False) -> torch.Tensor:
    x2 = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty_like(x2)
    softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], POLY_EXP=poly_exp, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.reshape(x.shape)


if type(rms_norm_kernel).__name__ != "InterpretedFunction":
    raise KernelError(f"triton {triton.__version__} did not enable its CPU interpreter for kernels decorated after "
                      f"TRITON_INTERPRET=1 was set: run the opaque Triton controls with TRITON_INTERPRET=1 exported")

KERNELS = {"rms_norm": rms_norm, "softmax": softmax}
