"""The embedded demo: Gemma RMSNorm, correct and with (1 + w) formed in bf16.

Gemma stores its RMSNorm gain as w ~ 0 and applies (1 + w). Forming (1 + w) in bf16 leaves only
the bits of 1's binade for w, a fixed per-channel gain error of up to one bf16 unit roundoff
(transformers PR #29402, vllm #3653, TransformerEngine PR #1690). Its error against float64 stays
at the ULP level, so magnitude checks (assert_close, the variance gate) do not fail it; its sign never
changes per channel, so it adds up over training steps. The bias gate sees it.
"""

from __future__ import annotations

import torch

from .case import Axes, Case, Gaussian

EPS = 1e-6
HIDDEN = 256


def gemma_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Reference: normalise and apply (1 + w) in float32, round once at the end."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)
    return (y * (1.0 + w.float())).to(x.dtype)


def gemma_rmsnorm_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A correct rewrite: gain folded first, division instead of rsqrt, one rounding."""
    x32 = x.float()
    gain = w.float() + 1.0
    return (x32 * gain / torch.sqrt(x32.square().mean(-1, keepdim=True) + EPS)).to(x.dtype)


def gemma_rmsnorm_bf16_gain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The defect: normalised activations and (1 + w) both rounded to bf16 before the product."""
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)
    return y * (1.0 + w).to(x.dtype)


def _case(name: str, prod, description: str) -> Case:
    return Case(
        name=name,
        ref=gemma_rmsnorm,
        prod=prod,
        inputs={"x": Gaussian((2, 64, HIDDEN), shift=0.1)},
        weights={"w": Gaussian((HIDDEN,), std=0.02)},
        buckets=Axes(-1),
        dtype=torch.bfloat16,
        description=description,
    )


correct = _case("gemma_rmsnorm_correct", gemma_rmsnorm_fused,
                "Gemma RMSNorm: a correct fused rewrite (expected PASS)")
bf16_gain = _case("gemma_rmsnorm_bf16_gain", gemma_rmsnorm_bf16_gain,
                  "Gemma RMSNorm with (1 + w) formed in bf16 (expected FAIL in the bias gate, no FAIL in variance)")

CASES = (correct, bf16_gain)
EXPECTED = {correct.name: "PASS", bf16_gain.name: "FAIL"}
