"""Triton kernels of the ``shape`` control family (controls/shapes.py), for Triton's CPU interpreter.

Each kernel has a correct form and a bug that holds only at some shapes (the "correctness illusion" of
seeded-bug corpora): an online softmax whose running sum is not rescaled when the running max moves
(right while a row fits one tile), a tiled matmul whose accumulator is overwritten (``acc =`` for
``acc +=``: right while K fits one block), a softmax whose masked load pads with 0 instead of -inf (right
when the row length is the power of two the block is rounded to).

Import this module only after ``TRITON_INTERPRET=1`` is set (:func:`kcert.controls.shapes.kernels` does);
like controls/opaque_triton.py, the kernels reduce with ``tl.reduce`` and the combine functions of
controls/triton_combine.py (``torch._dynamo`` may have imported triton before that variable was set, and triton's own jitted helpers
would then not run in the interpreter). Arithmetic is in the loaded dtype (float32 or float64).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import KernelError
from .triton_combine import add, maximum

TILE = 128  # the online softmax's tile: rows up to 128 long fit one
BLOCK_M, BLOCK_N, BLOCK_K = 16, 16, 64  # the matmul's blocks: K up to 64 fits one


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, n_cols: tl.constexpr, RESCALE: tl.constexpr, TILE: tl.constexpr):
    # one program per row (the row length is a constexpr: the interpreter's loop bounds are Python ints);
    # pass 1: running max and running sum over tiles; pass 2: normalise
    row = tl.program_id(0)
    cols = tl.arange(0, TILE)
    zero = tl.load(x_ptr + row * n_cols) * 0.0
    m = zero - float("inf")
    s = zero
    for start in range(0, n_cols, TILE):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=mask, other=-float("inf"))
        m_new = tl.maximum(m, tl.reduce(x, 0, maximum))
        e = tl.reduce(tl.exp(x - m_new), 0, add)
        if RESCALE:
            s = s * tl.exp(m - m_new) + e
        else:
            s = s + e  # the running sum keeps terms scaled to the old max
        m = m_new
    for start in range(0, n_cols, TILE):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=mask, other=-float("inf"))
        tl.store(y_ptr + row * n_cols + start + cols, tl.exp(x - m) / s, mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K: tl.constexpr, OVERWRITE: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # the first block starts the accumulator (tl.zeros is one of triton's jitted helpers: see above)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
    acc = tl.dot(a, b, input_precision="ieee")
    for k in range(BLOCK_K, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if OVERWRITE:
            acc = tl.dot(a, b, input_precision="ieee")  # the accumulator overwritten: only the last block counts
        else:
            acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def masked_softmax_kernel(x_ptr, y_ptr, n_cols, PAD_ZERO: tl.constexpr, BLOCK: tl.constexpr):
    # one program per row, the row in one block rounded up to a power of two
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if PAD_ZERO:
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)  # padding enters max and sum as 0
    else:
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    z = x - tl.reduce(x, 0, maximum)
    e = tl.exp(z)
    tl.store(y_ptr + row * n_cols + cols, e / tl.reduce(e, 0, add), mask=mask)


def online_softmax(x: torch.Tensor, rescale: bool = True) -> torch.Tensor:
    x2 = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty_like(x2)
    online_softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], RESCALE=rescale, TILE=TILE)
    return y.reshape(x.shape)


def matmul(a: torch.Tensor, b: torch.Tensor, overwrite: bool = False) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
    matmul_kernel[grid](a, b, c, m, n, k, OVERWRITE=overwrite, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return c


def masked_softmax(x: torch.Tensor, pad_zero: bool = False) -> torch.Tensor:
    x2 = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty_like(x2)
    masked_softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], PAD_ZERO=pad_zero,
                                          BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.reshape(x.shape)


if type(online_softmax_kernel).__name__ != "InterpretedFunction":
    raise KernelError(f"triton {triton.__version__} did not enable its CPU interpreter for kernels decorated after "
                      f"TRITON_INTERPRET=1 was set: run the shape controls with TRITON_INTERPRET=1 exported")

KERNELS = {"online_softmax": online_softmax, "matmul": matmul, "masked_softmax": masked_softmax}
