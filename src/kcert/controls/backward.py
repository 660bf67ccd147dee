"""Backward controls (family ``backward``): gradients certified with :func:`kcert.gradients`.

Each control builds a forward case from the catalogue (:mod:`kcert.catalog.backward`,
:mod:`kcert.catalog.norms`, :mod:`kcert.catalog.activations`) and turns it into a gradient case: ref
is differentiated by autograd, prod carries a hand-written backward (a ``torch.autograd.Function``),
and the oracle is ref's autograd in real mode. The defective kernels below are written here from
the mechanism of each public report (none is copied from the reported code).

The figures in each docstring were measured when the control was written (seed 0);
tests/test_controls_backward.py checks the verdicts, not every figure; docs/controls.md holds the current
ones.
"""

from __future__ import annotations

import functools

import torch

from ..backward import gradients
from ..case import Case, Fixed
from ..catalog import activations as A
from ..catalog import backward as B
from ..catalog import norms as N
from .registry import negative, positive

FAMILY = "backward"
SHAPE = (1, 64, 256)  # (batch, sequence, hidden) of the norm and SwiGLU controls
LOSS_COTANGENT = Fixed(torch.tensor(1.0))  # loss.backward(): the upstream gradient of a loss is 1


# --- defective kernels ----------------------------------------------------------------------------


class _InPlaceRMSNormFunction(torch.autograd.Function):
    """RMSNorm whose backward writes dX into the buffer of dY and returns that buffer as the input
    gradient (Liger-Kernel's ``in_place=True`` RMSNorm backward, the default before PR #376)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, eps: float):
        return B.RMSNormFunction.forward(ctx, x, w, eps)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, w, rstd = ctx.saved_tensors
        dx, dw = B.rms_norm_backward(dy, x, w, rstd)  # each row reads its dY before writing dX over it
        dy.copy_(dx)
        return dy, dw.to(w.dtype), None


def rms_norm_in_place_backward(x: torch.Tensor, w: torch.Tensor, eps: float = N.LLAMA_EPS) -> torch.Tensor:
    return _InPlaceRMSNormFunction.apply(x, w, eps)


def _block(norm):
    return functools.partial(B.post_norm_residual_block, norm=norm)


# --- negative controls --------------------------------------------------------------------------


@negative(family=FAMILY, source="Liger-Kernel #370 (fixed by PR #376)", replicates=256, quick=True, expect="FAIL")
def rms_norm_backward_overwrites_shared_grad() -> Case:
    """In-place RMSNorm backward overwriting an upstream gradient that the residual path still needs.

    Source: linkedin/Liger-Kernel #370 (Gemma-2 training with Liger's RMSNorm does not converge),
    fixed by PR #376 ("Support out-of-place RMSNorm to fix gemma2"): Liger's RMSNorm backward wrote
    dX into the dY buffer (``in_place=True``); in Gemma-2 the post-norm's output is added straight
    to the residual, so the residual path needs dY after the norm's backward has overwritten it.

    What was wrong: in ``y = h + post_norm(u)`` autograd hands the same tensor ``g = dL/dy`` to both
    branches of the sum. The correct input gradient is ``dL/dh = g + J_path(h)^T g``. The in-place
    backward replaces the contents of ``g`` by the post-norm's ``dX``, and the residual path,
    which holds a reference to ``g``, delivers that instead: ``dL/dh' = dX_post' + J_path^T g``
    where, in this block, the pre-norm's in-place backward has also overwritten the buffer, so
    ``dX_post'`` is the pre-norm's ``dX``. An O(1) error on the residual stream's gradient; the
    gradients of the norm gains and of the mixing weight are computed from ``g`` before the write
    and stay correct.

    Faithful: the block is Gemma-2's sandwich ``h + post_norm(linear(pre_norm(h)))`` (Gemma eps),
    the sub-layer reduced to one linear map; both norms use the same hand-written backward as the
    positive ``rms_norm_backward_out_of_place`` (the catalogue's Liger-style float32 math), the only
    difference being ``dy.copy_(dx); return dy``, the in-place write of the report. Probes: shifted
    Gaussian hidden states (64 x 256), trained-like Llama gains, a Gaussian cotangent per replicate.
    The case certifies the forward output and ``grad_x``, the residual stream's gradient where the
    write lands (tests/test_controls_backward.py checks against float64 autograd that the gain and
    mixing-weight gradients, computed before the write, are unaffected). Measured (R = 256):
    algebra FAIL on grad_x (real-mode relative discrepancy 0.645 in float64 and in float32: the
    aliasing happens in real numbers too, a different function of (h, g), not rounding); bias FAIL
    on 256/256 channels of grad_x (sign-aligned, up to 131 ULP, |z| up to 169); variance FAIL
    (U = 183, observed K up to 88); the forward output PASSes every gate.
    """
    forward = B.POST_NORM_BLOCK.case("rms_norm_backward_overwrites_shared_grad", _block(rms_norm_in_place_backward),
                                     shape=SHAPE)
    return gradients(forward, "x", name=forward.name)


@negative(family=FAMILY, source="Liger-Kernel #512, PR #830 (float32 accumulation)", replicates=256,
          expect="FAIL")
def fused_linear_cross_entropy_bf16_grad_weight() -> Case:
    """Fused linear cross-entropy accumulating the LM-head weight gradient in bf16 across token chunks.

    Source: linkedin/Liger-Kernel #512 (training loss with ``LigerFusedLinearCrossEntropyLoss``
    diverges where ``nn.CrossEntropyLoss`` keeps decreasing) and PR #830, which lets the weight
    gradient be accumulated in float32 across chunks; the mechanism was pointed out earlier for the
    kernel Liger's is based on (axolotl PR #1601 review: the weight gradient is chunked along the
    GEMM's K axis, so the float32 accumulator of one GEMM is replaced by a bf16 running sum).

    What was wrong: ``dW = sum_t gz_t^T x_t`` over tokens. The reference computes it as one GEMM:
    float32 accumulation over every token, one rounding. The fused kernel cuts the tokens into
    ``C`` chunks and keeps the running sum in the weight's dtype (Liger's default):
    ``dW' = fl(... fl(fl(P_1) + fl(P_2)) ... + fl(P_C))``, one bf16 rounding per chunk product and
    per addition: ``2C - 1`` roundings instead of one. Each addend is about ``1/C`` of the running
    sum, a few bf16 spacings of it, so round-to-nearest loses part of every small addend
    (swamping): besides a random error of a few ULP, a coherent pull of ``dW'`` towards zero,
    growing with ``C``, that adds up over training steps.

    Faithful: the prod is the chunked scheme of Liger's kernel (gradients computed in the forward
    pass chunk by chunk, the softmax gradient rounded to bf16 per chunk, input gradient per chunk,
    ``grad_weight += gz^T x`` into a bf16 buffer), with Liger's chunk heuristic (``ceil(V / H)``
    chunks, the chunk size rounded up to a power of two): V = 2048, H = 16, 512 tokens give 128
    chunks of 4 tokens, the count a small model with a large vocabulary gets at 8192 tokens
    (Qwen2.5-0.5B, Gemma-3 1B; Llama-3 8B gets 32). The reference is ``F.linear`` + the
    catalogue's cross-entropy under autograd; the cotangent is the 1 of ``loss.backward()``.
    The positive ``fused_linear_cross_entropy_fp32_accumulation`` runs the same kernel with the
    float32 accumulator. Only the gradients are certified (``include_forward=False``): the loss is
    a float32 scalar, a forward output with its own known calibration issue (docs/method.md).
    Measured (R = 256; the variance gate added replicates to 512): bias FAIL on grad_w, 76 of 2048
    rows (raw statistic, prod < ref, up to 0.51 ULP, |z| up to 44), 279 more rows significant
    under the 0.25-ULP floor; variance WARN on grad_w
    (U = 9.6); algebra PASS (in real mode the accumulator is float64: the same real function, as
    it should be for a precision defect); grad_x PASS on the bias gate. With 64 chunks (H = 32) the
    bias is at the floor (one row FAIL at 0.251 ULP, 154 WARN, variance U = 5.3).
    """
    forward = B.LINEAR_CROSS_ENTROPY.case(
        "fused_linear_cross_entropy_bf16_grad_weight",
        functools.partial(B.fused_linear_cross_entropy, accum_dtype=torch.bfloat16),
    )
    return gradients(forward, cotangent=LOSS_COTANGENT, include_forward=False, name=forward.name)


# --- positive controls --------------------------------------------------------------------------


@positive(family=FAMILY, source="Liger-Kernel PR #376 (out-of-place RMSNorm backward)", replicates=256, quick=True,
          expect="PASS")
def rms_norm_backward_out_of_place() -> Case:
    """Hand-written float32 RMSNorm backward, out of place, vs autograd through the catalogue's RMSNorm, in Gemma-2's block.

    Source: the fixed form of ``rms_norm_backward_overwrites_shared_grad`` (Liger-Kernel PR #376:
    ``in_place=False``): the same Gemma-2 sandwich block, each norm's backward writing dX into a new
    tensor.

    Why benign: the hand-written backward computes ``dx = rstd (g - xhat mean(g xhat))`` and
    ``dw = sum_rows dy xhat`` in float32 and rounds each once, as autograd's float32 graph through
    the reference's casts does; they differ by float32 reassociation (~1e-7 relative, far under a
    bf16 ULP). Same probes and outputs as the negative (forward output and ``grad_x``). Measured
    (R = 256): PASS on every gate (grad_x: U = 1.24, algebra float64 discrepancy 4e-16).
    """
    forward = B.POST_NORM_BLOCK.case("rms_norm_backward_out_of_place", _block(B.rms_norm_manual), shape=SHAPE)
    return gradients(forward, "x", name=forward.name)


@positive(family=FAMILY, source="Liger-Kernel RMSNorm backward math (hand-written, float32)", replicates=512,
          expect="PASS")
def rms_norm_manual_backward() -> Case:
    """Hand-written float32 RMSNorm backward vs autograd through the catalogue's RMSNorm.

    Source: the catalogue's RMSNorm (``kcert.catalog.norms.rms_norm``: float32 internals, one
    rounding) as ref, differentiated by autograd; prod: the same forward with the hand-written
    float32 backward of Liger-Kernel's RMSNorm (``kcert.catalog.backward.RMSNormFunction``).

    Why benign: both gradients are float32 evaluations of the same formula rounded once to bf16
    (autograd's graph: the product and mean-square backward in float32, cast at the input; the
    hand-written one: the closed form); they differ by float32 reassociation only. The weight
    gradient sums 64 rows in float32 on both sides. Probes: the catalogue's RMSNorm contract
    (shifted activations, trained-like Llama gains) and a Gaussian cotangent shifted by 0.1.
    Measured (R = 512): PASS on every gate; K = 0 on all 512 replicates for every output (the two
    backward computations round to the same bf16 values or within one ULP of the oracle).
    """
    forward = N.RMSNORM.case("rms_norm_manual_backward", B.rms_norm_manual, shape=SHAPE)
    return gradients(forward, name=forward.name)


@positive(family=FAMILY, source="Liger-Kernel SwiGLU backward math (hand-written, float32)", replicates=512,
          expect="PASS")
def swiglu_manual_backward() -> Case:
    """Hand-written float32 SwiGLU backward vs autograd through the catalogue's SwiGLU.

    Source: the catalogue's SwiGLU (``silu(gate) * up`` in bf16, Llama's MLP core) as ref,
    differentiated by autograd; prod: the same forward with a hand-written backward in float32
    (``kcert.catalog.backward.SwiGLUFunction``: Liger-Kernel's SwiGLU backward recomputes
    ``silu`` in float32 and forms both gradients there).

    Why benign: autograd follows the bf16 graph: ``d up = round(dy * round(silu(gate)))`` and
    ``d gate = round(round(dy * up) * silu'(gate))``, two roundings each; the hand-written backward
    rounds each gradient once from float32. Prod is the more accurate side: where the two differ
    coherently, the difference is ref's own rounding, which kcert attributes to ref (docs/method.md,
    "Gate 2"). Tokens 64 x hidden 256. Measured (R = 512, the variance gate added replicates to
    1024): PASS on every gate; K = 0 on every replicate for both gradients (forward: U = 0.81).
    """
    forward = A.SWIGLU.case("swiglu_manual_backward", B.swiglu_manual, tokens=64, hidden=256)
    return gradients(forward, name=forward.name)


@positive(family=FAMILY, source="Liger-Kernel PR #830 (float32 weight-gradient accumulation)", replicates=256,
          expect="PASS")
def fused_linear_cross_entropy_fp32_accumulation() -> Case:
    """Chunked fused linear cross-entropy with a float32 weight-gradient accumulator vs F.linear + cross-entropy under autograd.

    Source: the fixed form of ``fused_linear_cross_entropy_bf16_grad_weight`` (Liger-Kernel PR #830:
    accumulate ``grad_weight`` across chunks in float32, round once): the same chunked kernel, same
    16 chunks, same probes and cotangent.

    Why benign: each chunk's ``gz^T x`` is formed from the same bf16 operands as the reference's
    single GEMM and summed in float32; the one rounding to bf16 is the reference's. The input
    gradient is one GEMM per chunk on both sides. Measured (R = 256, the variance gate added
    replicates): PASS on every gate (grad_w: U = 1.6; grad_x: U = 1.6; algebra float64 discrepancy
    1e-15); against the reference's gradient in working precision, more than 99.98% of grad_w's
    elements are bit-identical (the bf16 accumulator changes about 70% of them).
    """
    forward = B.LINEAR_CROSS_ENTROPY.case("fused_linear_cross_entropy_fp32_accumulation",
                                          B.fused_linear_cross_entropy)
    return gradients(forward, cotangent=LOSS_COTANGENT, include_forward=False, name=forward.name)
