"""Normalisation layers: RMSNorm (Llama-style ``w * normalize(x)``, Gemma-style ``(1 + w)``) and
LayerNorm, written the way the reference frameworks write them.

Reference kernels take their probes as keyword arguments (``x``, ``w``, ``b``); settings such as
``eps`` are keyword defaults, closed over with :func:`functools.partial` when a model uses another
value. All references compute in float32 internally (upcast, reduce, normalise) like the HF
transformers, TransformerEngine, vLLM and PyTorch kernels do; where they round differs and is
stated on each function:

- :func:`rms_norm`: one rounding at the end (TransformerEngine, vLLM, PyTorch's fused
  ``F.rms_norm``): ``round(x / rms(x) * w)``.
- :func:`rms_norm_hf`: HF ``LlamaRMSNorm``: the normalised activations are rounded to the working
  dtype, then multiplied by the working-dtype gain (two roundings, TransformerEngine #1132).
- :func:`gemma_rms_norm`: HF ``GemmaRMSNorm`` after transformers PR #29402: ``(1 + w)`` formed in
  float32, one rounding at the end.
- :func:`layer_norm`: two-pass float32 statistics (mean, then the variance of the centred values),
  one rounding at the end: the semantics of ``F.layer_norm`` on a low-precision input.

Bucket axis: the feature channel (``Axes(-1)``). A norm's defects localise there: a per-channel
gain (``w``, ``1 + w``) is applied per channel, so a gain error has a fixed sign on its channel.
Row-coherent defects (one wrong statistic per row) change sign from row to row and average out of a
channel mean (docs/method.md, "Gate 2"); only the variance gate can see them, once they exceed its one-ULP
slack. The contracts offer the production triggers that make them larger: outlier channels and a
common mean offset.

Probe contract parameters (every builder accepts all of them and ignores the ones it does not use):
``shape`` (batch, seq, hidden), ``shift`` (the symmetry-breaking mean, docs/method.md, "Gate 2": 0.1),
``scale`` (a common factor on the activations: x1000 stresses the range), ``outliers`` (number of
outlier channels), ``outlier_scale`` (their magnitude against the other channels), ``offset`` (a
common mean offset of every activation, for LayerNorm), ``gains_kind`` ("llama", "llama_narrow",
"gemma"; default: the operator's own).
"""

from __future__ import annotations

import torch

from ..case import Axes, Custom, Gaussian, Probe
from . import Operator

FAMILY = "norm"

LLAMA_EPS = 1e-5  # Llama 2/3 rms_norm_eps
GEMMA_EPS = 1e-6  # Gemma rms_norm_eps
LAYERNORM_EPS = 1e-5  # nn.LayerNorm default (GPT-2, BERT use 1e-5 / 1e-12)

HIDDEN = 512
SHAPE = (1, 64, HIDDEN)  # (batch, sequence, hidden): 64 rows of a production hidden state
SHIFT = 0.1  # docs/method.md, "Gate 2"
OUTLIERS = 4  # outlier feature channels (LLM.int8(): a handful per model, at fixed dimensions)
OUTLIER_SCALE = 30.0  # their magnitude against the typical channel (20x-100x in LLMs)
MASSIVE_OUTLIER_SCALE = 100.0  # "massive activations" of deep layers (Sun et al. 2024 report 10^2-10^4x)
MEAN_OFFSET = 5.0  # a stressed LayerNorm contract: every activation shares a mean 5 std off zero


# --- reference kernels ---------------------------------------------------------------------


def mean_square(x32: torch.Tensor) -> torch.Tensor:
    """Mean of squares over the hidden axis, as every reference writes it (float32 input)."""
    return x32.pow(2).mean(-1, keepdim=True)


def normalize(x: torch.Tensor, eps: float = LLAMA_EPS) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps)`` in float32 (the shared core of every RMSNorm), unrounded."""
    x32 = x.float()
    return x32 * torch.rsqrt(mean_square(x32) + eps)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = LLAMA_EPS) -> torch.Tensor:
    """Llama-style RMSNorm with one rounding: ``round(normalize(x) * w)``, gain applied in float32
    (TransformerEngine, vLLM's ``rms_norm`` CUDA kernel, PyTorch's fused ``F.rms_norm``)."""
    return (normalize(x, eps) * w.float()).to(x.dtype)


def rms_norm_hf(x: torch.Tensor, w: torch.Tensor, eps: float = LLAMA_EPS) -> torch.Tensor:
    """HF transformers ``LlamaRMSNorm``: normalise in float32, round to the input dtype, then
    multiply by the gain in the working dtype: ``round(w * round(normalize(x)))``."""
    return w * normalize(x, eps).to(x.dtype)


def gemma_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = GEMMA_EPS) -> torch.Tensor:
    """HF transformers ``GemmaRMSNorm`` (after PR #29402): the gain is stored as ``w ~ 0`` and
    applied as ``(1 + w)``, formed in float32; one rounding at the end."""
    return (normalize(x, eps) * (1.0 + w.float())).to(x.dtype)


def layer_norm_stats(x32: torch.Tensor, eps: float = LAYERNORM_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-pass float32 row statistics: ``mean`` and ``rstd = 1 / sqrt(var + eps)`` with the
    biased variance of the centred values (what ``F.layer_norm`` computes)."""
    mean = x32.mean(-1, keepdim=True)
    var = (x32 - mean).pow(2).mean(-1, keepdim=True)
    return mean, torch.rsqrt(var + eps)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = LAYERNORM_EPS) -> torch.Tensor:
    """LayerNorm with float32 statistics and affine, one rounding: ``round((x - mean) * rstd * w + b)``."""
    x32 = x.float()
    mean, rstd = layer_norm_stats(x32, eps)
    return ((x32 - mean) * rstd * w.float() + b.float()).to(x.dtype)


# --- probes --------------------------------------------------------------------------------


def outlier_channel_indices(hidden: int, count: int = OUTLIERS) -> list[int]:
    """Fixed outlier channels: real outlier features sit at a few fixed dimensions with no relation
    to the kernel's tiling; a seeded permutation picks ``count`` of them (deterministic per
    ``hidden``, independent of the case seed so every replicate and run shares them)."""
    if count <= 0:
        return []
    g = torch.Generator().manual_seed(20240 + hidden)
    return sorted(int(i) for i in torch.randperm(hidden, generator=g)[:count])


def hidden_states(shape: tuple[int, ...] = SHAPE, shift: float = SHIFT, outliers: int = OUTLIERS,
                  outlier_scale: float = OUTLIER_SCALE, scale: float = 1.0) -> Custom:
    """Real-looking hidden states: N(shift, 1) entries, except ``outliers`` fixed channels that carry
    large values of a fixed sign per channel (LLM.int8() outlier features, massive activations):
    ``sign_c * outlier_scale * (1 + N(0, 0.2^2))``. Everything is multiplied by ``scale``."""
    shape = tuple(shape)
    channels = outlier_channel_indices(shape[-1], outliers)
    signs = [1.0 if i % 2 == 0 else -1.0 for i in range(len(channels))]

    def draw(g: torch.Generator, device) -> torch.Tensor:
        x = torch.randn(shape, generator=g, device=device) + shift
        if channels:
            idx = torch.tensor(channels, device=device)
            sign = torch.tensor(signs, device=device)
            big = sign * outlier_scale * (1.0 + 0.2 * torch.randn(shape[:-1] + (len(channels),), generator=g,
                                                                  device=device))
            x[..., idx] = big
        return x * scale

    return Custom(draw, f"N({shift}, 1) hidden states, {len(channels)} outlier channels {channels} "
                        f"of magnitude {outlier_scale:g}, x{scale:g}", shape)


def gains(hidden: int, kind: str = "llama") -> Probe:
    """Trained-like norm gains.

    - ``"llama"``: around 1 with a real spread: ``1 + N(0, 0.1^2)``, with 2% of channels 5x further
      out (trained Llama gains spread from ~0.05 to ~2.5 across layers; this is one layer's shape);
    - ``"llama_narrow"``: ``1 + N(0, 0.02^2)`` (a layer close to its initialisation; the
      distribution used to measure TransformerEngine #1132);
    - ``"gemma"``: Gemma's zero-centred gains: ``N(0, 0.05^2)`` with 2% of channels 20x larger
      (tiny values next to order-one values);
    """
    shape = (hidden,)
    if kind == "llama_narrow":
        return Gaussian(shape, shift=1.0, std=0.02)
    if kind == "llama":
        center, std, frac, big = 1.0, 0.1, 0.02, 5.0
    elif kind == "gemma":
        center, std, frac, big = 0.0, 0.05, 0.02, 20.0
    else:
        raise ValueError(f"gains: unknown kind {kind!r}")

    def draw(g: torch.Generator, device) -> torch.Tensor:
        w = torch.randn(shape, generator=g, device=device) * std
        out = torch.rand(shape, generator=g, device=device) < frac
        return center + torch.where(out, w * big, w)

    return Custom(draw, f"{kind} gains: {center:g} + N(0, {std:g}^2), {frac:.0%} x{big:g}", shape)


def activations(*, shape=SHAPE, shift=SHIFT, scale=1.0, outliers=0, outlier_scale=OUTLIER_SCALE, offset=0.0,
                **_) -> dict[str, Probe]:
    """The activation contract shared by every norm: a shifted Gaussian, optionally with outlier
    channels, a common offset and a common scale."""
    if outliers:
        return {"x": hidden_states(shape, shift + offset, outliers, outlier_scale, scale)}
    return {"x": Gaussian(tuple(shape), shift=(shift + offset) * scale, std=scale)}


def _rms_gains(default: str):
    def build(*, shape=SHAPE, gains_kind: str | None = None, **_) -> dict[str, Probe]:
        return {"w": gains(tuple(shape)[-1], gains_kind or default)}

    return build


def layer_norm_weights(*, shape=SHAPE, gains_kind: str | None = None, **_) -> dict[str, Probe]:
    """LayerNorm affine: trained-like gains around 1 and a small bias N(0, 0.05^2)."""
    hidden = tuple(shape)[-1]
    return {"w": gains(hidden, gains_kind or "llama"), "b": Gaussian((hidden,), std=0.05)}


# --- operators -----------------------------------------------------------------------------

TRIGGERS = (
    "multiplicative per-channel gain error (shifted probe, sign-aligned statistic)",
    "low-precision reduction of the mean square (outlier channels)",
    "rounding mode / placement of the final rounding",
    "eps placement (algebra gate)",
    "large activation range (scale x1000)",
)

RMSNORM = Operator(
    name="rms_norm",
    family=FAMILY,
    reference=rms_norm,
    inputs=activations,
    weights=_rms_gains("llama"),
    buckets=Axes(-1),
    triggers=TRIGGERS,
    description="Llama-style RMSNorm, float32 internals, one rounding (TransformerEngine / vLLM / F.rms_norm)",
)

LLAMA_RMSNORM = Operator(
    name="llama_rms_norm_hf",
    family=FAMILY,
    reference=rms_norm_hf,
    inputs=activations,
    weights=_rms_gains("llama"),
    buckets=Axes(-1),
    triggers=TRIGGERS,
    description="HF LlamaRMSNorm: normalised activations rounded, then the bf16 gain (two roundings)",
)

GEMMA_RMSNORM = Operator(
    name="gemma_rms_norm",
    family=FAMILY,
    reference=gemma_rms_norm,
    inputs=activations,
    weights=_rms_gains("gemma"),
    buckets=Axes(-1),
    triggers=TRIGGERS + ("(1 + w) rounding with zero-centred gains",),
    description="HF GemmaRMSNorm: (1 + w) in float32, one rounding",
)

LAYERNORM = Operator(
    name="layer_norm",
    family=FAMILY,
    reference=layer_norm,
    inputs=activations,
    weights=layer_norm_weights,
    buckets=Axes(-1),
    triggers=("low-precision row statistics (mean offset, non-negative activations)",
              "large mean offset (cancellation in one-pass variance)"),
    description="LayerNorm, two-pass float32 statistics, one rounding (F.layer_norm semantics)",
)

OPERATORS = (RMSNORM, LLAMA_RMSNORM, GEMMA_RMSNORM, LAYERNORM)
