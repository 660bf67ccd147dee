"""Gate 3: error amplification of prod over ref against the float64 oracle, extrapolated to the
horizon with a peaks-over-threshold tail fit (METHOD.md section 4, docs/method.md "Gate 3").

The verdict rests on U, the profile-likelihood upper bound of the return level r_T with the GPD's
shape and scale and the exceedance rate all profiled (kcert.stats.profile). A bounded tail
(xi <= 0) is tested, not assumed: when a likelihood-ratio test rejects it, U comes from the free
fit and the verdict is at best WARN. The report's U (xi clipped, exceedance bootstrap) is kept
beside it for comparison; benchmarks/tail_coverage.py measures both.
"""

from __future__ import annotations

import numpy as np

from ..certificate import VarianceResult, VarianceThresholds
from ..diagnostics import diagnostic
from ..stats.amplification import amplification_ratios
from ..stats.profile import return_level_interval, shape_test_from_fits
from ..stats.tail import fit_gpd, fit_tail, return_level
from ..stats.ulp import ulp
from ..verdict import Verdict

ASSUMPTIONS = (
    "the exceedances of K over u (the 0.90 quantile of the positive K) follow a GPD; the fit is redone "
    "at the 0.85 and 0.95 quantiles to check it",
    "xi <= 0 (a bounded tail) unless a likelihood-ratio test rejects it; then U has xi free and PASS is refused",
    "replicates are independent draws (each from its own seed)",
)

MIN_POSITIVE = 4  # three exceedances above the smallest positive K: the least a GPD fit takes
FREE_SHAPE = (-1.0, 1.0)
BOUNDED_SHAPE = (-1.0, 0.0)
STABILITY_QUANTILES = (0.85, 0.95)


def stopping_rule(planned_looks: int, alpha: float) -> str:
    if planned_looks <= 1:
        return f"fixed replicate count; U one-sided at 1 - {alpha:g}"
    return (f"alpha spending over {planned_looks} planned looks (doubling R): each look's bounds one-sided at "
            f"1 - {alpha:g}/{planned_looks}; stop when [lower, U] clears both thresholds")


def _by_upper_bound(u: float, t: VarianceThresholds) -> Verdict:
    return Verdict.PASS if u <= t.warn else Verdict.WARN if u <= t.fail else Verdict.FAIL


def _by_interval(estimate: float, upper: float, t: VarianceThresholds, heavy: bool) -> Verdict:
    """PASS needs U <= warn (and a bounded tail); FAIL needs the (bounded-tail) estimate of r_T
    above the FAIL line (``fail_on="estimate"``, default) or only U above it (``"bound"``, the
    report's rule)."""
    above = (estimate if t.fail_on == "estimate" else upper) > t.fail
    if above:
        return Verdict.FAIL
    return Verdict.PASS if upper <= t.warn and not heavy else Verdict.WARN


def _point_return_level(k: np.ndarray, quantile: float, horizon: float, shape_bounds) -> float | None:
    """r_T estimate of the K sample with u at ``quantile`` of its positive K (None: too few)."""
    positive = k[k > 0]
    if positive.size < MIN_POSITIVE:
        return None
    u = float(np.quantile(positive, quantile))
    y = positive[positive > u] - u
    if y.size < 3:
        return None
    fit = fit_gpd(y, shape_bounds)
    return float(return_level(u, y.size / k.size, horizon, fit.shape, fit.scale))


def judge_variance(output: str, dtype: str, e_prod, e_ref, peak, horizon: float, thresholds: VarianceThresholds,
                   seed: int, looks: tuple[int, ...] = (), planned_looks: int = 1) -> VarianceResult:
    """Judge one output's K sample. ``planned_looks``: how many looks the run's schedule allows;
    alpha is divided among them (Bonferroni), so stopping at any of them keeps the error rate."""
    e_prod = np.asarray(e_prod, np.float64)
    e_ref = np.asarray(e_ref, np.float64)
    eps = np.asarray(ulp(np.asarray(peak, np.float64), dtype), np.float64).reshape(-1)
    k = amplification_ratios(e_prod, e_ref, eps)
    return judge_amplification(k, horizon, thresholds, seed, looks, planned_looks, output=output, dtype=dtype,
                               e_prod=e_prod, e_ref=e_ref, eps=eps)


def judge_amplification(k, horizon: float, thresholds: VarianceThresholds, seed: int = 0, looks: tuple[int, ...] = (),
                        planned_looks: int = 1, *, output: str = "K", dtype: str = "", e_prod=None, e_ref=None,
                        eps=None) -> VarianceResult:
    """The gate on a K sample itself (inf and nan included): what :func:`judge_variance` does once
    K is computed. The simulations of benchmarks/tail_coverage.py call it directly."""
    k = np.asarray(k, np.float64)
    e_prod, e_ref, eps = (np.full(k.shape, np.nan) if x is None else x for x in (e_prod, e_ref, eps))
    alpha = thresholds.alpha / max(1, planned_looks)
    rule = stopping_rule(planned_looks, thresholds.alpha)
    diags = []
    found: dict = {}

    def result(verdict: Verdict, reason: str) -> VarianceResult:
        return VarianceResult(output, dtype, verdict, reason, thresholds, horizon, k, e_prod, e_ref, eps,
                              found.get("tail"), tuple(looks), tuple(diags), interval=found.get("interval"),
                              shape_test=found.get("shape_test"), stopping_rule=rule,
                              threshold_stability=found.get("stability", ()),
                              confirmation=found.get("confirmation"), bounded_interval=found.get("bounded_interval"))

    n_inf = int(np.sum(np.isinf(k)))
    n_nan = int(np.sum(np.isnan(k)))
    finite = k[np.isfinite(k)]
    positive = finite[finite > 0]
    floor = Verdict.PASS
    if n_nan:
        diags.append(diagnostic("undefined_ratio", f"{n_nan} of {k.size} replicates"))
        floor = Verdict.WARN
    if n_inf:
        first = np.nonzero(np.isinf(k))[0][:8].tolist()
        diags.append(diagnostic("infinite_ratio", f"{n_inf} of {k.size} replicates, e.g. replicates {first}"))
        return result(Verdict.FAIL, f"K = inf in {n_inf} of {k.size} replicates (prod off the oracle where ref is not)")
    if positive.size == 0:
        return result(floor, f"all {finite.size} finite K are 0: prod within one ULP of the oracle, or no worse than ref's error")

    quantile = thresholds.threshold_quantile
    need = thresholds.min_exceedances
    if positive.size * (1 - quantile) < need:
        # lower the threshold to keep `need` exceedances; with few positive K, down to the smallest
        quantile = max(0.0, 1.0 - (need + 1) / positive.size)
    try:
        if positive.size < MIN_POSITIVE:
            raise ValueError(f"{positive.size} positive K")
        tail = fit_tail(finite, horizon, threshold_quantile=quantile, bootstrap=thresholds.bootstrap, seed=seed)
    except ValueError:  # too few (or too tied) positive K for three exceedances
        diags.append(diagnostic("few_exceedances", f"{positive.size} positive K of {k.size}; max K = {positive.max():.3g}"))
        observed = _by_upper_bound(float(positive.max()), thresholds)
        verdict = Verdict.FAIL if observed is Verdict.FAIL else Verdict.WARN
        return result(verdict, f"only {positive.size} positive K: no tail model; max observed K = {positive.max():.3g}")
    found["tail"] = tail
    if quantile != thresholds.threshold_quantile:
        diags.append(diagnostic("threshold_lowered",
                                f"threshold lowered to the q{quantile:.3g} of {positive.size} positive K "
                                f"to keep {tail.n_exceedances} exceedances"))
        if tail.n_exceedances < need:
            diags.append(diagnostic("few_exceedances", f"the tail fit rests on {tail.n_exceedances} exceedances"))
    # distinct up to 1e-6 of K's own scale (u + the largest excess): K of quantised errors ties up
    # to round-off, and excesses far below K's scale (K = 1 - eps/E_ref just under 1) carry no tail
    scale = float(tail.threshold + tail.exceedances.max())
    distinct = np.unique(np.round(tail.exceedances / (scale * 1e-6))).size if scale > 0 else 1
    tied = distinct < 0.5 * tail.n_exceedances
    if tied:
        diags.append(diagnostic("tied_exceedances", f"{distinct} distinct values among {tail.n_exceedances}; "
                                                    "the bounded-tail test is skipped"))
    if tail.horizon_too_short:
        diags.append(diagnostic("horizon_too_short", f"T * zeta = {horizon * tail.exceedance_rate:.3g}"))

    # A bounded tail is tested, not assumed: when rejected, the bound comes from the free fit. A
    # lattice of excesses (ties) is not a continuous GPD sample and the test's law fails there;
    # the lattice itself is bounded, so the bounded fit stands.
    # fit_tail (default bounds) already fitted xi in [-1, 0] and in [-1, 1]: the test reuses both
    test = None if tied else shape_test_from_fits(tail.log_likelihood, tail.log_likelihood_unconstrained,
                                                  tail.shape_unconstrained, thresholds.shape_test_level)
    found["shape_test"] = test
    heavy = test is not None and test.rejects
    bounded = return_level_interval(tail.exceedances, tail.threshold, tail.n_total, horizon, BOUNDED_SHAPE, alpha)
    interval = return_level_interval(tail.exceedances, tail.threshold, tail.n_total, horizon, FREE_SHAPE, alpha) \
        if heavy else bounded
    found["interval"], found["bounded_interval"] = interval, bounded
    if heavy:
        diags.append(diagnostic("tail_heavier_than_bounded",
                                f"free xi = {test.shape_free:.3f}, LR = {test.statistic:.2f}, p = {test.p_value:.2g}; "
                                f"U = {interval.upper:.3g} with xi free, {bounded.upper:.3g} with xi <= 0"))

    stability = [(q, _point_return_level(finite, q, horizon, interval.shape_bounds)) for q in STABILITY_QUANTILES]
    stability = [(q, r) for q, r in stability if r is not None]
    found["stability"] = tuple(stability)
    width = interval.upper - interval.estimate
    moved = max((abs(r - interval.estimate) for _, r in stability), default=0.0)
    if stability and np.isfinite(width) and moved > width:
        figures = ", ".join(f"q{q:g}: {r:.3g}" for q, r in stability)
        diags.append(diagnostic("unstable_threshold", f"r_T = {interval.estimate:.3g} at q{quantile:.3g}; {figures}"))

    observed_fail = positive.max() > thresholds.fail
    # FAIL on the bounded fit's estimate: under a heavy-tail rejection the free fit's estimate
    # extrapolates a fitted xi > 0 and FAILed 4.8 % of exponential samples with r_T = 5 (coverage study)
    by_fit = _by_interval(bounded.estimate, interval.upper, thresholds, heavy)
    verdict = Verdict.worst([by_fit, floor,
                             # an observed K above the FAIL line is a FAIL whatever the fit says (T >= R)
                             Verdict.FAIL if observed_fail else Verdict.PASS])
    if verdict is Verdict.FAIL and not observed_fail:
        halves = tuple(_point_return_level(finite_half, quantile, horizon, interval.shape_bounds) for finite_half in
                       (k[0::2][np.isfinite(k[0::2])], k[1::2][np.isfinite(k[1::2])]))
        if None not in halves:
            found["confirmation"] = halves
            if min(halves) <= thresholds.fail:
                diags.append(diagnostic("fail_not_confirmed",
                                        f"r_T = {halves[0]:.3g} (even replicates), {halves[1]:.3g} (odd)"))
    level = 1 - alpha
    reason = (f"U = {interval.upper:.3g} (r_T = {interval.estimate:.3g}, profile likelihood, one-sided {level:.5g}"
              f"{', free xi' if heavy else ''}) at T = {horizon:.3g}; "
              f"PASS <= {thresholds.warn:g} < WARN <= {thresholds.fail:g} < FAIL")
    if heavy:
        reason += f"; bounded tail rejected (p = {test.p_value:.2g}): PASS refused"
    if heavy and bounded.estimate != interval.estimate:
        reason += f"; FAIL is judged on the xi <= 0 estimate r_T = {bounded.estimate:.3g}"
    if by_fit is Verdict.WARN and interval.upper > thresholds.fail and thresholds.fail_on == "estimate":
        reason += f"; r_T cannot be bounded below {thresholds.fail:g} (more replicates narrow U), FAIL needs r_T above it"
    if observed_fail:
        reason += f"; observed K = {positive.max():.3g} > {thresholds.fail:g}"
    return result(verdict, reason)


def interval_is_decisive(result: VarianceResult) -> bool:
    """Stop adding replicates once [lower, U] lies on one side of every threshold (each end at the
    look's share of alpha). Results that rest on few exceedances are not decisive."""
    finite = result.amplification[np.isfinite(result.amplification)]
    if result.n_infinite or (finite.size and finite.max() > result.thresholds.fail):
        return True  # an observed FAIL stays a FAIL whatever more replicates show
    if any(d.code == "few_exceedances" for d in result.diagnostics):
        return False
    iv = result.interval
    if iv is None:
        return True
    t = result.thresholds
    return all(not (iv.lower <= x < iv.upper) for x in (t.warn, t.fail))
