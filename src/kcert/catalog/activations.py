"""Reference activations: SiLU, GELU (tanh approximation and exact erf), SwiGLU and GeGLU.

Written the way the reference frameworks write them:

- ``silu``: ``torch.nn.functional.silu`` (transformers' ``ACT2FN["silu"]``), one rounding of a
  float32-internal evaluation;
- ``gelu_tanh``: ``F.gelu(x, approximate="tanh")`` (transformers' ``gelu_pytorch_tanh``, Gemma's
  ``hidden_activation``); ``gelu_erf``: ``F.gelu(x)`` (transformers' ``gelu``, the exact form);
- ``gelu_new``: transformers' ``NewGELUActivation`` (GPT-2's tanh formula written out op by op in
  the working precision, no upcast);
- ``swiglu`` / ``geglu``: the gated MLP of Llama / Gemma, ``act(gate) * up`` with the activation
  rounded to the working dtype before the product (two roundings), as ``LlamaMLP`` /
  ``GemmaMLP`` compute it between ``gate_proj``/``up_proj`` and ``down_proj``.

Buckets: the feature channel (``Axes(-1)``) for the operators. An elementwise function has a
second place where a defect localises, the *input range*: a wrong branch (SiLU's negative
side) or a wrong asymptote lives in one sign and binade of the input whatever the channel.
:func:`input_range_buckets` groups the output by sign x binade of an input tensor.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..case import Axes, Custom, Labels
from . import Operator
from .probes import outlier_activations, shifted

# --- reference kernels -------------------------------------------------------------------------


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU as transformers applies it (``nn.SiLU``): float32 internals, one rounding."""
    return F.silu(x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation, as ``gelu_pytorch_tanh`` (Gemma's ``hidden_activation``)."""
    return F.gelu(x, approximate="tanh")


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """GELU, exact erf form, as transformers' ``gelu`` (``nn.GELU()``)."""
    return F.gelu(x)


GELU_TANH_C = math.sqrt(2.0 / math.pi)
GELU_TANH_A = 0.044715


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """transformers' ``NewGELUActivation`` (GPT-2's ``gelu_new``): the tanh formula written out
    op by op in the input dtype, every intermediate rounded to it."""
    return 0.5 * x * (1.0 + torch.tanh(GELU_TANH_C * (x + GELU_TANH_A * torch.pow(x, 3.0))))


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Llama's gated MLP core ``silu(gate) * up`` in the working dtype (two roundings)."""
    return F.silu(gate) * up


def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Gemma's gated MLP core ``gelu_tanh(gate) * up`` in the working dtype (two roundings)."""
    return F.gelu(gate, approximate="tanh") * up


# --- buckets -------------------------------------------------------------------------------------


def input_range_buckets(name: str, low_exponent: int = -4, high_exponent: int = 4) -> Labels:
    """Buckets by sign x binade of the input ``name``: for x >= 0, bucket
    ``clamp(floor(log2 x), low, high) - low``; for x < 0 the same shifted by the number of binades.
    Inputs below ``2**low`` share the first bucket of their sign, above ``2**high`` the last.
    Where an elementwise kernel's defect lives in one branch or range of its input (a negative
    branch, a large-|x| asymptote), this bucket holds it whatever the channel."""
    n = high_exponent - low_exponent + 1

    def labels(inputs, weights, ref_output):
        x = inputs[name].to(torch.float32)
        e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** low_exponent)))
        e = e.clamp(low_exponent, high_exponent).to(torch.int64) - low_exponent
        return e + n * (x < 0).to(torch.int64)

    return Labels(labels, count=2 * n, name=f"{name} sign x binade (2^{low_exponent}..2^{high_exponent})")


def input_range_label(g: int, low_exponent: int = -4, high_exponent: int = 4) -> str:
    """Human-readable range of bucket ``g`` of :func:`input_range_buckets`."""
    n = high_exponent - low_exponent + 1
    sign = "-" if g >= n else "+"
    e = g % n + low_exponent
    lo = "0" if e == low_exponent else f"2^{e}"
    hi = "inf" if e == high_exponent else f"2^{e + 1}"
    return f"|x| in [{lo}, {hi}), sign {sign}"


# --- probe contracts ---------------------------------------------------------------------------------


def gate_preactivations(shape: tuple[int, ...], shift: float = 0.1, std: float = 1.0,
                        outlier_channels: int = 0, outlier_scale: float = 30.0) -> Custom:
    """Pre-activations of an MLP gate (``gate_proj(x)``): N(shift, std**2), optionally with a few
    outlier channels (last axis) scaled by ``outlier_scale`` as in real LLM activations."""
    if outlier_channels:
        base = outlier_activations(tuple(shape), shift=shift, outlier_channels=outlier_channels,
                                   outlier_scale=outlier_scale)

        def draw(g, device):
            return base.fn(g, device) * std

        return Custom(draw, f"N({shift}, {std}^2) x {outlier_channels} outlier channels x{outlier_scale:g}",
                      tuple(shape))
    return shifted(tuple(shape), shift=shift, std=std)


def _unary_inputs(tokens: int = 128, hidden: int = 512, shift: float = 0.1, std: float = 1.0,
                  outlier_channels: int = 0, outlier_scale: float = 30.0, **_):
    return {"x": gate_preactivations((tokens, hidden), shift, std, outlier_channels, outlier_scale)}


def _gated_inputs(tokens: int = 128, hidden: int = 512, shift: float = 0.1, std: float = 1.0,
                  outlier_channels: int = 0, outlier_scale: float = 30.0, **_):
    return {
        "gate": gate_preactivations((tokens, hidden), shift, std, outlier_channels, outlier_scale),
        "up": gate_preactivations((tokens, hidden), shift, std, outlier_channels, outlier_scale),
    }


CHANNEL = Axes(-1)  # one bucket per feature channel

_TRIGGERS_UNARY = ("shifted probe (breaks the odd symmetry of x * f(x) defects)",
                   "tails and branches: x < -5.5, where 1 + exp(x) rounds to 1 in bf16",
                   "outlier channels x30 (large-|x| asymptotes)")

SILU = Operator(
    name="silu", family="activation", reference=silu, inputs=_unary_inputs, buckets=CHANNEL,
    triggers=_TRIGGERS_UNARY,
    description="SiLU x * sigmoid(x) (transformers nn.SiLU)",
)
GELU_TANH = Operator(
    name="gelu_tanh", family="activation", reference=gelu_tanh, inputs=_unary_inputs, buckets=CHANNEL,
    triggers=_TRIGGERS_UNARY, description="GELU, tanh approximation (gelu_pytorch_tanh, Gemma)",
)
GELU_ERF = Operator(
    name="gelu_erf", family="activation", reference=gelu_erf, inputs=_unary_inputs, buckets=CHANNEL,
    triggers=_TRIGGERS_UNARY, description="GELU, exact erf form (transformers gelu)",
)
SWIGLU = Operator(
    name="swiglu", family="activation", reference=swiglu, inputs=_gated_inputs, buckets=CHANNEL,
    triggers=_TRIGGERS_UNARY, description="SwiGLU core silu(gate) * up (Llama MLP)",
)
GEGLU = Operator(
    name="geglu", family="activation", reference=geglu, inputs=_gated_inputs, buckets=CHANNEL,
    triggers=_TRIGGERS_UNARY, description="GeGLU core gelu_tanh(gate) * up (Gemma MLP)",
)

OPERATORS = (SILU, GELU_TANH, GELU_ERF, SWIGLU, GEGLU)
