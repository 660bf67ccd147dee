"""Gate 2: coherent bias of prod against ref, per bucket (METHOD.md section 3)."""

from __future__ import annotations

import numpy as np

from ..certificate import BiasResult
from ..diagnostics import diagnostic
from ..execution.runner import OutputAccumulator
from ..stats import power
from ..stats.bias import FAIL, IDENTICAL, UNTESTED, WARN, ATTRIBUTED_TO_REF, BiasThresholds, judge_buckets
from ..stats.ulp import ulp
from ..verdict import Verdict

STATISTICS = ("raw", "sign_aligned")


def judge_bias(acc: OutputAccumulator, thresholds: BiasThresholds, horizon: float, attribution: bool) -> BiasResult:
    layout = acc.layout
    replicates = len(acc.replicate)
    magnitude = acc.moments["magnitude"].mean
    bucket_ulp = np.asarray(ulp(magnitude, layout.dtype_name), np.float64).reshape(-1)
    tests = []
    for stat in STATISTICS:
        m = acc.moments[stat]
        prod_bias = acc.moments[f"prod_{stat}"].mean if attribution else None
        ref_bias = acc.moments[f"ref_{stat}"].mean if attribution else None
        tests.append(judge_buckets(stat, m.count, m.mean, m.std(), bucket_ulp, thresholds, horizon, prod_bias, ref_bias))
    tests = tuple(tests)

    codes = np.max(np.stack([t.verdict for t in tests]), axis=0) if bucket_ulp.size else np.zeros(0)
    verdict = Verdict.FAIL if np.any(codes == FAIL) else Verdict.WARN if np.any(codes == WARN) else Verdict.PASS
    diags = []
    if acc.nonfinite_prod:
        verdict = Verdict.FAIL
        diags.append(diagnostic("nonfinite_prod", f"{acc.nonfinite_prod} elements in replicates {acc.nonfinite_replicates}"))
    if acc.nonfinite_ref:
        verdict = Verdict.worst([verdict, Verdict.WARN])
        diags.append(diagnostic("nonfinite_ref", f"{acc.nonfinite_ref} elements in replicates {acc.nonfinite_replicates}"))

    tested = int(sum(t.tested for t in tests))
    reasons = np.stack([t.reason for t in tests]) if tests else np.zeros((0, 0))
    detectable = power.min_detectable_effect(replicates, thresholds.z_star, thresholds.power)
    covered = power.horizon_covered(replicates, thresholds.z_star, thresholds.power)
    needed = power.replicates_needed(horizon, thresholds.z_star, thresholds.power)
    if covered < horizon:
        diags.append(diagnostic(
            "low_power",
            f"R = {replicates} detects rho >= {detectable:.3g} with power {thresholds.power:g}, i.e. a bias harmful "
            f"within T ~ {covered:.3g} steps; the declared horizon T = {horizon:.3g} needs R ~ {needed:.3g}",
        ))
    zero_var = [int(np.sum((t.std == 0) & (t.count >= 2) & (t.reason != IDENTICAL))) for t in tests]
    if any(zero_var):
        diags.append(diagnostic("zero_variance_bucket", f"{max(zero_var)} buckets"))
    untested = int(np.sum(np.all(reasons == UNTESTED, axis=0))) if reasons.size else 0
    if untested:
        diags.append(diagnostic("untested_bucket", f"{untested} of {bucket_ulp.size} buckets"))
    to_ref = int(np.sum(np.any(reasons == ATTRIBUTED_TO_REF, axis=0))) if reasons.size else 0
    if to_ref:
        diags.append(diagnostic("attributed_to_ref", f"{to_ref} buckets"))
    if layout.prod_dtype != layout.dtype:
        prod_dtype = str(layout.prod_dtype).removeprefix("torch.")
        diags.append(diagnostic("output_dtype_differs", f"prod {prod_dtype}, ref {layout.dtype_name}"))

    return BiasResult(
        output=layout.name,
        dtype=layout.dtype_name,
        verdict=verdict,
        thresholds=thresholds,
        horizon=horizon,
        replicates=replicates,
        bucket_labels=tuple(layout.bucket_label(g) for g in range(bucket_ulp.size)),
        reference_magnitude=magnitude,
        ulp=bucket_ulp,
        tests=tests,
        familywise_error_bound=power.familywise_error_bound(tested, thresholds.z_star),
        min_detectable_effect=detectable,
        horizon_covered=covered,
        replicates_for_horizon=needed,
        s_min=thresholds.s_min(horizon),
        nonfinite_prod=acc.nonfinite_prod,
        nonfinite_ref=acc.nonfinite_ref,
        nonfinite_replicates=tuple(acc.nonfinite_replicates),
        attribution=attribution,
        diagnostics=tuple(diags),
    )

