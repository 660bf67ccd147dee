"""Float32 controls (family ``float32``): kernels whose inputs and outputs are float32.

Two correct float32 implementations of one function differ by a few float32 ULPs (another summation
order, a tiled or online reduction, another formula for an elementary function): 2^-16 of what a bf16
training run resolves. kcert judges harm in ULPs of the coarser of the output's format and the
precision the training runs at (``Case.training_dtype``; bf16 by default, docs/method.md "The harm
scale"), so these PASS, while what a float32 kernel can get wrong stays detected: a dropped term or a
wrong constant (the algebra gate, at any harm scale), float16 statistics that overflow (the variance
gate, at the default harm scale), and float16 rounding in a float32 training run that declares it
(``training_dtype=torch.float32``).

The production kernels are written here in the way Triton or CUDA kernels organise their work (tiles
of a row, a K loop, a Welford merge), in PyTorch so that real mode follows them; the references come
from :mod:`kcert.catalog`.
"""

from __future__ import annotations

import math

import torch

from ..case import Axes, Case, Gaussian
from ..catalog import activations as A
from ..catalog import linear as Lin
from ..catalog import losses as Loss
from ..catalog import norms as N
from ..catalog import softmax as S
from ..catalog.probes import outlier_activations, trained_weights
from .registry import negative, positive

FAMILY = "float32"
F32 = torch.float32
TILE = 64  # elements of a row (or of K) one program handles per step


# --- production kernels ------------------------------------------------------------------------------


def softmax_tiled_online(x):
    """Online softmax over tiles of ``TILE`` keys (a running max and a rescaled running sum per row, as a
    Triton softmax walks a long row), then a second pass that normalises; float32 throughout."""
    m = torch.full(x.shape[:-1] + (1,), -math.inf, dtype=x.dtype, device=x.device)
    d = torch.zeros_like(m)
    for start in range(0, x.shape[-1], TILE):
        tile = x[..., start:start + TILE]
        m_new = torch.maximum(m, tile.amax(-1, keepdim=True))
        d = d * torch.exp(m - m_new) + torch.exp(tile - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / d


def matmul_k_loop(x, w):
    """``x @ w.T`` with the reduction over K in blocks of ``TILE``, each block's product added to a
    float32 accumulator in order (a GEMM kernel's K loop; MKL blocks and orders it differently)."""
    acc = torch.zeros(x.shape[:-1] + (w.shape[0],), dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[-1], TILE):
        acc = acc + x[..., start:start + TILE] @ w[:, start:start + TILE].T
    return acc


def layer_norm_welford(x, w, b, eps=N.LAYERNORM_EPS):
    """LayerNorm whose row statistics come from per-tile means and M2 merged with Chan's update (a
    one-pass Welford kernel), against the two-pass statistics of the reference."""
    n = mean = m2 = None
    for start in range(0, x.shape[-1], TILE):
        tile = x[..., start:start + TILE]
        k = tile.shape[-1]
        t_mean = tile.mean(-1, keepdim=True)
        t_m2 = (tile - t_mean).pow(2).sum(-1, keepdim=True)
        if n is None:
            n, mean, m2 = k, t_mean, t_m2
            continue
        delta = t_mean - mean
        total = n + k
        mean = mean + delta * (k / total)
        m2 = m2 + t_m2 + delta.pow(2) * (n * k / total)
        n = total
    return (x - mean) * torch.rsqrt(m2 / n + eps) * w + b


def gelu_tanh_written_out(x):
    """The tanh GELU written out with the constants in float32 (CUDA kernels' ``gelu_tanh``)."""
    inner = A.GELU_TANH_C * (x + A.GELU_TANH_A * x * x * x)
    return 0.5 * x * (1.0 + torch.tanh(inner))


def gelu_tanh_without_cubic(x):
    """The tanh GELU with its cubic term dropped: ``0.5 x (1 + tanh(sqrt(2/pi) x))``."""
    return 0.5 * x * (1.0 + torch.tanh(A.GELU_TANH_C * x))


def gelu_tanh_short_constant(x):
    """The tanh GELU with sqrt(2/pi) written to four decimals (0.7979 against 0.7978845608...)."""
    inner = 0.7979 * (x + A.GELU_TANH_A * x * x * x)
    return 0.5 * x * (1.0 + torch.tanh(inner))


def token_losses_manual(logits, labels, ignore_index=Loss.IGNORE_INDEX):
    """Per-token cross-entropy written out: ``logsumexp(z) - z[label]`` with the row max subtracted
    (a fused cross-entropy kernel's forward), 0 at ignored tokens."""
    z = logits.reshape(-1, logits.shape[-1])
    y = labels.reshape(-1)
    m = z.amax(-1, keepdim=True)
    lse = (m + torch.log(torch.exp(z - m).sum(-1, keepdim=True))).squeeze(-1)
    valid = y != ignore_index
    picked = z.gather(-1, torch.where(valid, y, 0)[:, None]).squeeze(-1)
    return torch.where(valid, lse - picked, torch.zeros_like(lse)).reshape(labels.shape)


def rms_norm_tree(x, w, eps=N.LLAMA_EPS):
    """RMSNorm whose sum of squares is a butterfly over the row (a block reduction) in float32."""
    v = x * x
    while v.shape[-1] > 1:
        half = v.shape[-1] // 2
        v = v[..., :half] + v[..., half:]
    return x * torch.rsqrt(v / x.shape[-1] + eps) * w


def layer_norm_half_statistics(x, w, b, eps=N.LAYERNORM_EPS):
    """LayerNorm of a float32 model with its row statistics computed in float16 (pytorch #66707's
    class): the mean and variance of a float16 copy, the rest in float32."""
    h = x.to(torch.float16)
    mean = h.mean(-1, keepdim=True)
    var = (h - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean.float()) * torch.rsqrt(var.float() + eps) * w + b


def rms_norm_half_mean_square(x, w, eps=N.LLAMA_EPS):
    """RMSNorm of a float32 model with the mean of squares taken in float16: squares above 65504
    overflow to inf (activations beyond 256), the row collapses to 0."""
    ms = (x.to(torch.float16) ** 2).mean(-1, keepdim=True)
    return x * torch.rsqrt(ms.float() + eps) * w


# --- probes --------------------------------------------------------------------------------------------


def _vector(h: int, center: float = 1.0, std: float = 0.05):
    return Gaussian((h,), shift=center, std=std)


# --- positive controls ---------------------------------------------------------------------------------


@positive(family=FAMILY, source="Triton tutorial-style online softmax over tiles (float32)", quick=True)
def float32_softmax_tiled_online() -> Case:
    """A float32 softmax computed online over tiles of 64 keys against torch.softmax in float32.

    Why benign: the same real function; the running max and the rescaled running sum reorder the
    denominator's additions (rows of 300 keys: four full tiles and a ragged one). Errors of a few
    float32 ULPs on both sides, 2^-16 of a bf16 ULP. On attention logits N(0, 2^2) with sinks up to 120.
    """
    return Case(name="float32_softmax_tiled_online", ref=S.softmax, prod=softmax_tiled_online,
                inputs={"x": S.attention_logits((1, 8, 32, 300))}, buckets=Axes(-1), dtype=F32)


@positive(family=FAMILY, source="GEMM K loop in float32 blocks (Triton matmul tutorial order) vs MKL")
def float32_matmul_k_loop() -> Case:
    """A float32 GEMM accumulating K in blocks of 64 in order against torch's (MKL) float32 GEMM.

    Why benign: the same sum in another order; K = 1000 leaves errors of a few float32 ULPs whose ratio
    between the two orders can reach several (the tile order is the less accurate one).
    """
    return Case(name="float32_matmul_k_loop", ref=Lin.matmul, prod=matmul_k_loop,
                inputs={"x": outlier_activations((64, 1000))},
                weights={"w": trained_weights((256, 1000), std=1000 ** -0.5)}, buckets=Axes(-1), dtype=F32)


@positive(family=FAMILY, source="one-pass Welford LayerNorm (Apex / Triton layer_norm) vs two-pass, float32")
def float32_layer_norm_welford() -> Case:
    """A float32 LayerNorm with per-tile Welford statistics merged by Chan's update against the
    catalogue's two-pass statistics, on activations with a mean offset of 4 (where a naive one-pass
    variance would cancel; Welford does not).

    Why benign: the same real function; the moments are accumulated in another order.
    """
    return N.LAYERNORM.case("float32_layer_norm_welford", layer_norm_welford, dtype=F32, shape=(2, 64, 1000),
                            offset=4.0)


@positive(family=FAMILY, source="tanh GELU written out in float32 (CUDA gelu_tanh kernels) vs F.gelu(approximate='tanh')")
def float32_gelu_tanh_written_out() -> Case:
    """The tanh GELU formula written out op by op in float32 against PyTorch's fused float32 kernel.

    Why benign: the same real function; PyTorch's vectorised ``tanh`` and evaluation order differ from
    the elementwise formula by a float32 ULP or two on outlier activations.
    """
    return A.GELU_TANH.case("float32_gelu_tanh_written_out", gelu_tanh_written_out, dtype=F32)


@positive(family=FAMILY, source="fused cross-entropy forward (logsumexp - z[label]) vs F.cross_entropy, float32")
def float32_token_cross_entropy() -> Case:
    """Per-token cross-entropy written out (max-subtracted logsumexp minus the label's logit) against
    ``F.cross_entropy(reduction='none')`` on float32 logits with ignore_index padding.

    Why benign: the same real function; another reduction order for the sum of exponentials.
    """
    return Loss.CROSS_ENTROPY.case("float32_token_cross_entropy", token_losses_manual, ref=Loss.token_losses,
                                   dtype=F32, buckets=Axes(-1), batch=4, seq=128, vocab=512)


@positive(family=FAMILY, source="block-reduction RMSNorm in float32 vs F.rms_norm")
def float32_rms_norm_tree() -> Case:
    """A float32 RMSNorm whose mean of squares is a butterfly reduction, against the catalogue's
    float32 RMSNorm, on activations with outlier channels.

    Why benign: the same real function, another summation order of the squares.
    """
    return N.RMSNORM.case("float32_rms_norm_tree", rms_norm_tree, dtype=F32, shape=(2, 64, 512), outliers=4)


# --- negative controls ---------------------------------------------------------------------------------


@negative(family=FAMILY, source="tanh GELU without its cubic term (a dropped term)", expect="FAIL")
def float32_gelu_dropped_cubic_term() -> Case:
    """The tanh GELU with ``0.044715 x^3`` dropped, in float32.

    What is wrong: ``0.5 x (1 + tanh(c x))`` is another real function: relative differences up to a few
    percent around |x| ~ 1.5. The algebra gate must FAIL it at any harm scale.
    """
    return A.GELU_TANH.case("float32_gelu_dropped_cubic_term", gelu_tanh_without_cubic, dtype=F32)


@negative(family=FAMILY, source="tanh GELU with sqrt(2/pi) truncated to 0.7979 (a wrong constant)", expect="FAIL")
def float32_gelu_short_constant() -> Case:
    """The tanh GELU with sqrt(2/pi) written as 0.7979 in float32.

    What is wrong: a relative change of 1.4e-5 in the constant, about 2^-16: a hundred float32 ULPs,
    invisible at bf16 resolution. The algebra gate's identity test sees a floor that does not shrink
    from float32 to float64 real mode and must FAIL it whatever the harm scale.
    """
    return A.GELU_TANH.case("float32_gelu_short_constant", gelu_tanh_short_constant, dtype=F32)


@negative(family=FAMILY, source="pytorch #66707 (LayerNorm statistics in float16) in a float32 training run",
          expect="FAIL")
def float32_layer_norm_half_statistics() -> Case:
    """A float32 model's LayerNorm with its row statistics computed in float16, certified for a float32
    training run (``training_dtype=torch.float32``).

    What is wrong: the float16 mean and variance carry relative errors near 2^-11 (and a mean offset of 4
    makes the variance cancel), thousands of float32 ULPs on every output: a float32 run whose kernels
    should be accurate to a few ULPs is not. Under the default bf16 harm scale this error is below what a
    bf16 run resolves; the float32 training declaration is what makes it a defect here.
    """
    case = N.LAYERNORM.case("float32_layer_norm_half_statistics", layer_norm_half_statistics, dtype=F32,
                            shape=(2, 64, 512), offset=4.0)
    return _train_float32(case)


@negative(family=FAMILY, source="float16 overflow in RMSNorm statistics (T5 / fp16 mean-of-squares overflow)",
          expect="FAIL")
def float32_rms_norm_half_mean_square_overflow() -> Case:
    """A float32 model's RMSNorm with the mean of squares taken in float16, on activations with outlier
    channels scaled by 400 (|x| above 256 squares past float16's 65504).

    What is wrong: an overflowed square makes the row's mean of squares inf and the row collapses to
    zero; errors of the size of the outputs themselves, far above any harm scale. Detected under the
    default (bf16) harm scale.
    """
    return Case(name="float32_rms_norm_half_mean_square_overflow", ref=N.rms_norm, prod=rms_norm_half_mean_square,
                inputs={"x": outlier_activations((2, 64, 512), outlier_channels=4, outlier_scale=400.0)},
                weights={"w": _vector(512)}, buckets=Axes(-1), dtype=F32)


def _train_float32(case: Case) -> Case:
    import dataclasses

    return dataclasses.replace(case, training_dtype=F32)
