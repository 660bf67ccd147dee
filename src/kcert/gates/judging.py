"""What a gate judges (:class:`Judging`), handed to every judge of :mod:`kcert.gates.registry` by the
certification core: the case, the run's settings, each output's accumulator, the looks so far, and the
evaluations only execution/ can run (the algebra evidence), computed on demand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..case import Case
from ..execution.accumulator import OutputAccumulator
from ..execution.evidence import AlgebraEvidence
from ..settings import Settings


@dataclass(frozen=True)
class Judging:
    """One judging of a run. ``oracle``: the float64 oracle ran (a gate that needs it is skipped
    otherwise); ``output_seeds``: each output's own seed for a gate's random draws (the variance gate's
    spread of tied errors and bootstrap); ``looks``, ``planned_looks``: the replicate counts examined so
    far and how many the schedule allows; ``algebra_evidence``: runs the algebra gate's kernels (minutes:
    called only by the gate that needs it)."""

    case: Case
    settings: Settings
    accumulators: tuple[OutputAccumulator, ...]
    oracle: bool
    output_seeds: tuple[int, ...]
    looks: tuple[int, ...]
    planned_looks: int
    algebra_evidence: Callable[[], AlgebraEvidence]
