"""Reference linear layers and GEMMs: linear / addmm with bias, and a split-K GEMM.

Written the way the reference frameworks compute them:

- ``linear``: ``F.linear(x, w, b)``: products accumulated in float32, the bias added in the
  float32 epilogue, one rounding to the working dtype (cuBLAS / oneDNN ``addmm`` with a fused
  bias, ``nn.Linear``);
- ``linear_unfused``: the GEMM rounded to the working dtype first and the bias added by a separate
  elementwise kernel in the working dtype (Megatron's ``skip_bias_add`` followed by a bias-add
  kernel, ``x @ w.T + b`` written out): two roundings;
- ``matmul``: ``x @ w.T`` with float32 accumulation and one rounding; ``matmul_fp32``: the same
  bf16 operands multiplied in float32 with a float32 output (``x.float() @ w.float().T``);
- ``splitk_matmul``: a split-K GEMM: K is cut into ``splits`` slices, each slice's product is
  accumulated in float32, written to a workspace of ``partial_dtype`` and the workspace is reduced
  in that dtype (cuBLASLt's reduction scheme: float32 workspace, or the output dtype when
  reduced-precision reductions are allowed); the bias, if any, is added in float32 in the
  epilogue of the reduction, one final rounding to ``out_dtype``.

Buckets: the output feature channel (``Axes(-1)``): a bias, a gain or a per-column reduction
defect is coherent per output channel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..case import Axes
from . import Operator
from .probes import outlier_activations, trained_weights


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """``nn.Linear`` / ``addmm``: float32 accumulation, bias in the float32 epilogue, one rounding."""
    return F.linear(x, w, b)


def linear_unfused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """GEMM rounded to the working dtype, then a separate bias-add kernel in the working dtype."""
    return F.linear(x, w) + b


def matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w.T``: float32 accumulation, one rounding to the working dtype."""
    return F.linear(x, w)


def matmul_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The same low-precision operands multiplied in float32, float32 output."""
    return F.linear(x.float(), w.float())


def splitk_matmul(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, *, splits: int = 4,
                  partial_dtype: torch.dtype = torch.float32, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Split-K GEMM ``x @ w.T (+ b)``: ``splits`` K-slices, each accumulated in float32 and stored
    in a ``partial_dtype`` workspace, reduced in slice order in ``partial_dtype``, the bias added in
    float32 in the reduction's epilogue, one rounding to ``out_dtype`` (default: x's dtype)."""
    out_dtype = out_dtype or x.dtype
    k = x.shape[-1]
    if k % splits:
        raise ValueError(f"K = {k} is not a multiple of splits = {splits}")
    step = k // splits
    acc = None
    for s in range(splits):
        part = F.linear(x[..., s * step:(s + 1) * step].float(), w[:, s * step:(s + 1) * step].float())
        part = part.to(partial_dtype)
        acc = part if acc is None else (acc + part).to(partial_dtype)
    out = acc.float()
    if b is not None:
        out = out + b.float()
    return out.to(out_dtype)


# --- probe contracts --------------------------------------------------------------------------------


def _linear_inputs(tokens: int = 64, in_features: int = 1024, out_features: int = 256, shift: float = 0.1,
                   outlier_channels: int = 4, outlier_scale: float = 30.0, **_):
    return {"x": outlier_activations((tokens, in_features), shift=shift, outlier_channels=outlier_channels,
                                     outlier_scale=outlier_scale)}


def _linear_weights(in_features: int = 1024, out_features: int = 256, weight_std: float = 0.02,
                    bias_std: float = 0.02, bias: bool = True, **_):
    w = {"w": trained_weights((out_features, in_features), std=weight_std)}
    if bias:
        w["b"] = trained_weights((out_features,), std=bias_std)
    return w


_TRIGGERS = ("outlier input channels x30 (real LLM activations)",
             "trained-like weights: N(0, 0.02^2) with 1% of entries x20",
             "trained-like biases small against the GEMM output (a bias under half an ULP of the "
             "output is lost by a second rounding)",
             "deep K (decode-shaped GEMMs are the ones split along K)")

LINEAR = Operator(
    name="linear", family="gemm", reference=linear, inputs=_linear_inputs, weights=_linear_weights,
    buckets=Axes(-1), triggers=_TRIGGERS,
    description="linear / addmm with bias: float32 accumulation and epilogue, one rounding",
)
MATMUL = Operator(
    name="matmul", family="gemm", reference=matmul, inputs=_linear_inputs,
    weights=lambda **p: _linear_weights(**{**p, "bias": False}),
    buckets=Axes(-1), triggers=_TRIGGERS,
    description="x @ w.T: float32 accumulation, one rounding",
)

OPERATORS = (LINEAR, MATMUL)
