"""The gates, one line each (:data:`JUDGES`): the certification core judges every gate listed here, in
the order given, and the certificate, its combined verdict and every report follow from the results
(docs/design.md, "Where a new thing goes"). A new gate is its own module, with its description
(:class:`kcert.results.gates.Gate`), its result type and its judge, plus one line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..results.gates import ALGEBRA, BIAS, VARIANCE, Gate
from ..stats.ulp import harm_format
from .algebra import judge_algebra
from .bias import judge_bias
from .judging import Judging
from .variance import interval_is_decisive, judge_variance


@dataclass(frozen=True)
class Judge:
    """How the core judges one gate.

    ``judge``: its results from a :class:`~kcert.gates.judging.Judging` (one per output, or one for the
    case); ``every_look``: judged after each look, its results being what more replicates serve until
    ``decisive`` holds for each of them (the last look's are the certificate's); ``grows``: its evidence
    grows with the replicates (False: judged once and kept, e.g. the algebra gate, which runs its own
    kernels); ``needs_oracle``: not judged without the float64 oracle; ``announce``: a ``stage`` event
    before judging (it takes long enough for a progress line to name it).

    Between looks, the gates not judged at every look are judged, those that read the accumulators
    first, until one FAILs: then more replicates could not change the combined verdict and the run stops."""

    gate: Gate
    judge: Callable[[Judging], tuple]
    every_look: bool = False
    decisive: Callable[[object], bool] | None = None
    grows: bool = True
    needs_oracle: bool = False
    announce: bool = False


def _algebra(j: Judging) -> tuple:
    s = j.settings
    return (judge_algebra(j.algebra_evidence(), s.accept_untested_algebra, s.bias_thresholds.ulp_floor),)


def _bias(j: Judging) -> tuple:
    s = j.settings
    return tuple(judge_bias(acc, s.bias_thresholds, s.horizon, attribution=j.oracle,
                            dtypes_may_differ=j.case.dtypes_may_differ,
                            harm_format=harm_format(acc.layout.dtype_name, j.case.training_format))
                 for acc in j.accumulators)


def _variance(j: Judging) -> tuple:
    s = j.settings
    return tuple(
        judge_variance(acc.layout.name, acc.layout.dtype_name, *acc.errors(), s.horizon, s.variance_thresholds,
                       j.output_seeds[i], j.looks, j.planned_looks,
                       harm_format=harm_format(acc.layout.dtype_name, j.case.training_format))
        for i, acc in enumerate(j.accumulators)
    )


JUDGES = (
    Judge(gate=ALGEBRA, judge=_algebra, grows=False, announce=True),
    Judge(gate=BIAS, judge=_bias),
    Judge(gate=VARIANCE, judge=_variance, every_look=True, decisive=interval_is_decisive, needs_oracle=True),
)
