"""Softmax references: the two-pass softmax reference frameworks call, the online (flash) softmax
with a configurable accumulator dtype, and the attention-logit probe that triggers their defects.

- :func:`softmax`: what Hugging Face models write, ``F.softmax(x, dim=-1, dtype=torch.float32)``
  then a cast back to the working dtype. PyTorch's kernel is two-pass with max subtraction:
  ``m = max_j x_j``, ``d = sum_j exp(x_j - m)``, ``y_i = exp(x_i - m) / d``, all in float32.
- :func:`online_softmax`: the online normalizer (Milakov & Gimelshein 2018, the softmax inside
  flash attention): one streaming pass keeps a running maximum ``m`` and a running denominator
  ``d``, rescaled by ``exp(m_old - m_new)`` whenever the maximum grows. ``m`` and ``d`` live in
  ``acc_dtype``; with float32 it is the same real function as the two-pass softmax and the same
  accuracy, with bfloat16 every update of ``d`` is rounded to 8 significant bits.

Bucket axis: the head, ``Axes(1)`` of a (B, H, S_q, S_k) logit tensor.

Triggers (:func:`attention_logits`): Gaussian logits of a realistic spread, plus attention-sink
rows whose first key carries a logit of 60-120, beyond ``ln(float32 max) = 88.7`` where an
``exp`` without max subtraction overflows (pytorch PR #62897), and far beyond Gemma-2's softcap.
"""

from __future__ import annotations

import math

import torch

from ..case import Axes, Custom
from . import Operator

HEAD = Axes(1)
EXP_OVERFLOW = math.log(torch.finfo(torch.float32).max)  # 88.72: exp overflows float32 beyond it


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Reference softmax (Hugging Face attention): float32 two-pass softmax, rounded once."""
    return torch.softmax(x, dim=dim, dtype=torch.float32).to(x.dtype)


def online_softmax(x: torch.Tensor, *, acc_dtype: torch.dtype = torch.float32, lanes: int = 32) -> torch.Tensor:
    """Online softmax over the last axis, organised as a GPU kernel runs it: ``lanes`` threads
    each stream a strided subset of the row (key ``j`` goes to lane ``j % lanes``) with the
    online normalizer of Milakov & Gimelshein (2018), per key ``m' = max(m, x_j)``,
    ``d' = d * exp(m - m') + exp(x_j - m')``; the lanes' ``(m, d)`` pairs are then merged by a
    butterfly reduction, ``d = d_a * exp(m_a - M) + d_b * exp(m_b - M)``; finally
    ``y = exp(x - m) / d``. The running ``m`` and ``d`` are held, and every update rounded, in
    ``acc_dtype``. ``lanes=1`` is the sequential algorithm. In exact arithmetic it equals the
    two-pass softmax.
    """
    n = x.shape[-1]
    if lanes < 1 or n % lanes or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two dividing the row length {n}, got {lanes}")
    xs = x.to(acc_dtype)
    lead = xs.shape[:-1]
    strided = xs.reshape(*lead, n // lanes, lanes)  # [..., step, lane] = x[..., step * lanes + lane]
    m = torch.full((*lead, lanes), -math.inf, dtype=acc_dtype, device=x.device)
    d = torch.zeros((*lead, lanes), dtype=acc_dtype, device=x.device)
    for step in range(n // lanes):
        xj = strided[..., step, :]
        m_new = torch.maximum(m, xj)
        d = d * torch.exp(m - m_new) + torch.exp(xj - m_new)
        m = m_new
    while m.shape[-1] > 1:  # butterfly merge of the lanes' (max, denominator) pairs
        half = m.shape[-1] // 2
        m_a, m_b, d_a, d_b = m[..., :half], m[..., half:], d[..., :half], d[..., half:]
        m = torch.maximum(m_a, m_b)
        d = d_a * torch.exp(m_a - m) + d_b * torch.exp(m_b - m)
    return (torch.exp(xs - m) / d).to(x.dtype)


def attention_logits(shape: tuple[int, ...], std: float = 2.0, shift: float = 0.0, sink_rate: float = 0.125,
                     sink_low: float = 60.0, sink_high: float = 120.0) -> Custom:
    """Scaled attention logits ``(..., S_q, S_k)``: N(shift, std**2) entries, and in a
    ``sink_rate`` share of the rows an attention sink, the first key's logit drawn from
    U(sink_low, sink_high). Sinks of this size are what softcaps (Gemma-2) and QK-norm exist
    for; a row with a logit beyond 88.7 overflows an ``exp`` taken without max subtraction."""
    shape = tuple(shape)

    def draw(g: torch.Generator, device) -> torch.Tensor:
        x = torch.randn(shape, generator=g, device=device) * std + shift
        rows = shape[:-1]
        sink = torch.rand(rows, generator=g, device=device) < sink_rate
        level = sink_low + (sink_high - sink_low) * torch.rand(rows, generator=g, device=device)
        x[..., 0] = torch.where(sink, level, x[..., 0])
        return x

    return Custom(draw, f"N({shift}, {std}^2) logits; {sink_rate:.1%} of rows with a sink logit "
                        f"U({sink_low:g}, {sink_high:g}) at key 0", shape)


def softmax_inputs(batch: int = 1, heads: int = 8, queries: int = 32, seq: int = 256, std: float = 2.0,
                   sink_rate: float = 0.125, sink_low: float = 60.0, sink_high: float = 120.0, **_) -> dict:
    """Probe contract of :data:`SOFTMAX`: (batch, heads, queries, seq) attention logits, a block of
    ``queries`` query rows, each over ``seq`` keys (the row length is what accumulators see)."""
    return {"x": attention_logits((batch, heads, queries, seq), std=std, sink_rate=sink_rate,
                                  sink_low=sink_low, sink_high=sink_high)}


SOFTMAX = Operator(
    name="attention_softmax",
    family="attention",
    reference=softmax,
    inputs=softmax_inputs,
    buckets=HEAD,
    triggers=("logits beyond 88 (exp overflow without max subtraction)", "long rows (narrow accumulators)",
              "attention-sink rows"),
    description="softmax over keys of attention logits, float32 two-pass reference rounded to the working dtype",
)

__all__ = ["EXP_OVERFLOW", "HEAD", "SOFTMAX", "attention_logits", "online_softmax", "softmax", "softmax_inputs"]
