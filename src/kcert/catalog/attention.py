"""Attention references: eager scaled-dot-product attention as Hugging Face writes it, a
flash-style (online softmax, tiled) attention, masks, GQA head mapping, and the probe contracts
that trigger attention defects.

Layout: q is (B, H, Q, D), k and v are (B, H_kv, S, D) with H a multiple of H_kv and the Q
queries the last Q of the S positions (Q = S for a full sequence); the output is (B, H, Q, D).
Query head h reads kv head ``h // (H / H_kv)`` (``repeat_interleave`` of the kv heads, the mapping
of Llama/Mistral/Gemma checkpoints).

:func:`eager_attention` is the reference: ``scores = (q @ k^T) * scale`` in the working dtype,
Gemma-2's softcap ``cap * tanh(scores / cap)`` in the working dtype, an additive mask holding
``finfo(dtype).min`` where a key is not allowed, ``softmax(..., dtype=float32)`` rounded back to
the working dtype, then ``probs @ v``. Allowed keys of query i (:func:`allowed_keys`): causal
``j <= i``; sliding window of W keys ``i - j < W`` (Mistral's eager mask admits W keys including
the query's own, transformers #29623); padding ``key_valid[b, j]``. A fully masked row (a padding
query under left padding) sees ``finfo.min`` everywhere and so attends uniformly to every key:
its output is the mean of v over all keys, finite (pytorch #103749's "correct" version).

Bucket axis: the head, ``Axes(1)``: scale, softcap, window and GQA defects all act per head.
"""

from __future__ import annotations

import functools
import math

import torch

from ..case import Axes, Custom
from . import Operator
from .probes import shifted

HEAD = Axes(1)

# Gemma-2 9B: 16 query heads, 8 kv heads, head_dim 256, query_pre_attn_scalar 256, softcap 50.
GEMMA2_HEAD_DIM = 256
GEMMA2_QUERY_PRE_ATTN_SCALAR = 256
GEMMA2_SOFTCAP = 50.0


# --- GQA ----------------------------------------------------------------------------------------


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Reference GQA: each kv head serves ``n_rep`` consecutive query heads (repeat_interleave)."""
    return x if n_rep == 1 else torch.repeat_interleave(x, n_rep, dim=1)


def repeat_kv_expand(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Llama's ``repeat_kv``: the same mapping through a broadcast view and a reshape."""
    if n_rep == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


# --- masks --------------------------------------------------------------------------------------


def allowed_keys(s_q: int, s_k: int, *, causal: bool = True, window: int | None = None,
                 key_valid: torch.Tensor | None = None, device=None) -> torch.Tensor:
    """Boolean (B or 1, 1, S_q, S_k) mask of the keys each query may attend to. Queries are the
    last ``s_q`` positions of the ``s_k`` keys. ``window``: the query attends to at most
    ``window`` keys, itself included (``i - j < window``). ``key_valid``: (B, S_k), False on
    padding."""
    i = torch.arange(s_q, device=device).unsqueeze(-1) + (s_k - s_q)
    j = torch.arange(s_k, device=device).unsqueeze(0)
    ok = torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    if causal:
        ok = ok & (j <= i)
    if window is not None:
        ok = ok & (i - j < window)
    ok = ok[None, None]
    if key_valid is not None:
        ok = ok & key_valid[:, None, None, :].to(torch.bool)
    return ok


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Hugging Face's 4D float mask: 0 where allowed, the most negative finite value elsewhere."""
    zero = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zero.masked_fill(~allowed, torch.finfo(dtype).min)


# --- kernels ------------------------------------------------------------------------------------


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_valid: torch.Tensor | None = None, *,
                    scale: float | None = None, causal: bool = True, window: int | None = None,
                    softcap: float | None = None) -> torch.Tensor:
    """Reference eager attention (transformers' ``eager_attention_forward``, Gemma-2 variant when
    ``softcap`` is set). ``scale`` defaults to ``head_dim ** -0.5``."""
    n_rep = q.shape[1] // k.shape[1]
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if softcap is not None:
        scores = scores / softcap
        scores = torch.tanh(scores)
        scores = scores * softcap
    allowed = allowed_keys(q.shape[-2], k.shape[-2], causal=causal, window=window, key_valid=key_valid,
                           device=q.device)
    scores = scores + additive_mask(allowed, scores.dtype)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_valid: torch.Tensor | None = None, *,
                    scale: float | None = None, causal: bool = True, window: int | None = None,
                    softcap: float | None = None, block: int = 64,
                    acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Flash-attention-2 forward written in torch: key/value tiles of ``block`` keys, scores
    ``q @ k^T`` accumulated in float32 (tensor-core semantics), softcap in float32, online softmax
    with the running max ``m``, denominator ``l`` and output accumulator held in ``acc_dtype``,
    the unnormalised probabilities rounded to the working dtype before ``p @ v`` (as FA2 feeds its
    second GEMM), one division by ``l`` at the end. Fully masked rows give 0 (FA2's guard)."""
    dtype = q.dtype
    n_rep = q.shape[1] // k.shape[1]
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    s_q, s_k = q.shape[-2], k.shape[-2]
    allowed = allowed_keys(s_q, s_k, causal=causal, window=window, key_valid=key_valid, device=q.device)
    qf = q.to(torch.float32)
    lead = q.shape[:-1]
    m = torch.full(lead, -math.inf, dtype=acc_dtype, device=q.device)
    l = torch.zeros(lead, dtype=acc_dtype, device=q.device)
    acc = torch.zeros(q.shape, dtype=acc_dtype, device=q.device)
    for start in range(0, s_k, block):
        stop = min(start + block, s_k)
        s = torch.matmul(qf, k[..., start:stop, :].to(torch.float32).transpose(-1, -2)) * scale
        if softcap is not None:
            s = torch.tanh(s / softcap) * softcap
        s = s.masked_fill(~allowed[..., start:stop], -math.inf)
        m_new = torch.maximum(m.to(torch.float32), s.amax(dim=-1))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m.to(torch.float32) - m_safe)
        p = torch.exp(s - m_safe.unsqueeze(-1))
        l = (l.to(torch.float32) * alpha + p.sum(dim=-1)).to(acc_dtype)
        pv = torch.matmul(p.to(dtype).to(torch.float32), v[..., start:stop, :].to(torch.float32))
        acc = (acc.to(torch.float32) * alpha.unsqueeze(-1) + pv).to(acc_dtype)
        m = m_new.to(acc_dtype)
    lf = l.to(torch.float32).unsqueeze(-1)
    out = torch.where(lf > 0, acc.to(torch.float32) / torch.where(lf > 0, lf, torch.ones_like(lf)),
                      torch.zeros_like(lf))
    return out.to(dtype)


# --- probes -------------------------------------------------------------------------------------


def massive_activations(shape: tuple[int, ...], shift: float = 0.1, channels: int = 4, scale: float = 16.0,
                        token_rate: float = 0.125) -> Custom:
    """N(shift, 1) q or k entries where a ``token_rate`` share of the tokens (axis -2) carry
    massive activations: their first ``channels`` features scaled by ``scale`` (the massive
    activations of real LLMs sit on a few tokens, BOS and delimiters, and a few channels). A
    query and a key that both carry them get a logit of order ``scale**2 * sqrt(channels) / sqrt(D)``:
    with head_dim 256, 4 channels x16 on 1 token in 8, the logits have a standard deviation near
    4.5, while about 6% of the rows hold a logit beyond 50 (a softcap) and some beyond 88."""
    shape = tuple(shape)

    def draw(g: torch.Generator, device) -> torch.Tensor:
        x = torch.randn(shape, generator=g, device=device) + shift
        tokens = torch.rand(shape[:-1] + (1,), generator=g, device=device) < token_rate
        x[..., :channels] = torch.where(tokens, x[..., :channels] * scale, x[..., :channels])
        return x

    return Custom(draw, f"N({shift}, 1) with {channels} massive channels x{scale:g} on {token_rate:.1%} of tokens",
                  shape)


def padding_mask(batch: int, seq: int, side: str = "right", min_valid: int | None = None) -> Custom:
    """Per-sequence validity (B, S) of a padded batch: each row keeps a length drawn uniformly in
    [min_valid, seq]; ``side="left"`` pads at the start (generation batches: the padding queries
    of a causal mask then have no key at all), ``"right"`` at the end (training batches: every
    query keeps at least key 0)."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    low = seq // 2 if min_valid is None else int(min_valid)

    def draw(g: torch.Generator, device) -> torch.Tensor:
        lengths = torch.randint(low, seq + 1, (batch, 1), generator=g, device=device)
        pos = torch.arange(seq, device=device).unsqueeze(0)
        return pos < lengths if side == "right" else pos >= seq - lengths

    return Custom(draw, f"{side} padding, valid lengths U[{low}, {seq}]", (batch, seq))


def attention_inputs(batch: int = 1, heads: int = 4, kv_heads: int | None = 2, seq: int = 128,
                     head_dim: int = 64, queries: int | None = None, shift: float = 0.1,
                     qk_outlier_channels: int = 0, qk_outlier_scale: float = 16.0, qk_outlier_tokens: float = 0.125,
                     padding: str | None = None, min_valid: int | None = None, **_) -> dict:
    """Probe contract of the attention operators: q (B, H, Q, D), k and v (B, H_kv, S, D) drawn
    N(shift, 1) (shifted to break symmetry); by default GQA with 4 query heads on 2 kv heads
    (``kv_heads=None``: one kv head per query head). ``queries`` (default ``seq``): the queries are the
    last Q positions of the S-token sequence (a prefill chunk over a cache of S keys).
    ``qk_outlier_channels`` > 0: q and k carry :func:`massive_activations` (those channels
    scaled by ``qk_outlier_scale`` on a ``qk_outlier_tokens`` share of the tokens), which puts
    a share of the logits beyond a softcap of 50 and beyond 88. ``padding``: add a ``key_valid`` (B, S) mask, "left" or
    "right" padded."""
    kv_heads = heads if kv_heads is None else kv_heads
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    queries = seq if queries is None else queries
    if not 1 <= queries <= seq:
        raise ValueError(f"queries must be in [1, seq], got {queries}")
    q_shape, kv_shape = (batch, heads, queries, head_dim), (batch, kv_heads, seq, head_dim)
    if qk_outlier_channels:
        q = massive_activations(q_shape, shift, qk_outlier_channels, qk_outlier_scale, qk_outlier_tokens)
        k = massive_activations(kv_shape, shift, qk_outlier_channels, qk_outlier_scale, qk_outlier_tokens)
    else:
        q, k = shifted(q_shape, shift), shifted(kv_shape, shift)
    probes = {"q": q, "k": k, "v": shifted(kv_shape, shift)}
    if padding is not None:
        probes["key_valid"] = padding_mask(batch, seq, padding, min_valid)
    return probes


# --- operators ----------------------------------------------------------------------------------

ATTENTION = Operator(
    name="causal_gqa_attention",
    family="attention",
    reference=eager_attention,
    inputs=attention_inputs,
    buckets=HEAD,
    triggers=("GQA head mapping (kv_heads < heads)", "causal mask"),
    description="eager causal attention, GQA by repeat_interleave, head_dim ** -0.5 scale",
)


def sliding_window_operator(window: int) -> Operator:
    """Mistral-style local attention: causal, at most ``window`` keys per query, self included."""
    return Operator(
        name=f"sliding_window_attention_w{window}",
        family="attention",
        reference=functools.partial(eager_attention, window=window),
        inputs=attention_inputs,
        buckets=HEAD,
        triggers=("windows shorter than the sequence",),
        description=f"eager causal attention with a sliding window of {window} keys",
    )


SLIDING_WINDOW = 32  # shorter than the contract's 128-token sequence (Mistral, Gemma-2: 4096 of 8-32k)
SLIDING_WINDOW_ATTENTION = sliding_window_operator(SLIDING_WINDOW)

GEMMA2_ATTENTION = Operator(
    name="gemma2_attention",
    family="attention",
    reference=functools.partial(eager_attention, scale=GEMMA2_QUERY_PRE_ATTN_SCALAR ** -0.5,
                                softcap=GEMMA2_SOFTCAP),
    inputs=functools.partial(attention_inputs, head_dim=GEMMA2_HEAD_DIM),
    buckets=HEAD,
    triggers=("logits beyond the softcap (qk outlier channels)", "query_pre_attn_scalar", "GQA"),
    description="Gemma-2 9B eager attention: scale 256 ** -0.5, softcap 50 on the logits",
)

PADDED_ATTENTION = Operator(
    name="padded_causal_attention",
    family="attention",
    reference=eager_attention,
    inputs=functools.partial(attention_inputs, padding="right"),
    buckets=HEAD,
    triggers=("padding masks (right: partially masked rows; left: fully masked query rows)",),
    description="eager causal attention with a key padding mask (additive finfo.min mask)",
)

__all__ = [
    "ATTENTION", "GEMMA2_ATTENTION", "GEMMA2_HEAD_DIM", "GEMMA2_QUERY_PRE_ATTN_SCALAR", "GEMMA2_SOFTCAP", "HEAD",
    "PADDED_ATTENTION", "SLIDING_WINDOW", "SLIDING_WINDOW_ATTENTION", "additive_mask", "allowed_keys", "attention_inputs", "eager_attention", "flash_attention",
    "massive_activations", "padding_mask", "repeat_kv", "repeat_kv_expand", "sliding_window_operator",
]
