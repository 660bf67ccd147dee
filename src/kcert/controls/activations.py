"""Controls of the activation, GEMM and loss families.

Negatives reproduce the mechanism of a public defect (never its code); positives are real kernels,
benign rewrites or stressed probes on correct kernels. Reference kernels come from
:mod:`kcert.catalog.activations`, :mod:`kcert.catalog.linear` and :mod:`kcert.catalog.losses`;
the production kernels below are written here, as a migration would bring them.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..case import Axes, Case
from ..catalog import activations as act
from ..catalog import linear as lin
from ..catalog import losses as los
from .registry import negative, positive

# Shapes: modest, production-like slices (tokens x hidden), cheap enough for 1024 replicates here.
TOKENS, HIDDEN = 64, 512
GEMM_TOKENS, GEMM_K, GEMM_N = 16, 2048, 128  # a decode-shaped GEMM: few rows, deep K, narrow output


# --- production kernels (as a migration brings them) ------------------------------------------------


def silu_one_minus_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """SiLU x * sigmoid(x) with a branch-stable sigmoid evaluated in the working dtype:
    sigmoid(x) = 1 / (1 + exp(-|x|)) for x >= 0 and 1 - 1 / (1 + exp(-|x|)) for x < 0, every op
    rounded to x's dtype."""
    z = torch.exp(-x.abs())
    s_abs = 1.0 / (1.0 + z)
    return x * torch.where(x >= 0, s_abs, 1.0 - s_abs)


def silu_manual_fp32(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) upcast to float32, one rounding (a Triton/Liger-style elementwise kernel)."""
    x32 = x.float()
    return (x32 * torch.sigmoid(x32)).to(x.dtype)


def swiglu_fused(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Fused silu(gate) * up: both in float32, one rounding (vLLM silu_and_mul, Liger SwiGLU)."""
    g = gate.float()
    return (F.silu(g) * up.float()).to(gate.dtype)


def geglu_fused(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Fused gelu_tanh(gate) * up: both in float32, one rounding (vLLM gelu_tanh_and_mul)."""
    return (F.gelu(gate.float(), approximate="tanh") * up.float()).to(gate.dtype)


def addmm_bias_after_splitk(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, splits: int = 4) -> torch.Tensor:
    """Split-K GEMM reduced in a float32 workspace, the result cast to the output dtype, then the
    bias added in that low precision (the bias epilogue of cuBLASLt's split-K path)."""
    return lin.splitk_matmul(x, w, splits=splits) + b


def gemm_mma_fp32_out(x: torch.Tensor, w: torch.Tensor, tile: int = 64) -> torch.Tensor:
    """bf16 GEMM with float32 output (``out_dtype=torch.float32``): bf16 products exact in float32,
    accumulated tile by tile along K in a float32 register, no rounding to bf16."""
    m, k = x.shape
    n = w.shape[0]
    xt = x.float().reshape(m, k // tile, tile).transpose(0, 1)  # (tiles, m, tile)
    wt = w.float().reshape(n, k // tile, tile).permute(1, 2, 0)  # (tiles, tile, n)
    parts = torch.bmm(xt, wt)  # one float32 product per K tile
    acc = parts[0]
    for t in range(1, parts.shape[0]):  # the accumulator register, tile after tile
        acc = acc + parts[t]
    return acc


def grad_accum_mean_of_means(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = los.IGNORE_INDEX):
    """The pre-fix accumulation: each micro-batch's token mean, divided by the number of
    micro-batches, summed over the step."""
    m_count = logits.shape[0]
    total = None
    for m in range(m_count):
        part = los.cross_entropy(logits[m], labels[m], ignore_index=ignore_index) / m_count
        total = part if total is None else total + part
    return total


def chunked_token_losses(logits: torch.Tensor, labels: torch.Tensor, *, chunk: int = 128,
                         ignore_index: int = los.IGNORE_INDEX, z_loss: float = 0.0,
                         softcap: float | None = None) -> torch.Tensor:
    """Per-token loss with the vocabulary processed in chunks and an online logsumexp (running
    max and rescaled running sum in float32), as chunked / fused-linear cross-entropy kernels do."""
    z = logits.float().reshape(-1, logits.shape[-1])
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    y = labels.reshape(-1)
    m = torch.full(z.shape[:1], float("-inf"), dtype=z.dtype, device=z.device)
    s = torch.zeros(z.shape[:1], dtype=z.dtype, device=z.device)
    for c in range(0, z.shape[1], chunk):
        zc = z[:, c:c + chunk]
        m_new = torch.maximum(m, zc.amax(-1))
        s = s * torch.exp(m - m_new) + torch.exp(zc - m_new[:, None]).sum(-1)
        m = m_new
    lse = m + torch.log(s)
    valid = y != ignore_index
    target = z.gather(1, y.clamp_min(0)[:, None])[:, 0]
    loss = lse - target
    if z_loss:
        loss = loss + z_loss * lse.square()
    return torch.where(valid, loss, torch.zeros((), dtype=loss.dtype, device=loss.device)).reshape(labels.shape)


# --- negatives ----------------------------------------------------------------------------------------


@negative(family="activation", source="transformers PR #29402", quick=True)
def gelu_erf_instead_of_tanh() -> Case:
    """GELU in its exact erf form where the model was trained with the tanh approximation.

    Source: transformers PR #29402 (Gemma: ``hidden_act="gelu"`` was served as exact GELU while the
    checkpoints were trained with ``gelu_pytorch_tanh``; the PR made ``hidden_activation`` select
    the tanh form and warn).
    Math: ref(x) = x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))), prod(x) = x/2 (1 + erf(x/sqrt(2))).
    The two real functions differ by up to ~5e-4 (|x| ~ 2-3) with a sign that depends on x: an
    algebraic difference of ~1e-4 relative, below a bf16 ULP element by element.
    Faithful: both sides are the very PyTorch calls the two configurations dispatch to, applied to
    Gemma-MLP gate pre-activations (N(0.1, 1), tokens x hidden); no code of the PR is used.
    """
    return act.GELU_TANH.case("gelu_erf_instead_of_tanh", act.gelu_erf, tokens=TOKENS, hidden=HIDDEN)


@negative(family="gemm", source="pytorch PR #180875")
def addmm_bias_bf16_after_splitk() -> Case:
    """addmm whose bias is added in bf16 after the split-K reduction has been cast to bf16.

    Source: pytorch PR #180875 (cuBLASLt bias-epilogue fusion with split-K algorithms on
    reduced-precision inputs adds the bias in the output dtype; the PR moves the bias to a matrix
    descriptor so it is added in the float32 compute type).
    Math: ref = rnd(sum_k x_k w_k + b) (one rounding, float32 epilogue);
    prod = rnd(rnd(sum_k x_k w_k) + b). Where |b| < ulp(acc)/2 the second rounding returns rnd(acc):
    the bias is lost; elsewhere it is quantised to the grid of the GEMM output. With b fixed per
    output channel the error E[rnd(rnd(acc) + b) - (acc + b)] has a fixed sign per channel: a
    coherent per-channel bias of a sizeable fraction of an ULP.
    Faithful: the mechanism is reproduced exactly (float32 split-K workspace, cast to bf16, bf16 bias
    add) on a decode-shaped GEMM (16 x 2048 -> 128) with outlier activations and trained-like
    weights and biases (N(0, 0.02^2), 1% x20): most biases of that size sit below half an ULP of
    typical GEMM outputs, as in trained models.
    """
    return lin.LINEAR.case("addmm_bias_bf16_after_splitk", addmm_bias_after_splitk,
                           tokens=GEMM_TOKENS, in_features=GEMM_K, out_features=GEMM_N)


@negative(family="gemm", source="pytorch PR #153095")
def splitk_partials_bf16() -> Case:
    """Split-K GEMM whose partial sums are stored and reduced in bf16.

    Source: pytorch PR #153095 (cuBLASLt ignored ``allow_bf16_reduced_precision_reduction=False``:
    split-K kernels with reduced-precision reductions could be picked, their partials written and
    summed in the output dtype).
    Math: ref = rnd(sum_s P_s) with P_s = sum_{k in slice s} x_k w_k in float32;
    prod = rnd(...rnd(rnd(P_1) + rnd(P_2)) ... + rnd(P_S)): 2S - 1 bf16 roundings, each at the
    magnitude of a partial, which can exceed the output's (cancelling partials). The error is
    random in sign (no coherent bias) but its size grows with S: an amplification of the error
    tail against one rounding.
    Faithful: the reduction scheme is reproduced exactly (float32 slice products, bf16 workspace,
    bf16 reduction in slice order) on a decode-shaped GEMM (16 x 2048 -> 128, outlier activations,
    trained-like weights) split into S = 16 slices of 128: such a GEMM has one or two output tiles
    for a GPU of 100+ SMs, the case where split-K heuristics cut K deepest. The size of the
    amplification grows with S (here: S = 4 gives a variance WARN, S = 8 and 16 a FAIL).
    """
    prod = functools.partial(lin.splitk_matmul, splits=16, partial_dtype=torch.bfloat16)
    return lin.MATMUL.case("splitk_partials_bf16", prod, tokens=GEMM_TOKENS, in_features=GEMM_K,
                           out_features=GEMM_N)


@negative(family="activation", source="tiny-llm PR #164", quick=True)
def silu_one_minus_sigmoid_bf16() -> Case:
    """SiLU whose negative branch is x * (1 - sigmoid(-x)) evaluated in bf16.

    Source: skyzh/tiny-llm PR #164 (fixes #161): the course's SiLU computed the negative branch as
    1 - sigmoid(-x); in bf16 sigmoid(-x) rounds to 1 for large |x|, so small negative outputs
    became 0, and the error accumulated over Qwen3 layers. The fix evaluates z / (1 + z),
    z = exp(-|x|), without the cancellation.
    Math: for x < 0, prod = x (1 - s), s = bf16 evaluation of 1 / (1 + exp(-|x|)): 1 - s is exact
    (Sterbenz) but s carries an absolute error of order 2^-9..2^-8, i.e. a relative error of
    ~2^-9 / sigmoid(x) on the output; for x < -5.5 (exp(x) < 2^-8, so 1 + exp(x) rounds to 1)
    s = 1 and prod = 0 while ref = x sigmoid(x) lies in [-0.023, 0). The flush always moves the
    output towards 0: a one-signed bias on the negative branch.
    Faithful: the branch-stable sigmoid is evaluated op by op in bf16 as the MLX course code does,
    on SwiGLU gate pre-activations N(0.1, 1) with 4 outlier channels x30 (the catalogue's model of
    real activations; they reach x < -5.5). Buckets: sign x binade of the input, the place an
    elementwise defect localises (a per-channel mean mixes the negative branch with the positive
    one, whose larger outputs set the ULP).
    """
    return act.SILU.case("silu_one_minus_sigmoid_bf16", silu_one_minus_sigmoid, tokens=TOKENS, hidden=HIDDEN,
                         outlier_channels=4, buckets=act.input_range_buckets("x"))


@negative(family="loss", source="transformers #34191", replicates=256)
def grad_accum_loss_per_microbatch() -> Case:
    """Gradient-accumulation loss averaged per micro-batch instead of over all tokens of the step.

    Source: transformers #34191 (gradient accumulation did not match full-batch training: each
    micro-batch's loss was a mean over its own tokens, then the micro-batch losses were averaged;
    fixed by dividing summed token losses by ``num_items_in_batch``).
    Math: ref = sum_m sum_{i in m} l_i / N, N = sum_m n_m; prod = (1/M) sum_m (sum_{i in m} l_i / n_m).
    They differ whenever the n_m differ: the weight of micro-batch m is 1/(M n_m) instead of 1/N.
    Short micro-batches (few tokens, early positions, higher loss) are over-weighted: a coherent
    upward bias of the loss (and of the gradient's scale per token).
    Faithful: 4 micro-batches x 2 rows x 64 positions (a 256-token vocabulary slice), right-padded
    with ignore_index to unequal lengths (a fixed step batch), LM logits redrawn per replicate
    whose confidence grows with the position, so a micro-batch's mean loss depends on its length
    as in production.
    """
    return los.GRAD_ACCUM_LOSS.case("grad_accum_loss_per_microbatch", grad_accum_mean_of_means, seq=64, vocab=256)


# --- positives ---------------------------------------------------------------------------------------


@positive(family="gemm", source="cuBLASLt CUBLASLT_EPILOGUE_BIAS (fused addmm) vs unfused bias add")
def addmm_fused_epilogue() -> Case:
    """Fused addmm epilogue (bias added in float32, one rounding) against an unfused bias add.

    Source: the real kernels: cuBLASLt / oneDNN addmm with the bias in the float32 epilogue
    (``F.linear(x, w, b)``) replacing a GEMM followed by a separate bias-add kernel
    (Megatron ``skip_bias_add`` + bias add). The technical report saw a 0.06 ULP WARN here.
    Benign: prod = rnd(acc + b) is the correctly rounded result; ref = rnd(rnd(acc) + b) rounds
    twice and loses biases below half an ULP of the GEMM output: ref carries the coherent bias,
    prod does not (attribution through the oracle).
    """
    return lin.LINEAR.case("addmm_fused_epilogue", lin.linear, ref=lin.linear_unfused,
                           tokens=GEMM_TOKENS, in_features=GEMM_K, out_features=GEMM_N)


@positive(family="activation", source="vLLM silu_and_mul / Liger SwiGLU (fused SiLU * up)", quick=True)
def swiglu_fused_silu_mul() -> Case:
    """Fused SiLU * up in float32 with one rounding against Llama's unfused silu(gate) * up.

    Source: the real fused kernels (vLLM ``silu_and_mul``, Liger ``LigerSiLUMulFunction``) that
    replace ``act_fn(gate_proj(x)) * up_proj(x)``. The report saw a 0.004 ULP WARN here.
    Benign: prod rounds silu(g) u once; ref rounds silu(g) to bf16 and then the product: prod is
    the more accurate side, the same real function.
    """
    return act.SWIGLU.case("swiglu_fused_silu_mul", swiglu_fused, tokens=TOKENS, hidden=HIDDEN)


@positive(family="gemm", source="torch.mm(out_dtype=torch.float32) bf16 GEMM with float32 output")
def gemm_bf16_fp32_output() -> Case:
    """bf16 GEMM with a float32 output against a float32 GEMM of the same bf16 operands.

    Source: the real kernel class: bf16 tensor-core GEMMs writing their float32 accumulator
    (``torch.mm(a, b, out_dtype=torch.float32)``, cuBLASLt with D in float32), used for router
    logits and LM heads, replacing ``F.linear(x.float(), w.float())``.
    Benign: bf16 x bf16 products are exact in float32; both sides accumulate in float32, only the
    summation order differs (64-wide K tiles vs the BLAS's blocking): rounding-level noise in
    float32, no rounding to bf16 on either side. Output and ULPs are float32.
    """
    return lin.MATMUL.case("gemm_bf16_fp32_output", gemm_mma_fp32_out, ref=lin.matmul_fp32,
                           tokens=GEMM_TOKENS, in_features=GEMM_K, out_features=GEMM_N)


@positive(family="gemm", source="cuBLASLt split-K with a float32 workspace (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)")
def splitk_fp32_workspace() -> Case:
    """Split-K GEMM with float32 partials and reduction against a single GEMM.

    Source: the real kernel: cuBLASLt split-K with the reduction in the compute type (float32
    workspace), the default when reduced-precision reductions are disallowed.
    Benign: prod = rnd(sum_s P_s) with every P_s and the reduction in float32: the same single
    rounding to bf16 as ref, only the float32 summation order differs.
    """
    prod = functools.partial(lin.splitk_matmul, splits=8, partial_dtype=torch.float32)
    return lin.MATMUL.case("splitk_fp32_workspace", prod, tokens=GEMM_TOKENS, in_features=GEMM_K,
                           out_features=GEMM_N)


@positive(family="loss", source="chunked cross-entropy with online logsumexp (Liger / Cut Cross-Entropy style)")
def chunked_cross_entropy_online_lse() -> Case:
    """Chunked cross-entropy with an online logsumexp, softcap 30 and z-loss, against the full one.

    Source: the real kernel class: vocabulary-chunked / fused-linear cross-entropy kernels (Liger
    ``LigerCrossEntropy``, Apple's Cut Cross-Entropy) computing lse with a running max and a
    rescaled running sum, Gemma-2's final-logit softcap and PaLM's z-loss.
    Benign: lse = m + log(sum_j exp(z_j - m)) is exact for any running max m; the online rescaling
    changes only the float32 rounding. Certified per token (``reduction="none"``, the output both
    kernels expose; the token mean is its sum over the count), bucketed per position. The scalar
    float32 mean is not a usable output for the variance gate: its E_prod and E_ref are two
    independent errors of about one float32 ULP, and with eps = 1 ULP their ratio K has a heavy
    tail (measured on this contract with the mean as output: variance FAIL, U = 76 without and
    U = 70 with softcap and z-loss).
    """
    prod = functools.partial(chunked_token_losses, softcap=30.0, z_loss=1e-4)
    ref = functools.partial(los.token_losses, softcap=30.0, z_loss=1e-4)
    return los.CROSS_ENTROPY.case("chunked_cross_entropy_online_lse", prod, ref=ref, buckets=Axes(-1), batch=2, seq=64)


@positive(family="activation", source="F.gelu(approximate='tanh') vs transformers NewGELUActivation")
def gelu_tanh_builtin_vs_gelu_new() -> Case:
    """PyTorch's fused tanh-GELU kernel against transformers' op-by-op ``gelu_new`` formula.

    Source: the real kernels: ``F.gelu(x, approximate="tanh")`` (``gelu_pytorch_tanh``) replacing
    ``NewGELUActivation`` (``gelu_new``), the same tanh approximation written out in the model's
    dtype.
    Benign: the same real function; the builtin evaluates it in float32 and rounds once, the
    reference rounds every intermediate to bf16 (including 1 + tanh(.) -> 0 for x << 0): prod is
    the accurate side.
    """
    return act.GELU_TANH.case("gelu_tanh_builtin_vs_gelu_new", act.gelu_tanh, ref=act.gelu_new,
                              tokens=TOKENS, hidden=HIDDEN)


@positive(family="activation", source="F.silu vs manual x * sigmoid(x) in float32")
def silu_builtin_vs_manual_fp32() -> Case:
    """A hand-written float32 SiLU kernel against ``F.silu``, on the defect's own probe and buckets.

    Source: the real kernels: ``F.silu`` (the reference) and an elementwise kernel that upcasts,
    computes x * sigmoid(x) in float32 and rounds once (the Triton/Liger style).
    Benign: both evaluate x sigmoid(x) in float32 and round once. Same contract as
    ``silu_one_minus_sigmoid_bf16`` (outlier channels, sign x binade buckets), so that the
    negative's FAIL is not an artefact of its buckets.
    """
    return act.SILU.case("silu_builtin_vs_manual_fp32", silu_manual_fp32, tokens=TOKENS, hidden=HIDDEN,
                         outlier_channels=4, buckets=act.input_range_buckets("x"))


@positive(family="activation", source="vLLM gelu_tanh_and_mul on outlier activations (stressed probe)")
def geglu_outlier_activations() -> Case:
    """Fused GeGLU on activations with outlier channels x30 (stressed probe, correct kernel).

    Source: the real fused kernel (vLLM ``gelu_tanh_and_mul``) replacing Gemma's
    ``gelu_pytorch_tanh(gate) * up``, probed with the massive outlier channels real LLM
    activations have (gate and up x30 on 4 channels: |x| up to ~150, gelu's asymptotes).
    Benign: the same real function, one rounding instead of two.
    """
    return act.GEGLU.case("geglu_outlier_activations", geglu_fused, tokens=TOKENS, hidden=HIDDEN,
                          outlier_channels=4)
