"""Attention controls: 7 reproductions of public attention/softmax defects (negatives) and 8
known-good kernels, benign rewrites and stressed probes (positives).

References, masks and probe contracts come from :mod:`kcert.catalog.attention` and
:mod:`kcert.catalog.softmax`; this module only writes the production kernels under test. Shapes are
small enough for CPU certification (heads 4-8, sequence 64-512, head_dim 64-256) and keep the
production *ratios* that trigger each defect (window shorter than the sequence, GQA groups,
Gemma-2's head_dim 256, logits beyond the softcap and beyond 88, padded batches).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from ..catalog import attention as att
from ..catalog import softmax as sm
from .registry import negative, positive

FAMILY = "attention"

# Contracts shared by several controls.
GQA = {"batch": 1, "heads": 4, "kv_heads": 2, "seq": 128, "head_dim": 64}  # GQA groups of 2 (axlearn #842's shape)
GEMMA2 = {"batch": 1, "heads": 4, "kv_heads": 2, "seq": 64}  # head_dim 256 from the operator
PADDED = {"batch": 2, "heads": 4, "kv_heads": 2, "seq": 64, "head_dim": 64}  # a padded batch of 2
QK_OUTLIERS = {"qk_outlier_channels": 4, "qk_outlier_scale": 16.0, "qk_outlier_tokens": 0.125}  # ~6% rows past 50
WINDOW = att.SLIDING_WINDOW  # 32 keys, shorter than the 128-token sequence
LANES = 4  # FlashAttention-2 spreads each row of a tile over a quad of 4 threads


# --- production kernels written for these controls ---------------------------------------------


def _attention_neg_inf_mask(q, k, v, key_valid=None, *, causal=True, window=None):
    """Naive attention masking with -inf (the 'naive_fsdpa_1' of pytorch #103749, which behaved
    like SDPA did then): a boolean mask filled with -inf, float32 softmax, working dtype."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = att.repeat_kv(k, n_rep), att.repeat_kv(v, n_rep)
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    allowed = att.allowed_keys(q.shape[-2], k.shape[-2], causal=causal, window=window, key_valid=key_valid,
                               device=q.device)
    scores = scores.masked_fill(~allowed, -math.inf)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


def _attention_tiled_kv(q, k, v):
    """Eager attention fed with kv heads tiled along the head axis: query head h reads kv head
    ``h % H_kv`` instead of ``h // (H / H_kv)``."""
    n_rep = q.shape[1] // k.shape[1]
    return att.eager_attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1))


def _attention_expand_reshape_kv(q, k, v):
    """Eager attention with Llama's expand + reshape GQA instead of repeat_interleave."""
    n_rep = q.shape[1] // k.shape[1]
    return att.eager_attention(q, att.repeat_kv_expand(k, n_rep), att.repeat_kv_expand(v, n_rep))


def _softmax_without_max(x):
    """Softmax of a bf16 tensor computed in float32 without subtracting the row maximum:
    ``exp(x) / sum(exp(x))``."""
    e = torch.exp(x.to(torch.float32))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _sdpa_causal_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _sdpa_bool_mask(q, k, v, key_valid=None, *, window=None):
    allowed = att.allowed_keys(q.shape[-2], k.shape[-2], causal=True, window=window, key_valid=key_valid,
                               device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)


# --- negatives ----------------------------------------------------------------------------------


@negative(family=FAMILY, source="transformers #39408 / #29623", replicates=512)
def sliding_window_off_by_one():
    """A sliding window that admits one key too many (W + 1 keys instead of W).

    Source: huggingface/transformers #29623 (Mistral: the eager mask with sliding_window=W lets a
    query see W keys, the flash-attention backend W + 1) and #39408 (transformers passes
    ``window_size=(W, W)`` to flash-attn, whose window is inclusive: keys ``[i - W, i]``).

    What is wrong: the reference attends to ``{j : 0 <= i - j < W}``; the production kernel to
    ``{j : 0 <= i - j <= W}``. For every query with i >= W the extra key i - W enters the softmax,
    ``y' = (1 - p) y + p v_{i-W}`` with ``p`` its attention weight (about 1/W): a real-algebraic
    difference (algebra), an error far above bf16 rounding (variance), and a coherent pull of
    each output towards an unrelated value, ``E[(y' - y) sign(y)] = -p E|y| < 0`` (bias,
    sign-aligned).

    Faithful: prod is a flash-attention-2 style tiled kernel (float32 scores, online softmax) whose
    window is inclusive of the left end, called with the model's ``sliding_window``, exactly the
    wiring of #39408; the reference is transformers' eager mask. The probe keeps the production
    ratio that triggers it: a 32-key window on a 128-token causal sequence (Mistral and Gemma-2
    use 4096-key windows on 8k-32k contexts), GQA 4 query heads / 2 kv heads, head_dim 64.
    """
    op = att.SLIDING_WINDOW_ATTENTION
    # flash_attention's ``window`` counts keys; an inclusive left offset of W is W + 1 keys.
    prod = functools.partial(att.flash_attention, window=WINDOW + 1)
    return op.case("sliding_window_off_by_one", prod, **GQA)


@negative(family=FAMILY, source="transformers #31891", replicates=512)
def gemma2_scale_224():
    """Gemma-2 9B queries scaled by 224 ** -0.5 instead of 256 ** -0.5.

    Source: huggingface/transformers #31891. The Gemma-2 conversion script set
    ``query_pre_attn_scalar = 224`` for the 9B model (hidden_size / num_heads = 3584 / 16), while
    the model was trained with ``head_dim = 256`` (gemma_pytorch commit 03e6575; the Hub config was
    corrected to 256; llama.cpp #8444 confirms only the 9B is affected, the 27B's 144 is right).

    What is wrong: ``scores = (q . k) * 224 ** -0.5 = sqrt(256 / 224) * (q . k) / 16``: every logit is
    1.069 times too large before Gemma-2's softcap ``50 tanh(s / 50)``; the attention is sharper
    than trained. A different real function (algebra) whose error dwarfs bf16 rounding (variance).

    Faithful: the production side is the same eager Gemma-2 attention code (softcap 50, GQA) run
    with the wrong configuration value, which is the mechanism of the report. Probe: head_dim 256
    as in Gemma-2 9B, 4 query heads sharing 2 kv heads, 64 tokens, shifted Gaussian q, k, v.
    """
    prod = functools.partial(att.eager_attention, scale=224 ** -0.5, softcap=att.GEMMA2_SOFTCAP)
    return att.GEMMA2_ATTENTION.case("gemma2_scale_224", prod, **GEMMA2)


@negative(family=FAMILY, source="sglang #33915", replicates=512)
def softcap_dropped():
    """The attention logit softcap silently dropped by the production backend.

    Source: sgl-project/sglang #33915: the FlashInfer backend hands ``logit_cap`` to the deprecated
    ``forward()`` call, which ignores it (the cap is a compile-time property fixed by ``plan()``),
    so Gemma-2 (cap 50) and Grok-1 (cap 30) run uncapped.

    What is wrong: the reference applies ``s -> 50 tanh(s / 50)`` to every logit before the mask
    and softmax; prod uses ``s`` itself. The two agree only where ``|s| << 50`` (the difference is
    ``s^3 / 7500 + ...``); a logit of 60 becomes 41.7 in the reference and stays 60 in prod.

    Faithful: prod is the flash-style kernel (float32 scores, online softmax) the backend runs,
    with the softcap argument dropped; the reference is transformers' eager Gemma-2 attention. The
    probe declares what production sees: massive activations (4 q/k channels x16) on 1 token in
    8, as on the BOS and delimiter tokens of real LLMs; the logits keep a standard deviation near
    4.5 while about 6% of the rows hold a logit beyond the cap of 50 (some beyond 88), the regime
    the cap was introduced for.
    """
    prod = functools.partial(att.flash_attention, scale=att.GEMMA2_QUERY_PRE_ATTN_SCALAR ** -0.5, softcap=None)
    return att.GEMMA2_ATTENTION.case("softcap_dropped", prod, **GEMMA2, **QK_OUTLIERS)


@negative(family=FAMILY, source="axlearn PR #842", replicates=256, quick=True)
def gqa_tiled_not_repeated():
    """GQA kv heads tiled ([0, 1, 0, 1]) instead of repeated ([0, 0, 1, 1]).

    Source: apple/axlearn PR #842, fixing #837, which changed how kv heads are expanded for GQA:
    with 4 query heads and 2 kv heads the original ``jnp.repeat(key, 2, axis=head)`` gives kv
    heads [0, 0, 1, 1], the changed code [0, 1, 0, 1].

    What is wrong: query head h must read kv head ``floor(h / n_rep)`` (the grouping the
    checkpoint was trained with); prod reads ``h mod H_kv``. With 4 query heads and 2 kv heads
    (the report's own example), heads 1 and 2 attend with the wrong keys and values: their output
    is an unrelated attention result, ``E[(y' - y) sign(y)] = E[y' sign(y)] - E|y| < 0`` (bias,
    sign-aligned, localised on those heads), a different real function (algebra), an O(1) error
    (variance); heads 0 and 3 are untouched.

    Faithful: the same eager attention, only the expansion of the kv heads changed from
    repeat_interleave to tile, as in the report; GQA shape 4 query heads / 2 kv heads, head_dim 64,
    128 tokens, causal.
    """
    return att.ATTENTION.case("gqa_tiled_not_repeated", _attention_tiled_kv, **GQA)


@negative(family=FAMILY, source="pytorch PR #62897", replicates=512)
def softmax_no_max_subtraction():
    """Softmax without max subtraction: exp overflows for logits beyond 88.7, giving NaN.

    Source: pytorch/pytorch PR #62897 (bfloat16 softmax on CPU, non-last-dim path), followed by PR
    #63132: the path computed ``exp(x)`` without subtracting the maximum, so an input of 1000
    returned NaN.

    What is wrong: softmax is shift-invariant, ``exp(x_i - m) / sum_j exp(x_j - m)`` for any m; the
    reference takes m = max_j x_j, prod m = 0. In real arithmetic they are equal (the algebra gate
    rightly passes), but in float32 ``exp(x) = inf`` for x > ln(float32 max) = 88.72, and then
    ``inf / inf = NaN`` for the whole row.

    Faithful: prod converts the bf16 logits to float32 and normalises ``exp(x)`` directly, the
    mechanism of the report. Probe: (1, 8, 32, 256) attention logits N(0, 2^2) in which 1 row in 8
    carries an attention-sink logit U(60, 120) on its first key, about half of them beyond 88.7:
    the logits softcaps and QK-norm were introduced against.
    """
    return sm.SOFTMAX.case("softmax_no_max_subtraction", _softmax_without_max)


@negative(family=FAMILY, source="transformers #27341", replicates=256, expect="FAIL", quick=True)
def softmax_denominator_bf16():
    """Online softmax whose running maximum and denominator are accumulated in bfloat16.

    Source: huggingface/transformers #27341 (should softmax be upcast to float32: the accuracy of
    a softmax rests on the precision of the accumulated exp-denominator; PyTorch's own kernels
    accumulate in float32, a kernel accumulating in the narrow dtype does not).

    What is wrong: ``d = sum_j exp(x_j - m)`` is built by the online update
    ``d' = rne_bf16(d * exp(m - m') + exp(x_j - m'))`` over 64 keys per lane. Once ``d`` is large,
    terms below half a bf16 ULP of ``d`` (between 2^-9 d and 2^-8 d) are rounded away and larger
    ones lose their low bits: the denominator is systematically too small, every probability of the row
    too large (``y' = y (1 + delta)``, delta > 0 and growing with the row length). A coherent
    positive bias of the probabilities (bias) and an error of several ULPs where the float32
    reference rounds once (variance). In real arithmetic it is the softmax (algebra passes).

    Faithful: prod is the online softmax of flash attention with bf16 accumulators, each row
    spread over a quad of 4 threads (FlashAttention-2's layout) that each stream 64 of the 256
    keys, merged at the end; the float32 variant of the very same code is the positive control
    ``online_softmax_fp32`` and PASSes. Probe: (1, 8, 32, 256) attention logits N(0, 2^2) with
    sink rows (1 in 8, logit 60-120).
    """
    prod = functools.partial(sm.online_softmax, acc_dtype=torch.bfloat16, lanes=LANES)
    return sm.SOFTMAX.case("softmax_denominator_bf16", prod)


@negative(family=FAMILY, source="pytorch #103749", replicates=256)
def fully_masked_row_nan():
    """Fully masked query rows (left padding) produce NaN where the reference is finite.

    Source: pytorch/pytorch #103749 (SDPA produces NaN with a padding mask): a query row whose
    boolean mask is all False gets -inf for every key and ``softmax([-inf, ..., -inf]) = 0/0``;
    the same attention filled with ``finfo(dtype).min`` gives a finite result. (PyTorch later made
    SDPA return 0 for such rows; the eager reference here returns the uniform average.)

    What is wrong: the reference fills masked logits with ``finfo.min``: a fully masked row has
    equal logits everywhere and attends uniformly, ``y_i = mean_j v_j``, finite. prod fills with
    -inf, ``exp(-inf - (-inf)) = NaN``, and the NaN reaches the output (and in training the
    gradients, even when the loss masks that row).

    Faithful: prod is the naive masked attention of the report (boolean mask, -inf fill, float32
    softmax); the probe is a left-padded causal batch (generation prefill): 2 sequences of 64
    tokens with valid lengths drawn in [32, 64], so the padding queries have no visible key; GQA 4
    query heads / 2 kv heads, head_dim 64.
    """
    return att.PADDED_ATTENTION.case("fully_masked_row_nan", _attention_neg_inf_mask, **PADDED, padding="left")


# --- positives ----------------------------------------------------------------------------------


@positive(family=FAMILY, source="torch.nn.functional.scaled_dot_product_attention (PyTorch CPU kernel)")
def sdpa_vs_eager():
    """PyTorch's fused scaled_dot_product_attention against transformers' eager attention.

    Source: the real kernel, ``F.scaled_dot_product_attention(q, k, v, is_causal=True,
    enable_gqa=True)`` (on CPU the fused flash kernel: float32 accumulation, online softmax).

    Why it is good: the same real function (causal softmax(q k^T / sqrt(d)) v, kv head h // 4);
    it rounds once at the output where eager rounds the scores, the probabilities and the
    output, so its error against the float64 oracle is no larger than eager's.

    Probe: GQA 4 query heads / 2 kv heads, 128 tokens, head_dim 64, shifted Gaussian inputs.
    """
    return att.ATTENTION.case("sdpa_vs_eager", _sdpa_causal_gqa, **GQA)


@positive(family=FAMILY, source="online softmax (Milakov & Gimelshein 2018; FlashAttention-2), float32 accumulators",
          expect="PASS", quick=True)
def online_softmax_fp32():
    """The online softmax with float32 accumulators against the two-pass float32 softmax.

    Source: the online normalizer of Milakov & Gimelshein (2018) as flash attention runs it
    (each row spread over a quad of 4 threads, merged at the end), accumulators in float32.

    Why it is good: ``d = sum_j exp(x_j - m)`` built online, rescaled by ``exp(m - m')`` when the
    maximum grows, equals the two-pass denominator in real arithmetic; in float32 its error is
    ~1e-7 relative, far below the one bf16 rounding of the output. The pair of
    ``softmax_denominator_bf16``: same code, only the accumulator dtype differs.

    Probe: (1, 8, 32, 256) attention logits N(0, 2^2) with sink rows (1 in 8, logit 60-120).
    """
    prod = functools.partial(sm.online_softmax, acc_dtype=torch.float32, lanes=LANES)
    return sm.SOFTMAX.case("online_softmax_fp32", prod)


@positive(family=FAMILY, source="Gemma-2 local attention layers (sliding window 4096) on sequences shorter than the window")
def window_covering_sequence():
    """A sliding-window kernel whose window covers the whole sequence, against causal attention.

    Source: Gemma-2 / Mistral local layers use a 4096-key window; on any sequence of at most 4096
    tokens the local mask must equal the causal one.

    Why it is good: ``i - j < 4096`` holds for every key of a 128-token sequence, so the allowed
    set is exactly ``j <= i``; the kernels compute the same function with the same roundings.

    Probe: GQA 4 query heads / 2 kv heads, 128 tokens, head_dim 64.
    """
    prod = functools.partial(att.eager_attention, window=4096)
    return att.ATTENTION.case("window_covering_sequence", prod, **GQA)


@positive(family=FAMILY, source="Llama repeat_kv (expand + reshape) vs repeat_interleave")
def gqa_expand_reshape():
    """GQA through Llama's ``repeat_kv`` (a broadcast view reshaped) against repeat_interleave.

    Source: Llama / transformers ``repeat_kv``: ``x[:, :, None].expand(b, h, n_rep, s, d)
    .reshape(b, h * n_rep, s, d)``, documented as equivalent to ``repeat_interleave(x, n_rep, 1)``.

    Why it is good: both give query head h the kv head ``h // n_rep``: the same tensor, so the
    same attention (contrast ``gqa_tiled_not_repeated``).

    Probe: GQA 4 query heads / 2 kv heads, 128 tokens, head_dim 64.
    """
    return att.ATTENTION.case("gqa_expand_reshape", _attention_expand_reshape_kv, **GQA)


@positive(family=FAMILY, source="FlashAttention-2 softcap (Dao-AILab/flash-attention, float32 tanh on the scores)")
def softcap_flash_outlier_logits():
    """A flash-style softcapped kernel against Gemma-2's eager attention, with logits past the cap.

    Source: flash-attention 2's ``softcap`` (Gemma-2 support): scores accumulated in float32,
    ``softcap * tanh(s / softcap)`` applied in float32, online softmax.

    Why it is good: the same real function as the eager reference (scale 256 ** -0.5, cap 50);
    where the eager code rounds the logits to bf16 (spacing 0.25 for |s| in [32, 64)) before the tanh,
    the flash kernel keeps them in float32, so it is the more accurate side.

    Probe (stressed): head_dim 256, massive activations (4 q/k channels x16) on 1 token in 8:
    about 6% of the rows hold a logit beyond the cap of 50, where tanh saturates.
    """
    prod = functools.partial(att.flash_attention, scale=att.GEMMA2_QUERY_PRE_ATTN_SCALAR ** -0.5,
                             softcap=att.GEMMA2_SOFTCAP)
    return att.GEMMA2_ATTENTION.case("softcap_flash_outlier_logits", prod, **GEMMA2, **QK_OUTLIERS)


@positive(family=FAMILY, source="torch.nn.functional.scaled_dot_product_attention with a boolean padding mask")
def sdpa_padding_partial_rows():
    """SDPA with a boolean causal + padding mask against eager attention with the additive mask,
    on right-padded batches (every query row partially masked, none fully).

    Source: the real kernel, ``F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask,
    enable_gqa=True)``, as transformers' "sdpa" attention calls it for padded training batches.

    Why it is good: a boolean False and an additive ``finfo.min`` both give a key weight exactly 0
    when the row keeps at least one visible key (``exp(min - max)`` underflows to 0), so both
    compute softmax over the same visible keys.

    Probe (stressed): 2 right-padded sequences of 64 tokens with valid lengths in [32, 64], GQA 4
    query heads / 2 kv heads, head_dim 64.
    """
    return att.PADDED_ATTENTION.case("sdpa_padding_partial_rows", _sdpa_bool_mask, **PADDED, padding="right")


@positive(family=FAMILY, source="torch.nn.functional.scaled_dot_product_attention with an explicit boolean sliding-window mask")
def sdpa_bool_window_mask():
    """SDPA with an explicit boolean sliding-window mask against the eager additive window mask.

    Source: the real kernel with ``attn_mask`` a boolean (S, S) local-causal mask, the way
    transformers' sdpa path runs Mistral / Gemma-2 local layers.

    Why it is good: the same allowed set ``0 <= i - j < 32`` on both sides, so the same function;
    SDPA accumulates in float32 and rounds once.

    Probe: a 32-key window on 128 tokens (the window shorter than the sequence), GQA 4 query heads /
    2 kv heads, head_dim 64.
    """
    prod = functools.partial(_sdpa_bool_mask, window=WINDOW)
    return att.SLIDING_WINDOW_ATTENTION.case("sdpa_bool_window_mask", prod, **GQA)


@positive(family=FAMILY, source="FlashAttention-2 forward (tiled, online softmax, float32 accumulators) at 512 tokens")
def flash_attention_long_sequence():
    """A flash-attention-2 style kernel against eager attention on a longer sequence (512 tokens).

    Source: the FlashAttention-2 forward algorithm: 64-key tiles, float32 scores, online softmax
    with float32 running max / denominator / output accumulator, bf16 probabilities into the
    second GEMM, one normalisation at the end.

    Why it is good: in real arithmetic it is causal softmax attention; in floating point every
    accumulation is float32, so 512-key rows (8 rescalings of the accumulator) keep its error at
    the level of the final rounding.

    Probe (stressed): 512 tokens, GQA 4 query heads / 2 kv heads, head_dim 64.
    """
    return att.ATTENTION.case("flash_attention_long_sequence", att.flash_attention, batch=1, heads=4, kv_heads=2,
                              seq=512, queries=64, head_dim=64)
