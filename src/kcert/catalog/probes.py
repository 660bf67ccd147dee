"""Probe builders for triggers a plain Gaussian misses (docs/method.md, "Gate 2"): outlier channels of
real activations, trained-like weights with tiny and large values, near-tied logits, positions
far beyond the trained context. Each returns a :class:`kcert.Custom` or plain probe."""

from __future__ import annotations

import torch

from ..case import Custom, Gaussian, Integers


def outlier_activations(shape: tuple[int, ...], shift: float = 0.1, outlier_channels: int = 4,
                        outlier_scale: float = 30.0) -> Custom:
    """N(shift, 1) activations whose first ``outlier_channels`` features (last axis) are scaled by
    ``outlier_scale``, as in real LLM hidden states (a few massive channels)."""

    def draw(g: torch.Generator, device) -> torch.Tensor:
        x = torch.randn(shape, generator=g, device=device) + shift
        x[..., :outlier_channels] *= outlier_scale
        return x

    return Custom(draw, f"N({shift}, 1) with {outlier_channels} outlier channels x{outlier_scale:g}", tuple(shape))


def trained_weights(shape: tuple[int, ...], center: float = 0.0, std: float = 0.02, large_fraction: float = 0.01,
                    large_scale: float = 20.0, seed_offset: int = 0) -> Custom:
    """Trained-like weights: mostly N(center, std**2), with a ``large_fraction`` of entries
    ``large_scale`` times larger (both tiny and large magnitudes occur)."""

    def draw(g: torch.Generator, device) -> torch.Tensor:
        w = torch.randn(shape, generator=g, device=device) * std
        big = torch.rand(shape, generator=g, device=device) < large_fraction
        return center + torch.where(big, w * large_scale, w)

    return Custom(draw, f"trained-like N({center}, {std}^2) with {large_fraction:.0%} x{large_scale:g}", tuple(shape))


def near_tied_logits(shape: tuple[int, ...], gap: float = 1e-3, std: float = 1.0) -> Custom:
    """Logits whose two largest entries per row (last axis) are within ``gap`` of each other:
    the regime where rounding flips a top-k choice."""

    def draw(g: torch.Generator, device) -> torch.Tensor:
        x = torch.randn(shape, generator=g, device=device) * std
        top, first = x.max(-1, keepdim=True)
        # the runner-up is any other index, placed just below the maximum
        offset = torch.randint(1, shape[-1], first.shape, generator=g, device=device)
        second = (first + offset) % shape[-1]
        jitter = torch.rand(first.shape, generator=g, device=device) * gap
        return x.scatter(-1, second, top - jitter)

    return Custom(draw, f"N(0, {std}^2) logits with a near tie (gap {gap:g}) per row", tuple(shape))


def positions(shape: tuple[int, ...], low: int, high: int) -> Integers:
    """Integer position ids drawn uniformly in [low, high): e.g. far beyond 4096 or beyond the
    original context of a scaled RoPE."""
    return Integers(tuple(shape), low, high)


def shifted(shape: tuple[int, ...], shift: float = 0.1, std: float = 1.0) -> Gaussian:
    """The default probe of docs/method.md, "Gate 2": a Gaussian shifted off zero to break symmetry."""
    return Gaussian(tuple(shape), shift=shift, std=std)
