"""Norm controls (family ``norm``): RMSNorm (Llama and Gemma gains) and LayerNorm.

Every reference comes from :mod:`kcert.catalog.norms`; the production kernels below are written
here from the mechanism of each public report (none is copied from the reported code). Kernels
take their probes as keyword arguments; ``eps`` and other settings are keyword defaults.

The figures in each docstring (effects, z, U) were measured when the control was written (seed 0);
tests/test_controls_norms.py checks the verdicts that matter (detected, not FAIL, ``expect=``), not
every figure; docs/controls.md holds the current verdicts and deciding figures, regenerated.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..case import Case
from ..catalog import norms as N
from .registry import negative, positive

FAMILY = "norm"
VEC = 8  # elements per thread of a vectorised norm kernel: one 16-byte load of 8 bf16 values


# --- production-kernel building blocks -------------------------------------------------------


def _thread_partials(values: torch.Tensor, vec: int = VEC) -> torch.Tensor:
    """Each thread of a vectorised kernel sums its own ``vec`` consecutive elements one after the
    other; the sum keeps the dtype of ``values`` (so a bf16 input gives a bf16 running sum)."""
    parts = values.unflatten(-1, (values.shape[-1] // vec, vec))
    acc = parts[..., 0]
    for i in range(1, vec):
        acc = acc + parts[..., i]
    return acc


def _tree_sum(values: torch.Tensor) -> torch.Tensor:
    """The block reduction of a GPU kernel: a butterfly over the last axis (lane i adds lane
    i + n/2, then n/4, ...), every partial sum kept in the dtype of ``values``."""
    n = values.shape[-1]
    if n & (n - 1):
        raise ValueError(f"the tree reduction needs a power-of-two number of partials, got {n}")
    while values.shape[-1] > 1:
        half = values.shape[-1] // 2
        values = values[..., :half] + values[..., half:]
    return values


def _truncate_bf16(y32: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 by truncation (drop the low 16 bits: round toward zero), written with
    arithmetic only so that real mode can follow it: take the round-to-nearest-even result and,
    where it landed farther from zero than ``y32``, step one bf16 spacing back toward zero.

    Bit-exact with ``(bits >> 16) << 16`` on float32 (tested on values of every binade,
    powers of two and subnormals included). In real mode the cast is the identity, the step is
    never taken, and the real function is the exact one: truncation is a rounding, not algebra.
    """
    rne = y32.to(torch.bfloat16)
    r = rne.float()
    mant, exp = torch.frexp(r)
    # bf16 keeps 8 significant bits: spacing 2**(exp - 8) in the binade of r, half that just
    # below a power of two (the step toward zero crosses into the lower binade).
    step = torch.ldexp(torch.ones_like(r), exp - 8)
    step = torch.where(mant.abs() == 0.5, step / 2, step)
    step = torch.clamp(step, min=2.0**-133)  # bf16 subnormal spacing
    toward_zero = (r - torch.sign(r) * step).to(torch.bfloat16)
    return torch.where(r.abs() > y32.abs(), toward_zero, rne)


# --- production kernels ----------------------------------------------------------------------


def gemma_rms_norm_bf16_gain(x, w, eps=N.GEMMA_EPS):
    """Pre-fix HF Gemma / vLLM Gemma: normalised activations rounded to bf16, then ``(1 + w)``
    formed and applied in bf16."""
    return N.normalize(x, eps).to(x.dtype) * (1 + w)


def rms_norm_bf16_mean_square(x, w, eps=N.LLAMA_EPS):
    """A fused RMSNorm whose variance reduction runs in the input dtype: squares, per-thread
    partial sums of 8 and the block tree all in bf16; the rest in float32, one rounding."""
    total = _tree_sum(_thread_partials(x * x))
    inv_rms = torch.rsqrt(total.float() / x.shape[-1] + eps)
    return (x.float() * inv_rms * w.float()).to(x.dtype)


def rms_norm_fp32_mean_square(x, w, eps=N.LLAMA_EPS):
    """The same fused RMSNorm with the reduction in float32 (the fix): per-thread partials of 8,
    block tree, one rounding at the end; a different summation order from the reference."""
    x32 = x.float()
    total = _tree_sum(_thread_partials(x32 * x32))
    return (x32 * torch.rsqrt(total / x.shape[-1] + eps) * w.float()).to(x.dtype)


def rms_norm_truncating_store(x, w, eps=N.LLAMA_EPS):
    """RMSNorm computed in float32 whose output store converts to bf16 by truncation."""
    return _truncate_bf16(N.normalize(x, eps) * w.float())


def rms_norm_eps_on_rms(x, w, eps=N.LLAMA_EPS):
    """GPT-NeoX's original RMSNorm: ``x / (||x||_2 / sqrt(d) + eps)``: eps added to the RMS."""
    x32 = x.float()
    rms = x32.norm(2, dim=-1, keepdim=True) * x.shape[-1] ** -0.5
    return (x32 / (rms + eps) * w.float()).to(x.dtype)


def rms_norm_divide_by_rsqrt(x, w, eps=N.LLAMA_EPS):
    """llm-foundry's RMSNorm before the fix: divides by ``rsqrt(ms + eps)``."""
    x32 = x.float()
    return (x32 / torch.rsqrt(N.mean_square(x32) + eps) * w.float()).to(x.dtype)


def layer_norm_half_statistics(x, w, b, eps=N.LAYERNORM_EPS):
    """LayerNorm whose row-moments kernel takes ``eps`` and writes ``mean`` and ``rstd`` in the
    input dtype (fp16); the normalisation reads them back and computes in float32."""
    x32 = x.float()
    eps_t = torch.tensor(eps, dtype=x.dtype, device=x.device).float()
    mean, rstd = N.layer_norm_stats(x32, eps_t)
    mean = mean.to(x.dtype).float()
    rstd = rstd.to(x.dtype).float()
    return ((x32 - mean) * rstd * w.float() + b.float()).to(x.dtype)


def layer_norm_two_pass_fused(x, w, b, eps=N.LAYERNORM_EPS):
    """A correct fused LayerNorm: two passes in float32 (sum, then the sum of centred squares),
    ``rstd * w`` folded into one per-channel scale, one rounding at the end."""
    x32 = x.float()
    d = x.shape[-1]
    centred = x32 - x32.sum(-1, keepdim=True) / d
    var = centred.square().sum(-1, keepdim=True) / d
    return (centred * (torch.rsqrt(var + eps) * w.float()) + b.float()).to(x.dtype)


def gemma_rms_norm_folded(x, w, eps=N.GEMMA_EPS):
    """A correct fused Gemma RMSNorm: the gain ``1 + w`` formed in float32 and applied first,
    division by ``sqrt`` instead of a product with ``rsqrt``, one rounding."""
    x32 = x.float()
    gain = w.float() + 1.0
    return (x32 * gain / torch.sqrt(x32.square().mean(-1, keepdim=True) + eps)).to(x.dtype)


def rms_norm_builtin(x, w, eps=N.LLAMA_EPS):
    """PyTorch's ``F.rms_norm`` called on the bf16 tensors directly (fused CPU kernel)."""
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def layer_norm_builtin(x, w, b, eps=N.LAYERNORM_EPS):
    """PyTorch's ``F.layer_norm`` called on the low-precision tensors directly."""
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


# --- negative controls -----------------------------------------------------------------------


@negative(family=FAMILY, source="transformers PR #29402, vllm #3653, TransformerEngine PR #1690", quick=True,
          expect="FAIL")
def gemma_one_plus_w_bf16() -> Case:
    """Gemma RMSNorm with (1 + w) formed in bf16: a fixed per-channel gain error.

    Source: huggingface/transformers PR #29402 (Gemma's RMSNorm computed ``(1 + w)`` and the
    product in bf16; fixed to float32), vllm-project/vllm #3653 (vLLM's kernel kept ``output * (1 +
    weight)`` in bf16 after that fix), NVIDIA/TransformerEngine PR #1690 (cuDNN backend formed
    ``gamma += 1`` in the weight dtype).

    What was wrong: Gemma stores its gain as ``w ~ 0`` and applies ``(1 + w)``. Reference:
    ``y = round(x / rms(x) * (1 + w))`` with ``1 + w`` exact in float32. Defect:
    ``y' = round(round(x / rms(x)) * round_bf16(1 + w))``. ``round_bf16(1 + w) = (1 + w)(1 + d_c)``
    with ``|d_c| <= 2^-8`` fixed per channel c (the bits of ``w`` below 2^-8 are lost in 1's
    binade), so ``E[(y' - y) sign(y)] ~ d_c E|y_c|``: a coherent per-channel bias of up to one bf16
    unit roundoff that never changes sign, while its size against float64 stays at the ULP level.

    Faithful: the prod is the pre-fix arithmetic (normalised activations rounded to bf16, ``1 + w``
    and the product in bf16) on the catalogue's Gemma contract: shifted activations (shift 0.1) and
    zero-centred trained-like gains N(0, 0.05^2) with 2% of channels 20x larger. Measured: bias FAIL
    (sign-aligned statistic, 267/512 channels, up to 0.84 ULP, |z| up to 222; prod's own bias
    against the oracle 0.84 ULP); algebra PASS (same real function); variance PASS (U = 1.17).
    """
    return N.GEMMA_RMSNORM.case("gemma_one_plus_w_bf16", gemma_rms_norm_bf16_gain)


@negative(family=FAMILY, source="Liger-Kernel #74", replicates=256, expect="FAIL")
def llama_kernel_on_gemma_weights() -> Case:
    """The Llama RMSNorm kernel applied to Gemma weights: w instead of 1 + w.

    Source: linkedin/Liger-Kernel #74 ("Gemma needs RMSNorm with 1.0 offset"): Liger applied its
    Llama-style RMSNorm to Gemma, whose checkpoint stores the gain as ``w`` with the model applying
    ``(1 + w)``; fixed by an ``offset`` argument (Liger-Kernel PR #85).

    What was wrong: reference ``y = x / rms(x) * (1 + w)``; defect ``y' = x / rms(x) * w``, so
    ``y' - y = -x / rms(x)``: an algebraic error of order one (Gemma's ``w`` is near 0, so the
    output nearly vanishes).

    Faithful: the prod is the catalogue's Llama kernel (HF casting: normalise in float32, round,
    multiply by the bf16 gain) called on the Gemma contract's weights, exactly the mix-up of the
    report. Measured: algebra FAIL (relative discrepancy 0.75, does not shrink), bias FAIL on all
    512 channels, variance FAIL (U ~ 650).
    """
    return N.GEMMA_RMSNORM.case("llama_kernel_on_gemma_weights", functools.partial(N.rms_norm_hf, eps=N.GEMMA_EPS))


@negative(family=FAMILY, source="sglang #27540", replicates=512)
def mean_square_in_bf16_outliers() -> Case:
    """RMSNorm whose sum of squares is reduced in bf16, on hidden states with massive outlier channels.

    Source: sgl-project/sglang PR #27540 (gemma-4 hidden states diverge from HF in the deep layers:
    the fused CUDA RMSNorm reduced the variance in the input (bf16) dtype; deep layers grow
    massive-activation outlier dimensions, the bf16 sum of squares loses precision; fixed by
    computing the norm in float32).

    What was wrong: reference ``ms = sum_i x_i^2 / d`` in float32. Defect: every partial sum of the
    reduction is rounded to bf16: ``S' = fl_bf16(... fl_bf16(fl_bf16(x_1^2) + fl_bf16(x_2^2)) ...)``.
    Once a partial holds an outlier square (``~100^2``, bf16 spacing 64), every ordinary square
    (``~1``) added to it is below half a spacing and is dropped: ``S' < S`` systematically, so
    ``1 / sqrt(S')`` is too large and every output of the row is scaled up, ``|y'| > |y|``: a
    coherent bias of fixed sign on every channel, on top of a row-random rounding error.

    Faithful: the kernel model is a vectorised CUDA RMSNorm (each thread sums 8 consecutive squares,
    then a butterfly block reduction), every partial in bf16, the rest in float32 as in the report.
    The probe is the catalogue's hidden-state contract with 4 fixed outlier channels at the
    "massive activation" magnitude ``N.MASSIVE_OUTLIER_SCALE`` = 100x (deep-layer massive
    activations are 10^2-10^4x the median). With 30x outliers the same kernel is only a WARN (bias
    0.20 ULP under the 0.25 floor, variance U ~ 3). The positive
    ``rms_norm_outlier_channels_fp32_accumulation`` runs the fixed kernel on this same probe.
    Measured (R = 512): bias FAIL (sign-aligned statistic, 133/512 channels, effect up to 0.32
    ULP, |z| up to 91, prod's own bias against the oracle 0.32 ULP; every one of the 512 channels is
    significant), variance PASS (U = 1.55; at R = 4096 it is a WARN, U ~ 3-4), algebra PASS.
    """
    return N.RMSNORM.case("mean_square_in_bf16_outliers", rms_norm_bf16_mean_square, outliers=N.OUTLIERS,
                          outlier_scale=N.MASSIVE_OUTLIER_SCALE)


@negative(family=FAMILY, source="ROCm/aiter #1978", replicates=256, expect="FAIL")
def bf16_truncation_not_rne() -> Case:
    """RMSNorm whose fp32 -> bf16 output conversion truncates instead of rounding to nearest even.

    Source: ROCm/aiter PR #1978 (the CK RMSNorm kernel's fp32 -> bf16 conversion defaults to
    ``CK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=2``, "fast truncate"; the PR makes the mode configurable so
    that RNE can be chosen).

    What was wrong: reference ``y = RNE_bf16(v)`` with ``v = x / rms(x) * w`` in float32. Defect
    ``y' = trunc_bf16(v)`` (round toward zero), so ``|y'| <= |v|`` always and
    ``E[(y' - y) sign(y)] ~ -ulp/2``: a one-sided bias on every channel, never above one ULP per
    element, so every tolerance test passes.

    Faithful: the truncation is bit-exact with dropping the low 16 bits of the float32 value, but
    written with arithmetic (RNE, then one spacing back toward zero where RNE went away from zero)
    instead of integer bit views. Decision: in real mode the casts are the identity and the step is
    never taken, so prod's real function is the reference's and the algebra gate runs and PASSes
    (correctly: truncation is a rounding mode, not algebra); an integer-view version would have made
    the algebra gate SKIP without a ``prod_math``. Measured: bias FAIL on all 512 channels
    (sign-aligned, ~0.5-0.7 ULP, |z| ~ 96 at R = 256), variance PASS (K = 0: errors stay within one
    ULP), algebra PASS.
    """
    return N.RMSNORM.case("bf16_truncation_not_rne", rms_norm_truncating_store)


@negative(family=FAMILY, source="gpt-neox #1342", replicates=256, quick=True, expect="FAIL")
def eps_added_to_rms() -> Case:
    """RMSNorm with eps added to the RMS instead of the mean square: sqrt(ms) + eps vs sqrt(ms + eps).

    Source: EleutherAI/gpt-neox PR #1342 ("RMSNorm epsilon implementation": GPT-NeoX's RMSNorm
    added eps to the RMS, unlike HF/Llama which add it to the variance; this breaks compatibility
    with Llama checkpoints).

    What was wrong: reference ``y = x / sqrt(ms + eps) * w``; defect ``y' = x / (sqrt(ms) + eps) * w``
    with ``ms = mean(x^2)``. For ``ms ~ 1``: ``y'/y - 1 ~ -eps (1 - 1/(2 sqrt(ms)))``, about -5e-6
    relative at Llama's ``eps = 1e-5``: far below one bf16 ULP (4e-3), but a different real function.

    Faithful: the prod computes the RMS GPT-NeoX's way (``||x||_2 * d^-1/2``) and adds eps to it,
    in float32 with one rounding, on a Llama checkpoint's eps (the PR's compatibility case); the
    contract is the plain RMSNorm one (shifted Gaussian, trained-like Llama gains). Measured:
    algebra FAIL (relative discrepancy 5e-6 in float64 real mode vs 5e-6 in float32: does not
    shrink like rounding, above the 1e-9 floor); bias PASS and variance PASS: the effect is ~0.002
    ULP, invisible to both statistical gates. Only the algebra gate sees this defect.
    """
    return N.RMSNORM.case("eps_added_to_rms", rms_norm_eps_on_rms)


@negative(family=FAMILY, source="llm-foundry #371", replicates=256, expect="FAIL")
def divide_by_rsqrt() -> Case:
    """RMSNorm dividing by rsqrt(ms + eps) instead of multiplying: x * rms(x) instead of x / rms(x).

    Source: mosaicml/llm-foundry #371 ("Incorrect implementation of RMSNorm": ``x /
    torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``; training with it diverged), fixed in
    PR #372.

    What was wrong: reference ``y = x * (ms + eps)^-1/2 * w``; defect ``y' = x * (ms + eps)^+1/2 * w``,
    so ``y'/y = ms + eps``: an algebraic error that vanishes only when ``ms = 1``.

    Faithful: the prod is the reported expression in float32. The probe is the catalogue's hidden
    states with 4 outlier channels (30x): real hidden states do not have ``ms ~ 1`` (a unit-variance
    Gaussian probe would nearly hide this defect, ``ms + eps ~ 1.01``). Measured: algebra FAIL
    (relative discrepancy ~11), bias FAIL on every channel, variance FAIL.
    """
    return N.RMSNORM.case("divide_by_rsqrt", rms_norm_divide_by_rsqrt, outliers=N.OUTLIERS)


@negative(family=FAMILY, source="pytorch #66707")
def layernorm_stats_low_precision() -> Case:
    """fp16 LayerNorm whose row statistics (mean, rstd) and eps are held in fp16.

    Source: pytorch/pytorch #66707 ("layer_norm needs to be done in fp32 for fp16 inputs": fp16
    ``layer_norm`` differs from the fp32 one rounded to fp16 in 45% of the elements, by up to
    0.00098, one fp16 ULP at 1); fixed by PR #66920 ("Do rowwisemoments computation in float for
    half LayerNorm").

    What was wrong: reference ``y = round((x - m) r w + b)`` with ``m``, ``r = (var + eps)^-1/2``
    in float32. Defect: the row-moments kernel takes ``eps`` and writes ``m`` and ``r`` in fp16:
    ``y' = round((x - fl16(m)) fl16(r) w + b)``. Per row, ``|fl16(m) - m| <= 2^-11 |m|`` shifts
    every normalised value by up to ``2^-11 |m| / sigma`` and ``fl16(r)`` scales them by
    ``1 + d``, ``|d| <= 2^-11``: row-coherent errors whose sign changes from row to row.

    Faithful: the prod keeps the float32 Welford-equivalent statistics and rounds exactly the three
    values the pre-fix kernel held in fp16 (eps, mean, rstd), in the issue's dtype (fp16). On the
    issue's own example (U[0, 0.1), width 128, unit gains) this model reproduces the report: about
    half of the elements differ, by at most one fp16 ULP. Those errors change sign from row to row,
    so the per-channel bias averages them away, and at the issue's mean/std = 1.7 they stay under
    the variance gate's one-ULP slack: on U[0, 0.1) (64 x 512) kcert PASSes all three gates
    (variance U = 1.57, K up to 1.22). The size of the error grows with mean/std; the probe is the
    catalogue's stressed LayerNorm contract, ``N.MEAN_OFFSET`` = 5 (mean 5.1, std 1), the same probe
    on which the correct two-pass kernel PASSes (``layer_norm_large_mean_offset_two_pass``).
    Measured: variance WARN (U = 4.7, K up to 3), bias PASS (sign-aligned effect 0.03 ULP, |z| < 5),
    algebra PASS. A per-row gain statistic would see this defect at any offset (docs/method.md, "Gate 2").
    """
    return N.LAYERNORM.case("layernorm_stats_low_precision", layer_norm_half_statistics, dtype=torch.float16,
                            offset=N.MEAN_OFFSET)


@negative(family=FAMILY, source="TransformerEngine #1132", expect="FAIL")
def hf_double_rounding_te1132() -> Case:
    """HF double rounding (round normalised x, then multiply by the bf16 gain) as prod vs TE single rounding as ref.

    Source: NVIDIA/TransformerEngine #1132 ("RMSNorm precision different from HF implementation":
    HF converts the normalised hidden states to bf16 *before* multiplying by the weight,
    TransformerEngine after).

    What was wrong: ref (TE) ``y = round(v w)``, ``v = x / rms(x)`` in float32; prod (HF)
    ``y' = round(round(v) w)``. The two differ by at most about one ULP, with a sign that depends on
    where ``v`` and ``v w`` fall between bf16 neighbours. For a channel whose bf16 gain is
    ``w = 1 - 2^-8`` (the largest bf16 below 1), ``round(v) w = round(v) - round(v) 2^-8`` lies
    between 1/2 and 1 spacing below ``round(v)`` and rounds one spacing down: the product is
    coherently pulled toward zero, ``E[(y' - y) sign(y)] ~ -0.35 ULP`` on that channel.

    Faithful: ref and prod are the catalogue's two Llama RMSNorm casting conventions, unchanged;
    gains ``1 + N(0, 0.02^2)`` (the Llama-like distribution the technical report measured).
    The technical report's one miss (K = 0, |z| not growing as sqrt(R)). kcert concludes: a real
    coherent bias located in prod (HF double rounding), i.e. FAIL. Measured at D = 512: bias FAIL on
    40/512 channels, exactly the 40 channels whose bf16 gain is 0.99609375, sign-aligned effect
    0.34-0.35 ULP, prod's own bias against the oracle 0.35 ULP (ref's ~0); |z| on those channels
    ~113-121 at R = 1024 and ~231-236 at R = 4096 (x1.96 for x4 replicates: it does grow as
    sqrt(R)). The raw statistic alone stays under the floor (0.05 ULP, |z| 15 -> 29): the report's
    rules give WARN. Variance PASS (K ~ 0), algebra PASS (same real function).
    """
    return N.RMSNORM.case("hf_double_rounding_te1132", N.rms_norm_hf, gains_kind="llama_narrow")


# --- positive controls -----------------------------------------------------------------------


@positive(family=FAMILY, source="torch.nn.functional.rms_norm (PyTorch 2.13 fused CPU kernel)", expect="PASS")
def rms_norm_builtin_vs_manual() -> Case:
    """PyTorch's fused F.rms_norm on bf16 tensors vs the manual single-rounding RMSNorm (real kernel).

    Source: ``torch.nn.functional.rms_norm`` (PyTorch 2.13, CPU), called on bf16 input and gain.

    Why benign: the fused kernel upcasts to float32, reduces the mean square, applies ``rsqrt`` and
    the gain in float32 and rounds once: the same arithmetic as the catalogue's ``rms_norm`` up to
    the reduction order. A real kernel pair any RMSNorm migration meets. Measured: PASS on all gates.
    """
    return N.RMSNORM.case("rms_norm_builtin_vs_manual", rms_norm_builtin)


@positive(family=FAMILY, source="torch.nn.functional.layer_norm (PyTorch 2.13 CPU kernel)", expect="PASS")
def layer_norm_builtin_vs_manual() -> Case:
    """PyTorch's F.layer_norm on bf16 tensors vs the manual two-pass float32 LayerNorm (real kernel).

    Source: ``torch.nn.functional.layer_norm`` (PyTorch 2.13, CPU), called on bf16 input and affine.

    Why benign: the kernel computes the row moments in float32 (the fix of pytorch #66707 and #77507),
    normalises and applies the affine in float32 and rounds once; the catalogue's ``layer_norm`` does
    the same with a two-pass variance. Measured: PASS on all gates.
    """
    return N.LAYERNORM.case("layer_norm_builtin_vs_manual", layer_norm_builtin)


@positive(family=FAMILY, source="transformers GemmaRMSNorm after PR #29402 (fused rewrite)", quick=True,
          expect="PASS")
def gemma_rms_norm_fused_rewrite() -> Case:
    """A correct fused Gemma RMSNorm: (1 + w) in float32 folded first, division by sqrt, one rounding.

    Source: the corrected HF ``GemmaRMSNorm`` (transformers PR #29402) as the reference, rewritten the
    way fused kernels do (gain applied before the normalisation, ``/ sqrt`` instead of ``* rsqrt``).

    Why benign: ``x (1 + w) / sqrt(ms + eps) = x / sqrt(ms + eps) (1 + w)`` in real arithmetic; both
    sides keep ``1 + w`` in float32 and round once, so they differ only by float32 reassociation
    (~1e-7 relative, far under a bf16 ULP). Same Gemma contract as ``gemma_one_plus_w_bf16``.
    Measured: PASS on all gates.
    """
    return N.GEMMA_RMSNORM.case("gemma_rms_norm_fused_rewrite", gemma_rms_norm_folded)


@positive(family=FAMILY, source="TransformerEngine #1132 (single rounding as prod)", expect="PASS")
def single_rounding_prod_vs_hf_double() -> Case:
    """TE single rounding as prod vs HF double rounding as ref: the more accurate side is prod (benign).

    Source: NVIDIA/TransformerEngine #1132, the mirror of ``hf_double_rounding_te1132``: migrating
    from HF's ``LlamaRMSNorm`` (ref) to TransformerEngine's RMSNorm (prod).

    Why benign: prod rounds once, ``round(v w)``; it is within half an ULP of the exact value and
    unbiased per channel. The coherent -0.35 ULP difference on the gain ``0.99609375`` channels is
    the reference's own bias: prod's bias against the float64 oracle is ~0, so kcert attributes the
    difference to ref (docs/method.md, "Gate 2") and does not block the migration. Measured: PASS on all
    gates (436/512 channels significant on the sign-aligned statistic, all attributed to ref).
    """
    return N.LLAMA_RMSNORM.case("single_rounding_prod_vs_hf_double", N.rms_norm, gains_kind="llama_narrow")


@positive(family=FAMILY, source="vectorised fused RMSNorm with float32 reduction (fix of sglang #27540)",
          expect="PASS")
def rms_norm_outlier_channels_fp32_accumulation() -> Case:
    """A correct vectorised RMSNorm (float32 partials of 8 + block tree) on hidden states with massive outlier channels (stressed probe).

    Source: the fixed form of the kernel of sglang #27540: the same vectorised reduction as
    ``mean_square_in_bf16_outliers``, with every partial sum in float32.

    Why benign: the float32 sum of squares has relative error ~1e-7 whatever the order, far under a
    bf16 ULP, and the output is rounded once. The probe is the same stressed contract as the
    negative (4 outlier channels at 100x): it shows that the negative's verdict comes from the bf16
    accumulator, not from the probe. Measured: PASS on all gates.
    """
    return N.RMSNORM.case("rms_norm_outlier_channels_fp32_accumulation", rms_norm_fp32_mean_square,
                          outliers=N.OUTLIERS, outlier_scale=N.MASSIVE_OUTLIER_SCALE)


@positive(family=FAMILY, source="vectorised fused RMSNorm with float32 reduction (large-scale probe)",
          expect="PASS")
def rms_norm_large_scale_x1000() -> Case:
    """A correct vectorised RMSNorm on activations scaled by 1000 (stressed probe).

    Source: the vectorised float32-reduction RMSNorm of ``rms_norm_outlier_channels_fp32_accumulation``
    on hidden states of magnitude ~1e3 (the residual stream of deep layers grows to this range).

    Why benign: RMSNorm is scale invariant (``y(1000 x) = y(x)`` up to eps); squares of ~1e6 summed over
    512 channels stay far inside float32's range, and the order of the float32 sum changes the result
    by ~1e-7 relative. Measured: PASS on all gates.
    """
    return N.RMSNORM.case("rms_norm_large_scale_x1000", rms_norm_fp32_mean_square, scale=1000.0)


@positive(family=FAMILY, source="fused two-pass LayerNorm with float32 statistics (large-mean probe)",
          expect="PASS")
def layer_norm_large_mean_offset_two_pass() -> Case:
    """A correct fused two-pass fp16 LayerNorm on activations with a large common mean offset (stressed probe).

    Source: a fused LayerNorm kernel with float32 two-pass statistics (sum, then centred sum of
    squares) and ``rstd * w`` folded into one scale, as in the fix of pytorch #66707.

    Why benign: two-pass statistics have no ``E[x^2] - E[x]^2`` cancellation, so a mean of 5 std
    costs nothing in float32; the statistics stay in float32 and the output is rounded once. Same
    fp16 contract as ``layernorm_stats_low_precision`` (``N.MEAN_OFFSET`` = 5): the negative's WARN
    comes from its fp16 statistics, not from the probe. Measured: PASS on all gates.
    """
    return N.LAYERNORM.case("layer_norm_large_mean_offset_two_pass", layer_norm_two_pass_fused,
                            dtype=torch.float16, offset=N.MEAN_OFFSET)
