"""RoPE controls: six public defects (negatives) and six known-good kernels or rewrites (positives).

The references (frequency rules, cos/sin, the NeoX and interleaved rotations, the GPT-NeoX cache,
the model configurations and the probe contracts) come from :mod:`kcert.catalog.rope`; this module
only writes the production side of each pair. Every contract draws position ids per token over
the model's whole context (far beyond 4096, and beyond the original context of the scaled
variants), with q/k ~ N(0.1, 1) in bf16 and buckets by (position block, head dimension).
"""

from __future__ import annotations

import math
from functools import partial

import torch

from ..case import Case
from ..catalog import rope as R
from .registry import negative, positive

FAMILY = "rope"
# Every negative is a phase or magnitude error of order 1e-2 to 1 (|z| in the tens to hundreds
# and K in the tens to thousands at R = 256): 256 replicates are ample. Positives use the default 1024.
NEG_REPLICATES = 256


# --- production-side kernels (correct ones, for the positives) ---------------------------------


def rope_interleaved_fused(q, k, position_ids, *, frequencies):
    """A fused interleaved-layout RoPE kernel (flash-attention's rotary with interleaved=True):
    cos/sin of float32 angles per token, pairs (2i, 2i+1) rotated with real float32 arithmetic,
    one rounding."""
    inv_freq, scaling = frequencies(position_ids)
    angles = position_ids.float()[..., None] * inv_freq.float()
    cos, sin = (angles.cos() * scaling)[:, None], (angles.sin() * scaling)[:, None]

    def rotate(x):
        x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2).to(x.dtype)

    return rotate(q), rotate(k)


def rope_neox_complex(q, k, position_ids, *, frequencies):
    """NeoX RoPE as a complex product: the halves ``(x_i, x_{i+d/2})`` are the real and
    imaginary parts of ``z_i``, rotated by ``exp(i * position * inv_freq_i)``, float32 complex
    arithmetic, one rounding."""
    inv_freq, scaling = frequencies(position_ids)
    angles = position_ids.float()[..., None] * inv_freq.float()
    rot = torch.polar(torch.full_like(angles, scaling), angles)[:, None]  # (batch, 1, seq, d/2)

    def rotate(x):
        half = x.shape[-1] // 2
        z = torch.complex(x[..., :half].float(), x[..., half:].float()) * rot
        return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)

    return rotate(q), rotate(k)


class _HalfWidthCache(R.CosSinCache):
    """vLLM's ``cos_sin_cache``: float32 cos and sin of ``t * inv_freq`` for every position, one
    column per frequency (d/2 columns each)."""

    def build(self, device):
        inv_freq = R.default_inv_freq(self.rotary_dim, self.base, device)
        t = torch.arange(self.max_positions, dtype=torch.float, device=device)
        freqs = torch.einsum("i,j->ij", t, inv_freq)
        return freqs.cos(), freqs.sin()


def rope_neox_cache_native(q, k, position_ids, *, cache):
    """vLLM's ``RotaryEmbedding.forward_native`` (NeoX style): cache rows gathered by position,
    cast to the query dtype, ``(x1 c - x2 s, x2 c + x1 s)`` in the working dtype."""
    cos, sin = cache.lookup(position_ids, q.dtype)  # (batch, seq, d/2)
    cos, sin = cos[:, None], sin[:, None]

    def rotate(x):
        x1, x2 = torch.chunk(x, 2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return rotate(q), rotate(k)


def rope_interleaved_on_neox_layout(q, k, position_ids, *, frequencies):
    """Meta's interleaved kernel run on NeoX-layout q/k: permute each head to the interleaved
    layout (undoing the conversion permutation), rotate pairs (2i, 2i+1), permute back."""
    qi, ki = R.neox_to_interleaved(q), R.neox_to_interleaved(k)
    qo, ko = R.rope_interleaved(qi, ki, position_ids, frequencies=frequencies)
    return R.interleaved_to_neox(qo), R.interleaved_to_neox(ko)


def llama3_frequencies_clamped(position_ids, *, dim, base, factor, low_freq_factor, high_freq_factor,
                               original_max_position_embeddings):
    """Llama 3.1 frequencies with one clamped smoothing factor, affine in the frequency, instead
    of three wavelength bands: ``s = clamp(a f + b, 0, 1)`` with ``a = L / (2 pi (high - low))``,
    ``b = -low / (high - low)``, ``f' = (1 - s) f / factor + s f`` (the form in-kernel
    implementations such as FlashInfer's llama 3.1 RoPE use, with a and b precomputed)."""
    inv_freq = R.default_inv_freq(dim, base, position_ids.device)
    a = original_max_position_embeddings / (2 * math.pi * (high_freq_factor - low_freq_factor))
    b = -low_freq_factor / (high_freq_factor - low_freq_factor)
    smooth = (inv_freq * a + b).clamp(0, 1)
    return (1 - smooth) * inv_freq / factor + smooth * inv_freq, 1.0


def dynamic_ntk_frequencies_scaled(position_ids, *, dim, base, factor, original_max_position_embeddings):
    """Dynamic NTK by scaling the frequencies instead of the base:
    ``(base * a**(d/(d-2)))**(-2i/d) = base**(-2i/d) * a**(-2i/(d-2))``, ``a = factor * n / L - (factor - 1)``."""
    seq_len = int(position_ids.max()) + 1
    inv_freq = R.default_inv_freq(dim, base, position_ids.device)
    if seq_len <= original_max_position_embeddings:
        return inv_freq, 1.0
    alpha = factor * seq_len / original_max_position_embeddings - (factor - 1)
    exponent = torch.arange(0, dim, 2, dtype=torch.int64, device=position_ids.device).float() / (dim - 2)
    return inv_freq * alpha ** (-exponent), 1.0


# --- production-side kernels with the public defects --------------------------------------------


def rope_neox_autocast_angles(q, k, position_ids, *, frequencies):
    """The rotary forward without an autocast guard, run under bf16 autocast as a mixed-precision
    training step runs it: the angle matmul ``inv_freq @ position_ids`` is on autocast's
    lower-precision list, so both operands and the angles are bf16."""
    with torch.autocast(device_type=q.device.type, dtype=torch.bfloat16):
        inv_freq, scaling = frequencies(position_ids)
        inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv_freq_expanded @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (emb.cos() * scaling).to(q.dtype), (emb.sin() * scaling).to(q.dtype)
        return R.apply_rotary_neox(q, cos, sin), R.apply_rotary_neox(k, cos, sin)


class _ModelDtypeCache(R.CosSinCache):
    """A GPT-NeoX cache whose inv_freq buffer was cast with the model to bf16: positions take the
    buffer's dtype (``arange(...).type_as(inv_freq)``), angles and cos/sin are bf16."""

    def build(self, device):
        inv_freq = R.default_inv_freq(self.rotary_dim, self.base, device).to(torch.bfloat16)
        t = torch.arange(self.max_positions, device=device).type_as(inv_freq)
        freqs = torch.einsum("i,j->ij", t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def llama3_frequencies_unscaled(position_ids, *, dim, base, factor, low_freq_factor, high_freq_factor,
                                original_max_position_embeddings):
    """The band-wise scaled frequencies are computed into a new tensor, but the function returns
    the tensor it started from: the default frequencies."""
    inv_freq = R.default_inv_freq(dim, base, position_ids.device)
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    scaled = torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)  # computed, then dropped
    return inv_freq, 1.0


def yarn_frequencies_default_mscale(position_ids, *, dim, base, factor, original_max_position_embeddings,
                                    mscale=None, mscale_all_dim=None, **kw):
    """YaRN with the model's ``mscale`` / ``mscale_all_dim`` not passed through: the magnitude
    factor falls back to ``0.1 ln(factor) + 1`` times an ``attn_factor`` of 1."""
    inv_freq = R.yarn_inv_freq(dim, base, factor, original_max_position_embeddings, device=position_ids.device, **kw)
    return inv_freq, R.yarn_get_mscale(factor) * 1.0


def rope_neox_bf16_inv_freq(q, k, position_ids, *, frequencies):
    """Frequencies converted to the model dtype before the phase; the phase itself, cos and sin
    are float32 (positions are float32, so the product is promoted back)."""
    inv_freq, scaling = frequencies(position_ids)
    inv_freq = inv_freq.to(q.dtype)
    angles = position_ids.float()[..., None] * inv_freq.float()
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = (emb.cos() * scaling).to(q.dtype), (emb.sin() * scaling).to(q.dtype)
    return R.apply_rotary_neox(q, cos, sin), R.apply_rotary_neox(k, cos, sin)


def _rule(model: R.RopeModel, rule) -> partial:
    """``rule`` with ``model``'s settings (dim, base, scaling)."""
    return partial(rule, **model.frequencies.keywords)


# --- negatives ----------------------------------------------------------------------------------


@negative(FAMILY, "transformers #25199", replicates=NEG_REPLICATES, expect="FAIL")
def neox_rotation_on_interleaved_weights() -> Case:
    """NeoX half rotation applied to q/k in the interleaved (GPT-J / Meta) layout.

    Source: transformers #25199 (huggingface/transformers issue, "[LLaMA] Rotary positional
    embedding differs with official implementation"). Meta's checkpoints put the two components
    of frequency pair i in head dims (2i, 2i+1) and    rotate them as a complex number; transformers rotates dims (i, i + d/2) (rotate_half) and is
    only right because its conversion script permutes the q/k projection rows. A model whose
    weights skip that permutation (a Meta-layout checkpoint loaded into a NeoX-rotation kernel)
    computes, for the Meta-layout q, y_j = q_j cos(p f_(j mod d/2)) -+ q_(j +- d/2) sin(...): the
    wrong dims are paired and dim j turns at frequency f_(j mod d/2) instead of f_(j // 2), so
    q_m . k_n is no longer a function of m - n.

    Faithful: ref is the interleaved kernel (Meta's complex product, float32, one rounding) with
    Llama 2's frequencies, prod the transformers NeoX kernel on the very same Meta-layout q/k, as
    after a load without the permutation; positions over Llama 2's 4096 context. The difference
    is algebraic: the algebra gate sees it at O(1).
    """
    op = R.ROPE_INTERLEAVED_LLAMA2
    return op.case("neox_rotation_on_interleaved_weights", partial(R.rope_neox, frequencies=R.LLAMA2.frequencies),
                   output_names=("q", "k"))


@negative(FAMILY, "transformers PR #29285", replicates=NEG_REPLICATES, expect="FAIL", quick=True)
def angles_bf16_autocast() -> Case:
    """RoPE angles position x inv_freq computed in bf16 under autocast.

    Source: transformers PR #29285 (huggingface/transformers, "RoPE loses precision for Llama /
    Gemma"). Under bf16 mixed precision the rotary forward's angle matmul inv_freq @ position_ids
    is autocast to bf16,    so theta' = bf16(bf16(p) * bf16(f)) instead of theta = p * f (float32). With 8 significand bits
    the position alone is off by up to 2^(floor(log2 p) - 8) (16 at p ~ 4096-8191) and the angle by
    half a bf16 ULP of theta: phase errors of whole radians for p in the thousands, i.e. cos/sin of
    the wrong angle. The fix disables autocast around the angle computation.

    Faithful: ref is the fixed transformers forward (float32 angles with autocast disabled, cos/sin
    cast to bf16, NeoX rotation in bf16) with Gemma's RoPE (d = 256, base 1e4); prod is the same
    code without the guard, run under torch.autocast(bf16) as a Trainer/accelerate bf16 step runs
    it, so the matmul and only it drops to bf16 by autocast's own rules. Positions over Gemma's
    8192 context; q/k in Gemma's MQA shape (2 query heads shown, 1 kv head).
    """
    op = R.ROPE_GEMMA
    return op.case("angles_bf16_autocast", partial(rope_neox_autocast_angles, frequencies=R.GEMMA.frequencies),
                   heads=2, kv_heads=1, output_names=("q", "k"))


@negative(FAMILY, "gpt-neox #1003", replicates=NEG_REPLICATES, expect="FAIL")
def cos_sin_cache_bf16() -> Case:
    """GPT-NeoX cos/sin cache built and stored in bf16.

    Source: gpt-neox #1003 (EleutherAI/gpt-neox issue, "RotaryEmbedding computation is wrong for
    certain position/feature pairs in reduced precision"). The inv_freq buffer is cast to the
    model's half precision, the positions t = arange(seq).type_as(inv_freq) follow it, and the
    table cos(t f), sin(t f) is computed and stored in that precision. For large t f the rounding
    of t, f and t*f is large against the 2 pi period (the issue shows, in fp16, emb[1857, 1] =
    1045 instead of 1044.27 and a cos error of 0.78; bf16 has 3 bits fewer):
    cos_cached[p, i] = cos(bf16(bf16(p) bf16(f_i))) instead of cos(p f_i).

    Faithful: ref is the GPT-NeoX rotary with a float32 cache cast to bf16 at lookup and the
    partial NeoX rotation of the first 32 of 128 head dims (Pythia 6.9B: rotary_pct 0.25; the
    issue's dim = 32, base 1e4); prod builds the same cache from the bf16 buffer exactly as the
    module did. Positions over the 2048 training context, where the issue was found.
    """
    op = R.ROPE_NEOX_CACHED
    cache = _ModelDtypeCache(R.NEOX_ROTARY_DIM, R.NEOX_BASE, R.NEOX_CONTEXT)
    return op.case("cos_sin_cache_bf16", partial(R.rope_neox_cached, cache=cache), output_names=("q", "k"))


@negative(FAMILY, "transformers PR #32330", replicates=NEG_REPLICATES, expect="FAIL", quick=True)
def llama3_unscaled_inv_freq() -> Case:
    """Llama 3.1 frequency scaling computed, then the unscaled inv_freq returned.

    Source: transformers PR #32330 (huggingface/transformers, "Llama 3.1: Fix incorrect inv_freq
    assignment"). The llama3 rule computed the band-wise scaled frequencies f'_i (f_i for
    wavelengths under 8192/4, f_i / 8 above 8192, interpolated between) into a new variable and
    returned the original f_i. Every pair whose wavelength exceeds 2048 then turns up to 8x too fast: angle p f_i instead
    of p f_i / 8, wrong at every position > 0 and catastrophically beyond the original 8192.

    Faithful: ref is the correct llama3 rule (base 5e5, factor 8, low/high frequency factors 1/4,
    original context 8192) in the transformers rotary forward; prod is the same forward whose rule
    computes the scaled tensor and returns the default one. Positions over Llama 3.1's 131072
    context. Algebraic: the algebra gate sees it directly.
    """
    op = R.ROPE_LLAMA31
    prod = partial(R.rope_neox, frequencies=_rule(R.LLAMA31, llama3_frequencies_unscaled))
    return op.case("llama3_unscaled_inv_freq", prod, output_names=("q", "k"))


@negative(FAMILY, "sglang PR #22711", replicates=NEG_REPLICATES, expect="FAIL")
def yarn_attention_factor_wrong() -> Case:
    """YaRN attention factor 0.1 ln(f) + 1 where the model's config makes it 1.

    Source: sglang PR #22711 (sgl-project/sglang, "fix: correct YaRN RoPE mscale calculation for
    models with mscale/mscale_all_dim"). The model (Ministral 3: factor f = 16, mscale =
    mscale_all_dim = 1) expects the transformers rule attention_factor = get_mscale(f, mscale) /
    get_mscale(f, mscale_all_dim) = 1, but sglang's YaRN ignored both fields and scaled cos and sin by get_mscale(f) =
    0.1 ln 16 + 1 = 1.277: q_embed and k_embed 27.7% too large, the attention logits by 1.277^2.

    Faithful: ref is the transformers YaRN rule (NTK-by-parts frequencies, beta 32/1, attention
    factor from mscale / mscale_all_dim) in the transformers rotary forward; prod computes the
    same frequencies and takes the factor the way the unfixed code did (get_mscale(f) times an
    attn_factor of 1). Positions over the extended 262144 context (original 16384).
    """
    op = R.ROPE_YARN16
    prod = partial(R.rope_neox, frequencies=_rule(R.YARN16, yarn_frequencies_default_mscale))
    return op.case("yarn_attention_factor_wrong", prod, output_names=("q", "k"))


@negative(FAMILY, "sglang-jax #1472", replicates=NEG_REPLICATES, expect="FAIL")
def inv_freq_rounded_bf16() -> Case:
    """inv_freq rounded to bf16 before the (float32) phase.

    Source: sglang-jax #1472 (sgl-project/sglang-jax issue, "RoPE inverse frequencies are
    quantized before phase computation"). The float32 inverse frequencies were converted to the
    model dtype (bf16) before the float32 einsum with the positions, so theta = p * bf16(f_i): a
    relative frequency error up to 2^-9 becomes a phase error up to p f_i 2^-9, about 8 rad at
    p f ~ 4096 (the fix, PR #1473, reports 72/128 mismatched values, max 0.83, at position 4095).

    Faithful: ref is the float32-phase forward (transformers convention) with a Qwen-style RoPE
    (d = 128, base 1e6, 32768 positions); prod rounds inv_freq to the working dtype and keeps the
    rest float32, as the JAX code did (positions float32 promote the product back). Positions over
    the 32768 context.
    """
    op = R.ROPE_QWEN
    prod = partial(rope_neox_bf16_inv_freq, frequencies=R.QWEN.frequencies)
    return op.case("inv_freq_rounded_bf16", prod, output_names=("q", "k"))


# --- positives ----------------------------------------------------------------------------------


@positive(FAMILY, "benign rewrite: NeoX rotation as a complex product", expect="PASS", quick=True)
def neox_complex_formulation() -> Case:
    """NeoX RoPE written as a float32 complex product vs the transformers bf16 rotation.

    Source: the two textbook forms of RoPE (RoFormer's complex form; transformers' rotate_half).
    Benign: with z_i = x_i + i x_(i+d/2), z_i exp(i p f_i) = (x_i cos - x_(i+d/2) sin) +
    i (x_i sin + x_(i+d/2) cos), exactly the NeoX rotation; the rewrite computes it in float32 and
    rounds once where transformers rounds cos, sin, both products and the sum to bf16, so prod is
    the more accurate side.

    Faithful: ref is the transformers rotary forward with Llama 2's RoPE, prod builds
    exp(i p f) with torch.polar from the same float32 angles; positions over the 4096 context.
    """
    op = R.ROPE_LLAMA2
    return op.case("neox_complex_formulation", partial(rope_neox_complex, frequencies=R.LLAMA2.frequencies),
                   output_names=("q", "k"))


@positive(FAMILY, "real kernel: vLLM RotaryEmbedding.forward_native (float32 cos_sin_cache)", expect="PASS")
def cos_sin_float32_cache() -> Case:
    """A float32 cos/sin cache gathered per token (vLLM) vs cos/sin computed on the fly (transformers).

    Source: vLLM's RotaryEmbedding (a float32 cos_sin_cache of cos(t f_i), sin(t f_i) for every
    position, built once; forward_native gathers rows by position, casts them to the query dtype
    and rotates) against transformers' LlamaRotaryEmbedding, which computes the same float32
    angles per call.
    Benign: the cache row of position p holds cos/sin of the same float32 angle p * f_i; both
    round cos/sin to bf16 and rotate in bf16 ((x1 c - x2 s) is (x1 c + (-x2) s) exactly), so the
    two agree up to the float32 cos/sin evaluation of different tensor shapes (bitwise, on the
    CPU this control was calibrated on).

    Faithful: ref is the transformers forward with a Qwen-style RoPE (base 1e6); prod a 32768 x 64
    float32 table built once, gathered by position_ids; positions over the whole 32768 context.
    """
    op = R.ROPE_QWEN
    cache = _HalfWidthCache(R.QWEN.head_dim, R.QWEN.base, R.QWEN.context)
    return op.case("cos_sin_float32_cache", partial(rope_neox_cache_native, cache=cache), output_names=("q", "k"))


@positive(FAMILY, "benign rewrite: llama3 scaling with a clamped smoothing factor (FlashInfer llama 3.1 RoPE)", expect="PASS")
def llama3_scaling_clamped() -> Case:
    """Llama 3.1 frequency scaling by one clamped smoothing factor vs three explicit bands.

    Source: Meta's llama3 scaling rule as transformers writes it (torch.where over wavelength
    bands) and as in-kernel implementations write it (one smoothing factor clamped to [0, 1]).
    Benign: with s = (L / wavelength - low) / (high - low), s >= 1 exactly on the short-wavelength
    band (keep f), s <= 0 exactly on the long one (f / factor), and the middle band is
    (1 - s) f / factor + s f in both: the same real function, different float32 roundings of f'.

    Faithful: both sides are the transformers rotary forward with Llama 3.1's RoPE (base 5e5,
    factor 8, 1/4, original 8192); only the frequency rule differs. Positions over the full
    131072 context, where a frequency difference would show as a phase difference.
    """
    op = R.ROPE_LLAMA31
    prod = partial(R.rope_neox, frequencies=_rule(R.LLAMA31, llama3_frequencies_clamped))
    return op.case("llama3_scaling_clamped", prod, output_names=("q", "k"))


@positive(FAMILY, "stressed probe: Llama 3.1 to 131072 positions, fused float32 interleaved kernel vs Meta's reference", expect="PASS")
def long_positions_fused_float32() -> Case:
    """A correct fused RoPE kernel with float32 angles at positions up to 131072.

    Source: Meta's Llama 3.1 reference RoPE (interleaved layout, llama3-scaled frequencies,
    float32 complex product, one rounding) against a fused kernel of the flash-attention kind
    (rotary with interleaved=True: float32 cos/sin per token, real float32 arithmetic, one
    rounding).
    Benign: the same float32 angles p * f'_i and the same rotation; only the float32 evaluation of
    the product differs. The probe is the stress: at p ~ 1e5 the float32 angle is itself off the
    exact one by up to ~1e-2 rad, an error both sides share (the oracle computes exact angles),
    so it tests that a shared working-precision error at long positions is not charged to prod.

    Faithful: Llama 3.1's RoPE (base 5e5, llama3 factor 8, original 8192); positions uniform over
    the full [0, 131072), most of them beyond the original context.
    """
    op = R.ROPE_INTERLEAVED_LLAMA31
    return op.case("long_positions_fused_float32",
                   partial(rope_interleaved_fused, frequencies=R.LLAMA31.frequencies), output_names=("q", "k"))


@positive(FAMILY, "benign rewrite: Meta interleaved kernel on consistently permuted q/k (transformers LLaMA conversion)", expect="PASS")
def interleaved_kernel_permuted_layout() -> Case:
    """The interleaved (Meta) kernel on q/k permuted to its layout vs the NeoX kernel.

    Source: transformers' LLaMA conversion permutes q/k projection rows so that dims (2i, 2i+1)
    become (i, i + d/2) (the answer to transformers #25199).
    Benign: with P that permutation, interleaved_rope(P^-1 x) = P^-1 neox_rope(x) for every x, so
    P interleaved_rope(P^-1 x) is the NeoX rotation exactly (same pairs, same frequencies); prod
    computes it as Meta's float32 complex product, rounded once.

    Faithful: ref is the transformers NeoX forward with Llama 2's RoPE on NeoX-layout q/k; prod
    permutes each head to Meta's layout, runs the catalogue's interleaved reference, permutes back.
    Positions over the 4096 context. Numerically prod does the float32 arithmetic of
    neox_complex_formulation; what this control adds is the layout round trip.
    """
    op = R.ROPE_LLAMA2
    prod = partial(rope_interleaved_on_neox_layout, frequencies=R.LLAMA2.frequencies)
    return op.case("interleaved_kernel_permuted_layout", prod, output_names=("q", "k"))


@positive(FAMILY, "benign rewrite: dynamic NTK by scaling the frequencies instead of the base", expect="PASS")
def dynamic_ntk_frequency_scaling() -> Case:
    """Dynamic NTK computed from a scaled base vs by scaling the default frequencies.

    Source: transformers' dynamic NTK rule (base' = base a^(d/(d-2)), a = factor n / L - (factor - 1),
    n = max position + 1) and its frequency-domain form.
    Benign: base'^(-2i/d) = base^(-2i/d) a^(-2i/(d-2)) exactly; the two differ only in the float32
    roundings of f'_i (a few float32 ULPs), i.e. phase differences of ~1e-7 p f'_i.

    Faithful: both sides are the transformers rotary forward with Llama 2's RoPE and dynamic NTK
    factor 2 over an original 4096 context; positions over [0, 16384), four times the original
    context, so the NTK branch is the one taken.
    """
    op = R.ROPE_LLAMA2_DYNAMIC
    prod = partial(R.rope_neox, frequencies=_rule(R.LLAMA2_DYNAMIC, dynamic_ntk_frequencies_scaled))
    return op.case("dynamic_ntk_frequency_scaling", prod, output_names=("q", "k"))
