"""L0, the bitwise layer (docs/method.md, "L0"): informational, beside the three gates.

It explains what the gates leave implicit: how many elements prod and ref agree on bit for bit,
how far apart the others are in ULPs, and whether the significant buckets' |z| grows like
sqrt(R) (a coherent bias) or not (a rounding arrangement without one, the technical report's
TransformerEngine #1132 miss). It never changes a verdict or the exit code.
"""

from __future__ import annotations

from ..certificate import BitwiseResult
from ..execution.accumulator import OutputAccumulator
from ..stats.bitwise import classify, growth_test
from ..stats.moments import MomentAccumulator
from ..stats.power import critical_z


def judge_bitwise(acc: OutputAccumulator, early: tuple[int, dict[str, MomentAccumulator]] | None,
                  z_star: float) -> BitwiseResult:
    """L0 for one output from its accumulator and the runner's early snapshot
    (:meth:`kcert.execution.runner.Runner.early_moments`); ``z_star``: the bias gate's threshold; its
    critical value at R (:func:`kcert.stats.power.critical_z`) decides which buckets count as significant
    at R, as in the bias gate."""
    layout = acc.layout
    replicates = len(acc.replicate)
    comparable = layout.bitwise_comparable
    reasons = []
    if not comparable:
        reasons.append(f"prod returns {str(layout.prod_dtype).removeprefix('torch.')}, ref {layout.dtype_name}: "
                       "bits of different formats are not compared")
    growth = None
    if early is None:
        reasons.append(f"the growth test needs R >= 256 (z at R/4 from whole blocks of 64), R = {replicates}")
    else:
        early_replicates, moments = early
        growth = growth_test(moments, acc.moments, early_replicates, replicates, critical_z(replicates, z_star))
    return BitwiseResult(
        output=layout.name,
        dtype=layout.dtype_name,
        replicates=replicates,
        ulp_histogram=acc.ulp_histogram.copy(),
        classification=classify(acc.ulp_histogram, growth, comparable),
        growth=growth,
        reason="; ".join(reasons),
    )
