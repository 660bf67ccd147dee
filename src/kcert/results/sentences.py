"""Each gate's result in one sentence: what was compared, how many buckets or replicates failed, the worst
one and where, and what was allowed. The checks store them with a short run's outcome and the report
builds its messages from them (:mod:`kcert.report.text`); each gate's description names its sentence
(:mod:`kcert.results.gates`)."""

from __future__ import annotations

from ..numbers import fmt
from ..verdict import Verdict
from .bias import BiasResult
from .variance import VarianceResult


def bias_sentence(b: BiasResult) -> str:
    fails, warns = b.count(Verdict.FAIL), b.count(Verdict.WARN)
    head = f"{b.output}: {fails} of {b.buckets} buckets FAIL, {warns} WARN over {b.replicates} replicates"
    parts = [head]
    if b.nonfinite_prod:
        parts.append(f"prod non-finite where ref is finite in {b.nonfinite_prod} elements "
                     f"(replicates {list(b.nonfinite_replicates)})")
    if b.nonfinite_ref:
        parts.append(f"ref non-finite where prod is finite in {b.nonfinite_ref} elements")
    worst = b.findings(limit=1)
    if worst:
        f = worst[0]
        parts.append(
            f"worst {f.label} ({f.statistic}): {f.direction} by {f.effect_ulp:.3g} ULP "
            f"(mean {f.mean:.3g}, ULP {f.ulp:.3g} at |ref| {f.reference_magnitude:.3g}), z = {f.z:+.3g}, "
            f"effect {f.standardized_effect:.3g} sd; {f.reason}"
        )
        parts.append(
            f"allowed: |z| <= {b.critical_z():.3g} (z* = {b.thresholds.z_star:g} at this R) or "
            f"|mean| <= {b.thresholds.ulp_floor:g} ULP or |mean|/s <= {b.s_min:.3g}"
        )
    return "; ".join(parts)


def variance_sentence(v: VarianceResult) -> str:
    p, r = v.error_summary("prod"), v.error_summary("ref")
    unit = f"{v.harm_format} ULP" if v.harm_format else "harm units"
    head = (f"{v.output}: errors over {v.replicates} replicates, max prod {fmt(p[1.0])} / ref {fmt(r[1.0])} {unit}"
            + ("" if v.prod_closer_share is None else f", prod closer in {100 * v.prod_closer_share:.3g}%"))
    return f"{head}; {v.reason}"

