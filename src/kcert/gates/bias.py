"""Gate 2: coherent bias of prod against ref, per bucket (docs/method.md, "Gate 2")."""

from __future__ import annotations

import numpy as np

from ..certificate import BiasResult
from ..diagnostics import Code, diagnostic
from ..results.gates import BIAS
from ..execution.accumulator import OutputAccumulator
from ..stats import power
from ..stats.bias import (ATTRIBUTED_TO_REF, FAIL, IDENTICAL, SHARED_WITH_REF, UNTESTED, WARN, attribution_z,
                          against_ref_profile, judge_buckets, warn_within_ref_profile)
from ..stats.thresholds import BiasThresholds
from ..stats.ulp import ulp
from ..verdict import Verdict
from .minimum import BIAS_REFERENCE_EFFECT, bias_minimum, judge_minimum


def judge_bias(acc: OutputAccumulator, thresholds: BiasThresholds, horizon: float, attribution: bool,
               dtypes_may_differ: bool = False, harm_format: str | None = None) -> BiasResult:
    """Judge one output's accumulated moments. The result keeps the moments, so it can be judged
    again under other thresholds (``rejudge``) without running a kernel. A prod output dtype other
    than ref's WARNs (an interface change) unless ``dtypes_may_differ`` (``Case.dtypes_may_differ``).
    ``harm_format``: the format whose ULP the floor is counted in (default: the output's own;
    ``Case.training_format`` and docs/method.md, "The harm scale")."""
    layout = acc.layout
    moments = {row: (m.count.copy(), m.mean.copy(), m.std()) for row, m in acc.moments.items()}
    return _judge(
        output=layout.name,
        dtype=layout.dtype_name,
        prod_dtype=str(layout.prod_dtype).removeprefix("torch."),
        labels=tuple(layout.bucket_label(g) for g in range(acc.moments["raw"].size)),
        moments=moments,
        replicates=len(acc.replicate),
        nonfinite=(acc.nonfinite_prod, acc.nonfinite_ref, tuple(acc.nonfinite_replicates)),
        thresholds=thresholds,
        horizon=horizon,
        oracle=attribution,
        dtypes_may_differ=dtypes_may_differ,
        harm_format=harm_format or layout.dtype_name,
    )


def rejudge(result: BiasResult, thresholds: BiasThresholds) -> BiasResult:
    """The same evidence judged under other thresholds (e.g. the report's rules)."""
    return _judge(result.output, result.dtype, result.prod_dtype, result.bucket_labels, result.moments,
                  result.replicates, (result.nonfinite_prod, result.nonfinite_ref, result.nonfinite_replicates),
                  thresholds, result.horizon, result.oracle, result.dtypes_may_differ, result.harm_format or result.dtype)


def _judge(output, dtype, prod_dtype, labels, moments, replicates, nonfinite, thresholds, horizon, oracle,
           dtypes_may_differ=False, harm_format=None) -> BiasResult:
    nonfinite_prod, nonfinite_ref, nonfinite_replicates = nonfinite
    magnitude = moments["magnitude"][1]
    harm_format = harm_format or dtype
    bucket_ulp = np.asarray(ulp(magnitude, harm_format), np.float64).reshape(-1)
    attribution = oracle and thresholds.attribution
    tests = []
    for stat in ("raw", "sign_aligned") if thresholds.sign_aligned else ("raw",):
        count, mean, std = moments[stat]
        prod_bias = moments[f"prod_{stat}"][1] if attribution else None
        ref_bias = moments[f"ref_{stat}"][1] if attribution else None
        prod_z = attribution_z(*moments[f"prod_{stat}"]) if attribution else None
        tests.append(judge_buckets(stat, count, mean, std, bucket_ulp, thresholds, horizon, prod_bias, ref_bias,
                                   prod_z))
    tests = tuple(tests)
    # the profile rule (docs/method.md, "The working precision's own bias"): judged on the bucket-wise FAILs, it
    # turns them into WARNs where they lie within ref's own bias profile on this output
    profile = against_ref_profile(tests, thresholds)
    if profile is not None and profile.within:
        tests = warn_within_ref_profile(tests)

    codes = np.max(np.stack([t.verdict for t in tests]), axis=0) if bucket_ulp.size else np.zeros(0)
    verdict = Verdict.FAIL if np.any(codes == FAIL) else Verdict.WARN if np.any(codes == WARN) else Verdict.PASS
    diags = []
    if nonfinite_prod:
        verdict = Verdict.FAIL
        diags.append(diagnostic(Code.NONFINITE_PROD,
                                f"{nonfinite_prod} elements in replicates {list(nonfinite_replicates)}"))
    if nonfinite_ref:
        verdict = Verdict.worst([verdict, Verdict.WARN])
        diags.append(diagnostic(Code.NONFINITE_REF,
                                f"{nonfinite_ref} elements in replicates {list(nonfinite_replicates)}"))

    tested = int(sum(t.tested for t in tests))
    reasons = np.stack([t.reason for t in tests]) if tests else np.zeros((0, 0))
    detectable = power.min_detectable_effect(replicates, thresholds.z_star, thresholds.power)
    covered = power.horizon_covered(replicates, thresholds.z_star, thresholds.power)
    needed = power.replicates_needed(horizon, thresholds.z_star, thresholds.power)
    if covered < horizon:
        diags.append(diagnostic(Code.LOW_POWER,
            f"R = {replicates} detects rho >= {detectable:.3g} with power {thresholds.power:g}, i.e. a bias harmful "
            f"within T ~ {covered:.3g} steps; the declared horizon T = {horizon:.3g} needs R ~ {needed:.3g}",
        ))
    zero_var = [int(np.sum((t.std == 0) & (t.count >= 2) & (t.reason != IDENTICAL))) for t in tests]
    if any(zero_var):
        diags.append(diagnostic(Code.ZERO_VARIANCE_BUCKET, f"{max(zero_var)} buckets"))
    untested = int(np.sum(np.all(reasons == UNTESTED, axis=0))) if reasons.size else 0
    if untested:
        diags.append(diagnostic(Code.UNTESTED_BUCKET, f"{untested} of {bucket_ulp.size} buckets"))
    for code, reason in ((Code.ATTRIBUTED_TO_REF, ATTRIBUTED_TO_REF), (Code.SHARED_WITH_REF, SHARED_WITH_REF)):
        buckets = int(np.sum(np.any(reasons == reason, axis=0))) if reasons.size else 0
        if buckets:
            diags.append(diagnostic(code, f"{buckets} buckets"))
    if profile is not None and profile.within:
        diags.append(diagnostic(Code.WITHIN_REF_PROFILE, _profile_words(profile)))
    elif profile is not None and profile.buckets:
        diags.append(diagnostic(Code.FAIL_AGAINST_REF_PROFILE, _profile_words(profile)))
    if prod_dtype != dtype:
        declared = " (declared: Case.dtypes_may_differ)" if dtypes_may_differ else ""
        diags.append(diagnostic(Code.OUTPUT_DTYPE_DIFFERS, f"prod {prod_dtype}, ref {dtype}{declared}"))
        if not dtypes_may_differ:  # an interface change must not go through silently
            verdict = Verdict.worst([verdict, Verdict.WARN])
    minimum = bias_minimum(thresholds.z_star, thresholds.power)
    critical = power.critical_z(minimum, thresholds.z_star)
    verdict, too_few = judge_minimum(BIAS.name, verdict, replicates, minimum,
                                     f"a bias as large as the noise, rho = {BIAS_REFERENCE_EFFECT:g}, detected with "
                                     f"power {thresholds.power:g} at |z| > {critical:.3g}, the Student t quantile "
                                     f"of z* = {thresholds.z_star:g} at that R")
    if too_few is not None:
        diags.append(too_few)

    return BiasResult(
        output=output,
        dtype=dtype,
        prod_dtype=prod_dtype,
        verdict=verdict,
        thresholds=thresholds,
        horizon=horizon,
        replicates=replicates,
        bucket_labels=tuple(labels),
        reference_magnitude=magnitude,
        ulp=bucket_ulp,
        tests=tests,
        familywise_error_bound=power.familywise_error_bound(tested, thresholds.z_star),
        min_detectable_effect=detectable,
        horizon_covered=covered,
        replicates_for_horizon=needed,
        s_min=thresholds.s_min(horizon),
        nonfinite_prod=nonfinite_prod,
        nonfinite_ref=nonfinite_ref,
        nonfinite_replicates=tuple(nonfinite_replicates),
        attribution=attribution,
        oracle=oracle,
        moments=moments,
        diagnostics=tuple(diags),
        dtypes_may_differ=dtypes_may_differ,
        harm_format=harm_format,
        ref_profile=profile,
    )


def _profile_words(profile) -> str:
    """The diagnostic's figures: the FAILing buckets' ratios to ref's profile and each FAILing statistic's swap p."""
    low, high = profile.lowest_ratio, profile.highest_ratio
    span = f"{low:.3g}x" if low == high else f"{low:.3g}x to {high:.3g}x"
    n = profile.buckets
    swaps = [f"p = {p:.2g} ({statistic})" for statistic, p in profile.swap_p]
    words = (f"{n} bucket{'' if n == 1 else 's'}, {span} ref's own bias at the same rank; prod's profile more biased "
             f"than ref's, bucket swaps: " + ", ".join(swaps))
    kept = [why for why in map(profile.keeps_fail, profile.statistics) if why is not None]
    if profile.within:
        return words + f" (each p > {profile.alpha:g}, each ratio <= {profile.ratio_limit:g})"
    return words + (f"; the FAIL stands: {'; '.join(dict.fromkeys(kept))}" if kept else "")
