"""Example case file for a Triton kernel: `kcert certify examples/triton_cases.py`.

On a machine with CUDA the kernel runs on the GPU in bfloat16 (pass `--device cuda`); without one,
set `TRITON_INTERPRET=1` and it runs in Triton's CPU interpreter in float32 (the interpreter computes
bfloat16 wrongly, so kcert refuses it there). The algebra gate cannot run a Triton launch in real
mode; it runs the precision ladder: the launch is called with float32 and float64 tensors as well
(and bfloat16 on a GPU), and its error against the float64 oracle must fall like rounding.
Needs `pip install triton` (`kcert[opaque]`).
"""

import os

import torch
import triton
import triton.language as tl

import kcert
from kcert.adapters.triton import triton_case

EPS = 1e-5
ON_GPU = torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET")


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, EPS: tl.constexpr, BLOCK: tl.constexpr):
    """One program per row; float32 arithmetic for bfloat16 and float32 rows, float64 for float64."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    if x.dtype == tl.bfloat16:
        x = x.to(tl.float32)
        w = w.to(tl.float32)
    ms = tl.reduce(x * x, 0, _add) / n_cols
    y = x / tl.sqrt(ms + EPS) * w
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def triton_rms_norm(x, w):
    """The launch: takes the probes by name, allocates its output, returns it."""
    rows = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty_like(rows)
    rms_norm_kernel[(rows.shape[0],)](rows, w.contiguous(), y, rows.shape[1], EPS=EPS,
                                      BLOCK=triton.next_power_of_2(rows.shape[1]))
    return y.reshape(x.shape)


def reference_rms_norm(x, w):
    """The reference framework's RMSNorm: float32 statistics, one rounding at the end."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


shape = (4, 256, 512) if ON_GPU else (1, 8, 128)  # the interpreter runs one numpy program per row: keep it small
rms_norm = triton_case(
    "triton_rms_norm",
    ref=reference_rms_norm,
    prod=triton_rms_norm,
    dtype=torch.bfloat16 if ON_GPU else torch.float32,
    inputs={"x": kcert.Gaussian(shape, shift=0.1)},
    weights={"w": kcert.Gaussian(shape[-1:], shift=1.0, std=0.1)},
)
