"""Drawing a case's probes: working-precision tensors for ref/prod and exact float64 copies
of the very same values for the oracle."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..case import Case, Probe
from . import seeding


@dataclass(frozen=True)
class Draw:
    working: dict[str, torch.Tensor]  # what ref and prod receive
    exact: dict[str, torch.Tensor]  # float64 copies of the same values for the oracle


def _precision(dtype: torch.dtype) -> torch.dtype:
    # float32 draws suffice for every working dtype below float64 (they are rounded anyway).
    return torch.float64 if dtype == torch.float64 else torch.float32


def _draw(probes: dict[str, Probe], g: torch.Generator, dtype, device, widen: float, scale: float = 1.0) -> Draw:
    working, exact = {}, {}
    precision = _precision(dtype)
    for name, probe in probes.items():
        if widen != 1.0:
            probe = probe.widened(widen)
        if scale != 1.0:
            probe = probe.scaled(scale)
        value = probe.sample(g, device, precision)
        if probe.rounds_to_case_dtype and value.is_floating_point():
            value = value.to(dtype)
        working[name] = value
        exact[name] = value.to(torch.float64) if value.is_floating_point() else value
    return Draw(working, exact)


def draw_weights(case: Case, seed: int, device: torch.device) -> Draw:
    """Weights are drawn once per run and shared by ref, prod and the oracle."""
    g = seeding.generator(seed, seeding.WEIGHTS, 0, device)
    return _draw(dict(case.weights), g, case.dtype, device, 1.0)


def draw_inputs(case: Case, seed: int, replicate: int, device: torch.device, stream: int = seeding.INPUTS,
                widen: float = 1.0, scale: float = 1.0) -> Draw:
    g = seeding.generator(seed, stream, replicate, device)
    return _draw(dict(case.inputs), g, case.dtype, device, widen, scale)


# The algebra gate's small-magnitude points: inputs scaled so that an eps, an offset or a cancellation
# dominates (x ~ 1e-3: x**2 ~ 1e-6, a norm's eps; x ~ 1e-6: x**2 ~ 1e-12, an l2norm's). float16's
# normal range ends at 2**-14, so its points stay above it.
SMALL_SCALES = (2.0**-10, 2.0**-20)
SMALL_SCALES_FLOAT16 = (2.0**-5, 2.0**-10)


@dataclass(frozen=True)
class PointPlan:
    """The algebra gate's points (identity test, proof witnesses, precision ladder): ``points`` draws of
    the probe, ``wide_points`` draws widened by ``widen`` and ``small_points`` draws scaled down to small
    magnitudes (alternating over ``small_scales``), in that order; point ``i`` draws from the algebra
    stream's generator ``(seed, i)``, so adding kinds at the end leaves the earlier draws unchanged."""

    points: int
    wide_points: int
    small_points: int = 0
    widen: float = 4.0
    small_scales: tuple[float, ...] = SMALL_SCALES

    @staticmethod
    def for_case(case: Case, points: int, wide_points: int, small_points: int | None = None,
                 widen: float = 4.0) -> "PointPlan":
        """The plan for ``case``; ``small_points`` defaults to ``points // 2``."""
        small = points // 2 if small_points is None else small_points
        scales = SMALL_SCALES_FLOAT16 if case.dtype == torch.float16 else SMALL_SCALES
        return PointPlan(points, wide_points, small, widen, scales)

    @property
    def total(self) -> int:
        return self.points + self.wide_points + self.small_points

    def transform(self, i: int) -> tuple[float, float]:
        """``(widen, scale)`` of point ``i``."""
        if i < self.points:
            return 1.0, 1.0
        if i < self.points + self.wide_points:
            return self.widen, 1.0
        k = i - self.points - self.wide_points
        return 1.0, self.small_scales[k % len(self.small_scales)]

    def describe(self, i: int) -> str:
        """Point ``i`` in words: "probe draw 3", "4x wider draw 9", "draw 17 scaled by 2^-20"."""
        widen, scale = self.transform(i)
        if scale != 1.0:
            return f"draw {i} scaled by 2^{round(math.log2(scale))}"
        return f"{widen:g}x wider draw {i}" if widen != 1.0 else f"probe draw {i}"

    def draw(self, case: Case, seed: int, i: int, device: torch.device) -> Draw:
        widen, scale = self.transform(i)
        return draw_inputs(case, seed, i, device, stream=seeding.ALGEBRA, widen=widen, scale=scale)
