"""Float32 Triton kernels of the ``opaque`` control family, written like third-party kernels.

Each loads its inputs and computes in float32 (``.to(tl.float32)``) whatever it is given, as
Liger-Kernel's and most training kernels do. Two return float32 whatever their inputs (the
ladder's float64 rung is then refused: a float32 output is not a float64 computation); the RoPE
kernel stores into its input's dtype, so its float64 outputs carry float32 arithmetic: a fixed
internal precision.

They use what triton 3.6's interpreter runs only through ``kcert.adapters.triton.interpreter_compat``
(float arguments pinned with ``.to(tl.float32)``, libdevice ``rsqrt``, ``tl.sum`` / ``tl.max``): the
controls run them through ``kcert.adapters.triton.triton_case``, which applies it. Import this module
only after ``TRITON_INTERPRET=1`` is set (``opaque_float32_kernels.triton_kernels`` does).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, DROP_EPS: tl.constexpr, BLOCK: tl.constexpr):
    # one program per row, two-pass statistics in float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    if DROP_EPS:
        rstd = rsqrt(var)
    else:
        rstd = rsqrt(var + eps.to(tl.float32))
    tl.store(y_ptr + row * n_cols + cols, d * rstd * w + b, mask=mask)


@triton.jit
def cross_entropy_kernel(z_ptr, labels_ptr, loss_ptr, n_cols, ignore_index, label_smoothing,
                         SMOOTH_OVER_OTHERS: tl.constexpr, BLOCK: tl.constexpr):
    # one program per token: logsumexp, the label's logit, and the smoothing term
    row = tl.program_id(0).to(tl.int64)
    label = tl.load(labels_ptr + row)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    z = tl.load(z_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(z, axis=0)
    lse = m + tl.log(tl.sum(tl.exp(z - m), axis=0))
    z_sum = tl.sum(tl.where(mask, z, 0.0), axis=0)
    z_label = tl.sum(tl.where(cols == label, z, 0.0), axis=0)
    nll = lse - z_label
    ls = label_smoothing.to(tl.float32)
    if SMOOTH_OVER_OTHERS:
        # eps / (V - 1) on each of the other V - 1 classes: sum over c != label of eps (lse - z_c)
        eps = ls / (n_cols - 1)
        smooth = ls * lse - eps * (z_sum - z_label)
    else:
        # eps / V on every class: sum over c of eps (lse - z_c)
        eps = ls / n_cols
        smooth = ls * lse - eps * z_sum
    loss = (1.0 - ls) * nll + smooth
    tl.store(loss_ptr + row, tl.where(label == ignore_index, 0.0, loss))


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, heads, seq, HALF: tl.constexpr):
    # one program per (batch, head, token) row of head_dim = 2 * HALF; NeoX halves; float32 inside
    row = tl.program_id(0).to(tl.int64)
    token = (row // (heads * seq)) * seq + row % seq  # the (batch, token) row of the cos/sin tables
    offs = tl.arange(0, HALF)
    x1 = tl.load(x_ptr + row * 2 * HALF + offs).to(tl.float32)
    x2 = tl.load(x_ptr + row * 2 * HALF + HALF + offs).to(tl.float32)
    c = tl.load(cos_ptr + token * HALF + offs).to(tl.float32)
    s = tl.load(sin_ptr + token * HALF + offs).to(tl.float32)
    tl.store(y_ptr + row * 2 * HALF + offs, x1 * c - x2 * s)
    tl.store(y_ptr + row * 2 * HALF + HALF + offs, x2 * c + x1 * s)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float, drop_eps: bool = False) -> torch.Tensor:
    """LayerNorm over the last axis; a float32 output whatever the input dtype."""
    rows = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty(rows.shape, dtype=torch.float32, device=x.device)
    layer_norm_kernel[(rows.shape[0],)](rows, w.contiguous(), b.contiguous(), y, rows.shape[1], eps, DROP_EPS=drop_eps,
                                        BLOCK=triton.next_power_of_2(rows.shape[1]))
    return y.reshape(x.shape)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int, label_smoothing: float,
                  smooth_over_others: bool = False) -> torch.Tensor:
    """Token-mean cross entropy with label smoothing over the non-ignored tokens; a float32 scalar
    whatever the logits' dtype (per-token losses in float32, their mean in float32)."""
    z = logits.contiguous().reshape(-1, logits.shape[-1])
    y = labels.reshape(-1).contiguous()
    losses = torch.empty(z.shape[0], dtype=torch.float32, device=z.device)
    cross_entropy_kernel[(z.shape[0],)](z, y, losses, z.shape[1], ignore_index, label_smoothing,
                                        SMOOTH_OVER_OTHERS=smooth_over_others, BLOCK=triton.next_power_of_2(z.shape[1]))
    return losses.sum() / (y != ignore_index).sum().to(torch.float32)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX RoPE of ``x`` ``(batch, heads, seq, head_dim)`` by ``cos``/``sin`` ``(batch, seq,
    head_dim / 2)``; stored in ``x``'s dtype, computed in float32."""
    batch, heads, seq, dim = x.shape
    xc = x.contiguous()
    y = torch.empty_like(xc)
    rope_kernel[(batch * heads * seq,)](xc, cos.contiguous(), sin.contiguous(), y, heads, seq, HALF=dim // 2)
    return y


KERNELS = {"layer_norm": layer_norm, "cross_entropy": cross_entropy, "rope": rope}
