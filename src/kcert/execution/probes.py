"""Drawing a case's probes: working-precision tensors for ref/prod and exact float64 copies
of the very same values for the oracle."""

from __future__ import annotations

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


def _draw(probes: dict[str, Probe], g: torch.Generator, dtype, device, widen: float) -> Draw:
    working, exact = {}, {}
    precision = _precision(dtype)
    for name, probe in probes.items():
        if widen != 1.0:
            probe = probe.widened(widen)
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
                widen: float = 1.0) -> Draw:
    g = seeding.generator(seed, stream, replicate, device)
    return _draw(dict(case.inputs), g, case.dtype, device, widen)
