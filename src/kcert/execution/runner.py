"""Running replicates: draw probes, evaluate ref, prod and the oracle, fold each replicate into
mergeable accumulators. Memory is O(buckets + replicates) whatever R is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..case import Case, Labels
from ..errors import KernelError, RealModeUnsupported
from ..stats.moments import MomentAccumulator
from . import probes, seeding
from .outputs import ROWS, OutputLayout, ReplicateSummary, bucket_labels, make_layout, summarize
from .realmode import run_real


@dataclass
class OutputAccumulator:
    """Everything the gates need about one output, accumulated over replicates."""

    layout: OutputLayout
    moments: dict[str, MomentAccumulator]
    replicate: list[int] = field(default_factory=list)
    e_prod: list[float] = field(default_factory=list)
    e_ref: list[float] = field(default_factory=list)
    peak: list[float] = field(default_factory=list)
    nonfinite_prod: int = 0
    nonfinite_ref: int = 0
    nonfinite_replicates: list[int] = field(default_factory=list)

    @classmethod
    def empty(cls, layout: OutputLayout) -> "OutputAccumulator":
        size = layout.buckets or 0
        return cls(layout, {row: MomentAccumulator.zeros(size) for row in ROWS})

    def add(self, r: int, s: ReplicateSummary) -> None:
        g = s.sums.shape[1]
        for i, row in enumerate(ROWS):
            acc = self.moments[row]
            acc.grow(g)
            values = np.zeros(acc.size)
            values[:g] = s.sums[i]
            present = np.zeros(acc.size, bool)
            present[:g] = s.oracle_present if 2 <= i < 6 else s.present
            acc.add(values, present)
        self.replicate.append(r)
        self.e_prod.append(s.e_prod)
        self.e_ref.append(s.e_ref)
        self.peak.append(s.peak)
        self.nonfinite_prod += s.nonfinite_prod
        self.nonfinite_ref += s.nonfinite_ref
        if (s.nonfinite_prod or s.nonfinite_ref) and len(self.nonfinite_replicates) < 16:
            self.nonfinite_replicates.append(r)

    def merge(self, other: "OutputAccumulator") -> None:
        """Fold in an accumulator of the same output built on disjoint replicates."""
        for row in ROWS:
            self.moments[row].merge(other.moments[row])
        self.replicate += other.replicate
        self.e_prod += other.e_prod
        self.e_ref += other.e_ref
        self.peak += other.peak
        self.nonfinite_prod += other.nonfinite_prod
        self.nonfinite_ref += other.nonfinite_ref
        self.nonfinite_replicates = sorted(self.nonfinite_replicates + other.nonfinite_replicates)[:16]

    def errors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(E_prod, E_ref, peak) ordered by replicate index."""
        order = np.argsort(self.replicate, kind="stable")
        return (np.asarray(self.e_prod)[order], np.asarray(self.e_ref)[order], np.asarray(self.peak)[order])


def as_outputs(value, role: str, where: str) -> tuple[torch.Tensor, ...]:
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    raise KernelError(f"{where}: {role} must return a tensor or a non-empty tuple of tensors, got {type(value).__name__}")


class Runner:
    """Evaluates a case replicate by replicate. Replicate r depends on (seed, r) alone."""

    def __init__(self, case: Case, seed: int, device: torch.device | str = "cpu"):
        self.case = case
        self.seed = int(seed)
        self.device = torch.device(device)
        self.weights = probes.draw_weights(case, self.seed, self.device)
        self.accumulators: list[OutputAccumulator] | None = None
        self.oracle_source = "given" if case.oracle is not None else "ref in real mode"
        self.oracle_unavailable: str | None = None

    # -- error context ------------------------------------------------------------------------
    def where(self, r: int | None = None) -> str:
        text = f"case {self.case.name!r}"
        if r is not None:
            text += f", replicate {r} (seed {self.seed}, replicate seed {seeding.derived_seed(self.seed, seeding.INPUTS, r)})"
        return text

    def _call(self, role: str, fn: Callable, kwargs: dict, r: int):
        try:
            with torch.no_grad():
                return fn(**kwargs)
        except Exception as exc:  # noqa: BLE001 - reported with case, replicate and seed
            raise KernelError(f"{self.where(r)}: {role} raised {type(exc).__name__}: {exc}") from exc

    def _oracle(self, exact: dict, r: int):
        if self.oracle_unavailable is not None:
            return None
        if self.case.oracle is not None:
            return self._call("oracle", self.case.oracle, exact, r)
        try:
            with torch.no_grad():
                return run_real(lambda: self.case.ref(**exact), dtype=torch.float64, name="ref")
        except RealModeUnsupported as exc:
            if r == 0 or self.accumulators is None:
                self.oracle_unavailable = str(exc)
                return None
            raise KernelError(f"{self.where(r)}: ref stopped running in real mode: {exc}") from exc

    # -- one replicate ------------------------------------------------------------------------
    def step(self, r: int) -> None:
        draw = probes.draw_inputs(self.case, self.seed, r, self.device)
        working = {**draw.working, **self.weights.working}
        exact = {**draw.exact, **self.weights.exact}
        where = self.where(r)
        ref_out = as_outputs(self._call("ref", self.case.ref, working, r), "ref", where)
        prod_out = as_outputs(self._call("prod", self.case.prod, working, r), "prod", where)
        if len(ref_out) != len(prod_out):
            raise KernelError(f"{where}: ref returns {len(ref_out)} outputs but prod returns {len(prod_out)}")
        raw_oracle = self._oracle(exact, r)
        oracle_out = None
        if raw_oracle is not None:
            oracle_out = as_outputs(raw_oracle, "oracle", where)
            if len(oracle_out) != len(ref_out):
                raise KernelError(f"{where}: the oracle returns {len(oracle_out)} outputs but ref returns {len(ref_out)}")

        n = len(ref_out)
        if self.accumulators is None:
            layouts = []
            for i, (a, b) in enumerate(zip(ref_out, prod_out)):
                name = self.case.output_name(i, n)
                layouts.append(make_layout(i, name, a, b, self.case.bucket_spec(i, n), self.where()))
            self.accumulators = [OutputAccumulator.empty(layout) for layout in layouts]
        elif n != len(self.accumulators):
            raise KernelError(f"{where}: the kernels now return {n} outputs, {len(self.accumulators)} before")

        for acc, a, b, i in zip(self.accumulators, ref_out, prod_out, range(n)):
            layout = acc.layout
            for role, t in (("ref", a), ("prod", b)):
                if tuple(t.shape) != layout.shape:
                    raise KernelError(
                        f"{where}: {layout.name} of {role} has shape {tuple(t.shape)}, expected {layout.shape}"
                        + (" (the shape of ref)" if role == "prod" else " (its shape at replicate 0)")
                    )
            o = None
            if oracle_out is not None:
                o = oracle_out[i]
                if tuple(o.shape) != layout.shape:
                    raise KernelError(f"{where}: {layout.name} of the oracle has shape {tuple(o.shape)}, expected {layout.shape}")
            labels = None
            if isinstance(layout.spec, Labels):
                labels = bucket_labels(layout.spec, draw.working, self.weights.working, a, f"{where}, {layout.name}")
            acc.add(r, summarize(layout, a, b, o, labels))

    def run(self, start: int, stop: int, progress: Callable[[int], None] | None = None) -> None:
        for r in range(start, stop):
            self.step(r)
            if progress is not None:
                progress(1)
