"""Rotary position embeddings (RoPE): reference kernels and their certification contracts.

The references are written the way reference frameworks write them (PyTorch eager, the
Hugging Face ``transformers`` / GPT-NeoX / Meta LLaMA conventions), in working precision with
float32 internals where those frameworks use them:

- frequencies: ``inv_freq[i] = base ** (-2i / d)`` in float32, and the scaled variants
  (llama3 band-wise scaling, YaRN with its attention factor, dynamic NTK);
- angles ``position * inv_freq`` and ``cos``/``sin`` in float32 with autocast disabled, then
  ``cos``/``sin`` (times the attention factor) cast to the working dtype;
- the NeoX half rotation ``x * cos + rotate_half(x) * sin`` in the working dtype (three bf16
  roundings, as ``transformers`` does it);
- the GPT-J / Meta interleaved rotation as a complex product in float32, rounded once;
- a GPT-NeoX style cos/sin cache (float32 table over every position, looked up per token) with
  partial rotary dimensions.

Kernels take their probes as keyword arguments ``q``, ``k`` (``(batch, heads, seq, head_dim)``)
and ``position_ids`` (``(batch, seq)`` int64) and return ``(q_embed, k_embed)``. Everything else
(the frequency rule, the rotary dimension) is closed over with :func:`functools.partial`.

Frequencies are recomputed inside every call (as the dynamic paths of ``transformers`` do): the
values are bitwise those of a float32 buffer built at initialisation, but kcert's real mode then
evaluates their *definition* in float64, so the oracle carries exact frequencies and exact
angles. A frequency buffer built outside the call would enter real mode as float32 constants and
the oracle would inherit their rounding (an error of ``position * 6e-8`` rad at long positions).

Buckets (where RoPE defects localise): position x frequency. The positions are an *input*
redrawn every replicate (``kcert.Integers`` over the production range), so a sequence slot is
not a position and ``Axes(2, 3)`` would mix positions. :func:`position_dim_buckets` labels every
element by (position block, head dimension); the head dimension names the frequency pair and the
component (NeoX: dims ``i`` and ``i + d/2`` share pair ``i``; interleaved: dims ``2i, 2i+1``).
Blocks are log-spaced (``[0, 1024)``, ``[1024, 2048)``, ..., up to the context), so "beyond 4096"
and "beyond the original context" have buckets of their own, and ``G = blocks x head_dim`` stays
near 1000: a family-wise false-alarm bound of about ``2 * G * Phi(-5) ~ 6e-4`` per statistic
and output, where one bucket per (sequence slot, dim) grows with the window (``G = 65536`` for
512 tokens x 128 dims: ~0.04).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise

import torch

from ..case import Gaussian, Labels
from . import Operator
from .probes import positions

# --- frequencies ------------------------------------------------------------------------------
# A frequency rule is a callable ``rule(position_ids) -> (inv_freq, attention_scaling)``:
# inv_freq a float32 tensor of d/2 frequencies, attention_scaling a float multiplying cos and sin.
FrequencyRule = Callable[[torch.Tensor], "tuple[torch.Tensor, float]"]


def default_inv_freq(dim: int, base: float, device=None) -> torch.Tensor:
    """``1 / base ** (2i / dim)`` for ``i < dim/2``, in float32 (the exponent from an int64
    arange, as ``transformers`` computes it)."""
    exponent = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    return 1.0 / (base ** exponent)


def default_frequencies(position_ids: torch.Tensor, *, dim: int, base: float) -> tuple[torch.Tensor, float]:
    """Plain RoPE: default frequencies, no attention scaling."""
    return default_inv_freq(dim, base, position_ids.device), 1.0


def llama3_inv_freq(dim: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float,
                    original_max_position_embeddings: int, device=None) -> torch.Tensor:
    """Llama 3.1 band-wise scaling of the default frequencies, by wavelength ``2 pi / f``:
    wavelengths below ``L / high_freq_factor`` keep ``f``; above ``L / low_freq_factor`` get
    ``f / factor``; in between ``f`` is interpolated with ``s = (L / wavelength - low) / (high - low)``:
    ``(1 - s) f / factor + s f`` (``L`` the original context)."""
    inv_freq = default_inv_freq(dim, base, device)
    old = float(original_max_position_embeddings)
    low_freq_wavelen = old / low_freq_factor
    high_freq_wavelen = old / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    long_waves = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * long_waves / factor + smooth * long_waves
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, smoothed, long_waves)


def llama3_frequencies(position_ids: torch.Tensor, *, dim: int, base: float, factor: float = 8.0,
                       low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
                       original_max_position_embeddings: int = 8192) -> tuple[torch.Tensor, float]:
    """Llama 3.1 RoPE (``rope_type="llama3"``): scaled frequencies, attention scaling 1."""
    return llama3_inv_freq(dim, base, factor, low_freq_factor, high_freq_factor,
                           original_max_position_embeddings, position_ids.device), 1.0


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(scale) + 1`` (1 for ``scale <= 1``)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(factor: float, mscale: float | None = None, mscale_all_dim: float | None = None,
                          attention_factor: float | None = None) -> float:
    """The factor YaRN multiplies cos and sin by, as ``transformers`` defines it: an explicit
    ``attention_factor`` wins; with both ``mscale`` and ``mscale_all_dim`` given it is the ratio
    ``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)`` (1 when they are equal,
    the DeepSeek / Mistral convention); otherwise ``get_mscale(factor) = 0.1 ln(factor) + 1``."""
    if attention_factor is not None:
        return float(attention_factor)
    if mscale and mscale_all_dim:
        return float(yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim))
    return float(yarn_get_mscale(factor))


def yarn_inv_freq(dim: int, base: float, factor: float, original_max_position_embeddings: int,
                  beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True,
                  device=None) -> torch.Tensor:
    """YaRN ("NTK-by-parts") frequencies: pairs that rotate more than ``beta_fast`` times over the
    original context keep ``f`` (extrapolation), those rotating fewer than ``beta_slow`` times get
    ``f / factor`` (interpolation), with a linear ramp over the pair index in between."""
    def correction_dim(rotations: float) -> float:
        # the pair index whose frequency makes `rotations` turns over the original context
        return (dim * math.log(original_max_position_embeddings / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    pos_freqs = base ** (torch.arange(0, dim, 2, device=device).float() / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, device=device).float() - low) / (high - low), 0, 1)
    keep = 1 - ramp  # weight of the extrapolated (unscaled) frequency
    return interpolation * (1 - keep) + extrapolation * keep


def yarn_frequencies(position_ids: torch.Tensor, *, dim: int, base: float, factor: float,
                     original_max_position_embeddings: int, beta_fast: float = 32.0, beta_slow: float = 1.0,
                     mscale: float | None = None, mscale_all_dim: float | None = None,
                     attention_factor: float | None = None) -> tuple[torch.Tensor, float]:
    """YaRN RoPE (``rope_type="yarn"``): NTK-by-parts frequencies and the attention factor."""
    inv_freq = yarn_inv_freq(dim, base, factor, original_max_position_embeddings, beta_fast, beta_slow,
                             device=position_ids.device)
    return inv_freq, yarn_attention_factor(factor, mscale, mscale_all_dim, attention_factor)


def dynamic_ntk_base(base: float, dim: int, factor: float, original_max_position_embeddings: int,
                     seq_len: float) -> float:
    """Dynamic NTK: the base grows with the current length ``seq_len`` beyond the original context,
    ``base * ((factor * seq_len / L) - (factor - 1)) ** (dim / (dim - 2))``."""
    alpha = factor * seq_len / original_max_position_embeddings - (factor - 1)
    return base * alpha ** (dim / (dim - 2))


def dynamic_ntk_frequencies(position_ids: torch.Tensor, *, dim: int, base: float, factor: float,
                            original_max_position_embeddings: int) -> tuple[torch.Tensor, float]:
    """Dynamic NTK RoPE (``rope_type="dynamic"``) as ``transformers`` applies it: the current
    length is ``max(position_ids) + 1``; within the original context the default frequencies are
    used, beyond it the NTK-scaled base."""
    seq_len = int(position_ids.max()) + 1
    if seq_len <= original_max_position_embeddings:
        return default_inv_freq(dim, base, position_ids.device), 1.0
    scaled = dynamic_ntk_base(base, dim, factor, original_max_position_embeddings, seq_len)
    return default_inv_freq(dim, scaled, position_ids.device), 1.0


# --- cos / sin --------------------------------------------------------------------------------


def rope_cos_sin(position_ids: torch.Tensor, frequencies: FrequencyRule, dtype: torch.dtype,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``transformers``' rotary embedding forward: angles and cos/sin in float32 with autocast
    disabled, scaled by the attention factor, cast to ``dtype``. Returns ``(batch, seq, dim)``
    tables with the frequencies repeated for the two halves (NeoX layout)."""
    inv_freq, attention_scaling = frequencies(position_ids)
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    with torch.autocast(device_type=position_ids.device.type, enabled=False):
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * attention_scaling
        sin = emb.sin() * attention_scaling
    return cos.to(dtype), sin.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last axis."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int | None = None
                      ) -> torch.Tensor:
    """NeoX half rotation in the working dtype: ``x * cos + rotate_half(x) * sin`` on the first
    ``rotary_dim`` dimensions (all by default; GPT-NeoX rotates a fraction), the rest passed
    through. ``cos``/``sin``: ``(batch, seq, rotary_dim)``, broadcast over heads."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if rotary_dim is None or rotary_dim == x.shape[-1]:
        return (x * cos) + (rotate_half(x) * sin)
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat(((x_rot * cos) + (rotate_half(x_rot) * sin), x_pass), dim=-1)


def rope_neox(q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor, *, frequencies: FrequencyRule
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference NeoX-layout RoPE (``transformers`` Llama/Gemma/Qwen/Mistral): cos/sin from
    :func:`rope_cos_sin`, rotation in the working dtype."""
    cos, sin = rope_cos_sin(position_ids, frequencies, q.dtype)
    return apply_rotary_neox(q, cos, sin), apply_rotary_neox(k, cos, sin)


def rope_interleaved(q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor, *, frequencies: FrequencyRule
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference interleaved-layout (GPT-J / Meta LLaMA) RoPE: dims ``(2i, 2i+1)`` form the
    complex number rotated by ``position * inv_freq[i]``; complex product in float32, one
    rounding to the working dtype (Meta's ``apply_rotary_emb``)."""
    inv_freq, attention_scaling = frequencies(position_ids)
    angles = position_ids.float()[..., None] * inv_freq  # (batch, seq, d/2), float32
    freqs_cis = torch.polar(torch.full_like(angles, attention_scaling), angles)[:, None]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis).flatten(-2).type_as(x)

    return rotate(q), rotate(k)


def interleaved_to_neox(x: torch.Tensor) -> torch.Tensor:
    """Permute the head dimension from the interleaved layout (pairs ``2i, 2i+1``) to the NeoX
    layout (pairs ``i, i + d/2``): the permutation ``transformers``' LLaMA conversion script
    applies to the q/k projection rows of a Meta checkpoint."""
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(x.shape)


def neox_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_neox`."""
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], 2, d // 2).transpose(-1, -2).reshape(x.shape)


# --- cos / sin cache --------------------------------------------------------------------------


@dataclass(eq=False)
class CosSinCache:
    """A GPT-NeoX style cos/sin cache: float32 tables over ``max_positions`` positions for the
    first ``rotary_dim`` dimensions, built once on first use and looked up per token.

    Tables are kept per (evaluation mode, device). The mode is the dtype a bf16 factory call
    returns at the time of the call: bfloat16 normally, float64 / float32 under kcert's real mode.
    So the oracle builds its own exact table instead of inheriting a float32 (or, in a defective
    cache, bf16) one built outside, as a module materialised in real mode would."""

    rotary_dim: int
    base: float
    max_positions: int

    def __post_init__(self):
        self._tables: dict = {}

    def build(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """The tables ``(max_positions, rotary_dim)``: angles ``t * inv_freq`` in float32."""
        inv_freq = default_inv_freq(self.rotary_dim, self.base, device)
        t = torch.arange(self.max_positions, device=device).type_as(inv_freq)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def tables(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        mode = torch.zeros((), dtype=torch.bfloat16, device=device).dtype
        key = (mode, str(device))
        if key not in self._tables:
            self._tables[key] = self.build(device)
        return self._tables[key]

    def lookup(self, position_ids: torch.Tensor, dtype: torch.dtype | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin rows of the given positions, ``(batch, seq, rotary_dim)``, cast to ``dtype``
        (kept in the table's precision when ``dtype`` is None)."""
        cos, sin = self.tables(position_ids.device)
        cos, sin = cos[position_ids], sin[position_ids]
        return (cos, sin) if dtype is None else (cos.to(dtype), sin.to(dtype))


def rope_neox_cached(q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor, *, cache: CosSinCache
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference GPT-NeoX RoPE: cos/sin from a float32 cache cast to the working dtype, partial
    NeoX rotation of the first ``cache.rotary_dim`` dimensions in the working dtype."""
    cos, sin = cache.lookup(position_ids, q.dtype)
    return (apply_rotary_neox(q, cos, sin, cache.rotary_dim), apply_rotary_neox(k, cos, sin, cache.rotary_dim))


# --- model configurations (public configs) -----------------------------------------------------


@dataclass(frozen=True)
class RopeModel:
    """The RoPE settings of a model family, with its context and (scaled variants) original context."""

    name: str
    head_dim: int
    base: float
    context: int
    frequencies: FrequencyRule
    original_context: int | None = None


def _model(name, head_dim, base, context, rule=default_frequencies, original_context=None, **scaling) -> RopeModel:
    return RopeModel(name, head_dim, base, context, partial(rule, dim=head_dim, base=base, **scaling), original_context)


# Llama 2 (and Meta's original LLaMA code): d = 128, base 1e4, 4096 positions.
LLAMA2 = _model("llama2", 128, 10000.0, 4096)
# Gemma (2B/7B): d = 256, base 1e4, 8192 positions (transformers PR #29285).
GEMMA = _model("gemma", 256, 10000.0, 8192)
# Qwen2 / Qwen3 family: base 1e6, 32768 positions.
QWEN = _model("qwen", 128, 1000000.0, 32768)
# Llama 3.1: base 5e5, llama3 scaling factor 8 over an original 8192 context, 131072 positions.
LLAMA31 = _model("llama3.1", 128, 500000.0, 131072, llama3_frequencies, 8192, factor=8.0, low_freq_factor=1.0,
                 high_freq_factor=4.0, original_max_position_embeddings=8192)
# A YaRN model with factor 16 and mscale = mscale_all_dim = 1 (the Ministral 3 setting of sglang
# PR #22711): attention factor 1. Original context 16384 is this contract's choice.
YARN16 = _model("yarn16", 128, 1000000.0, 262144, yarn_frequencies, 16384, factor=16.0,
                original_max_position_embeddings=16384, mscale=1.0, mscale_all_dim=1.0)
# Llama 2 with dynamic NTK scaling, factor 2, run to 16384 positions.
LLAMA2_DYNAMIC = _model("llama2-dynamic-ntk", 128, 10000.0, 16384, dynamic_ntk_frequencies, 4096, factor=2.0,
                        original_max_position_embeddings=4096)

# GPT-NeoX / Pythia 6.9B: d = 128, rotary_pct 0.25 (32 rotary dims, as in gpt-neox #1003), base 1e4,
# 2048 positions.
NEOX_HEAD_DIM = 128
NEOX_ROTARY_DIM = 32
NEOX_CONTEXT = 2048
NEOX_BASE = 10000.0


# --- buckets and probe contract ---------------------------------------------------------------

DEFAULT_EDGES = (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)


def block_edges(context: int, first: int = 1024) -> tuple[int, ...]:
    """Log-spaced position blocks ``0, first, 2 first, ... , context``."""
    edges = [0]
    e = first
    while e < context:
        edges.append(e)
        e *= 2
    edges.append(context)
    return tuple(edges)


def position_dim_buckets(edges: Sequence[int] = DEFAULT_EDGES, head_dim: int = 128) -> Labels:
    """One bucket per (position block, head dimension): label ``block * head_dim + dim``, block
    ``b`` holding positions in ``[edges[b], edges[b+1])`` (the last block also takes anything
    beyond). Needs the ``position_ids`` input, ``(batch, seq)``, and outputs ``(batch, heads,
    seq, head_dim)``."""
    edges = tuple(int(e) for e in edges)
    if len(edges) < 2 or any(b <= a for a, b in pairwise(edges)):
        raise ValueError(f"edges must be increasing with at least two entries, got {edges}")
    n_blocks = len(edges) - 1

    def label(inputs, weights, ref_out):
        pos = inputs["position_ids"]
        inner = torch.tensor(edges[1:-1], dtype=pos.dtype, device=pos.device)
        block = torch.bucketize(pos, inner, right=True)
        dims = torch.arange(head_dim, device=pos.device)
        return block[:, None, :, None] * head_dim + dims

    spans = ", ".join(f"{a}-{b}" for a, b in pairwise(edges))
    return Labels(label, count=n_blocks * head_dim, name=f"block*{head_dim}+dim (blocks {spans})")


def rope_inputs(*, batch: int = 1, heads: int = 2, kv_heads: int = 1, seq: int = 64, head_dim: int = 128,
                low: int = 0, high: int = 4096, shift: float = 0.1, std: float = 1.0) -> dict:
    """The probe contract: q ``(batch, heads, seq, head_dim)`` and k ``(batch, kv_heads, seq,
    head_dim)`` ~ N(shift, std^2) in the working dtype, shifted to break the symmetry ``x ~ -x``
    (by default a GQA slice, 2 query heads sharing 1 kv head: RoPE rotates every head alike, so
    more heads add elements, not information); position ids drawn uniformly in ``[low, high)``
    per token (a long-context step sees every position of its window, and RoPE acts on each token
    alone, so a sample of positions is a sample of the rows of a full-length sequence)."""
    return {
        "q": Gaussian((batch, heads, seq, head_dim), shift=shift, std=std),
        "k": Gaussian((batch, kv_heads, seq, head_dim), shift=shift, std=std),
        "position_ids": positions((batch, seq), low, high),
    }


TRIGGERS = (
    "positions far beyond 4096 and beyond the original context of scaled variants (phase errors grow with position)",
    "every frequency pair, high to low (layout, band-wise scaling, rounded frequencies)",
    "q/k shifted off zero (multiplicative errors such as an attention factor)",
)


def rope_operator(model: RopeModel, *, layout: str = "neox", name: str | None = None) -> Operator:
    """The reference RoPE operator of ``model`` in ``layout`` ('neox' or 'interleaved'), with its
    probe contract (positions over the whole context by default) and position x dim buckets."""
    kernel = {"neox": rope_neox, "interleaved": rope_interleaved}[layout]
    reference = partial(kernel, frequencies=model.frequencies)

    def inputs(**contract):
        contract.setdefault("head_dim", model.head_dim)
        contract.setdefault("high", model.context)
        return rope_inputs(**contract)

    return Operator(
        name=name or f"rope_{layout}_{model.name}",
        family="rope",
        reference=reference,
        inputs=inputs,
        buckets=position_dim_buckets(block_edges(model.context), model.head_dim),
        triggers=TRIGGERS,
        description=f"RoPE ({layout} layout) of {model.name}: d = {model.head_dim}, base {model.base:g}, "
                    f"context {model.context}" + (f" (original {model.original_context})" if model.original_context else ""),
    )


def neox_cache() -> CosSinCache:
    """The GPT-NeoX (Pythia 6.9B) cos/sin cache."""
    return CosSinCache(NEOX_ROTARY_DIM, NEOX_BASE, NEOX_CONTEXT)


def _neox_cached_operator() -> Operator:
    def inputs(**contract):
        contract.setdefault("head_dim", NEOX_HEAD_DIM)
        contract.setdefault("high", NEOX_CONTEXT)
        return rope_inputs(**contract)

    return Operator(
        name="rope_neox_cached_gptneox",
        family="rope",
        reference=partial(rope_neox_cached, cache=neox_cache()),
        inputs=inputs,
        buckets=position_dim_buckets((0, 256, 512, 1024, NEOX_CONTEXT), NEOX_HEAD_DIM),
        triggers=TRIGGERS,
        description=f"GPT-NeoX RoPE from a float32 cos/sin cache: d = {NEOX_HEAD_DIM}, {NEOX_ROTARY_DIM} rotary "
                    f"dims, base {NEOX_BASE:g}, context {NEOX_CONTEXT}",
    )


ROPE_LLAMA2 = rope_operator(LLAMA2)
ROPE_GEMMA = rope_operator(GEMMA)
ROPE_QWEN = rope_operator(QWEN)
ROPE_LLAMA31 = rope_operator(LLAMA31)
ROPE_YARN16 = rope_operator(YARN16)
ROPE_LLAMA2_DYNAMIC = rope_operator(LLAMA2_DYNAMIC)
ROPE_INTERLEAVED_LLAMA2 = rope_operator(LLAMA2, layout="interleaved")
# Meta's Llama 3.1 reference code: interleaved layout, llama3-scaled frequencies, complex float32 product.
ROPE_INTERLEAVED_LLAMA31 = rope_operator(LLAMA31, layout="interleaved")
ROPE_NEOX_CACHED = _neox_cached_operator()

OPERATORS = {op.name: op for op in (ROPE_LLAMA2, ROPE_GEMMA, ROPE_QWEN, ROPE_LLAMA31, ROPE_YARN16,
                                     ROPE_LLAMA2_DYNAMIC, ROPE_INTERLEAVED_LLAMA2, ROPE_INTERLEAVED_LLAMA31,
                                     ROPE_NEOX_CACHED)}
