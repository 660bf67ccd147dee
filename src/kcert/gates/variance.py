"""Gate 3: error amplification of prod over ref against the float64 oracle, extrapolated to the
horizon with a peaks-over-threshold tail fit (METHOD.md section 4).

What this gate assumes, and says so in every result: the GPD shape is clipped to xi <= 0 (a
bounded ratio, not tested here), the standard error comes from a bootstrap of the exceedances
alone (the uncertainty of u and zeta is ignored), and adaptive replicates break nominal coverage.
"""

from __future__ import annotations

import numpy as np

from ..certificate import VarianceResult, VarianceThresholds
from ..diagnostics import diagnostic
from ..stats.amplification import amplification_ratios
from ..stats.tail import fit_tail
from ..stats.ulp import ulp
from ..verdict import Verdict

ASSUMPTIONS = (
    "GPD shape clipped to xi <= 0 (bounded amplification assumed, not tested)",
    "se from a bootstrap of the exceedances (threshold and exceedance rate held fixed)",
)


MIN_POSITIVE = 4  # three exceedances above the smallest positive K: the least a GPD fit takes


def _by_upper_bound(u: float, t: VarianceThresholds) -> Verdict:
    return Verdict.PASS if u <= t.warn else Verdict.WARN if u <= t.fail else Verdict.FAIL


def judge_variance(output: str, dtype: str, e_prod, e_ref, peak, horizon: float, thresholds: VarianceThresholds,
                   seed: int, looks: tuple[int, ...] = ()) -> VarianceResult:
    e_prod = np.asarray(e_prod, np.float64)
    e_ref = np.asarray(e_ref, np.float64)
    eps = np.asarray(ulp(np.asarray(peak, np.float64), dtype), np.float64).reshape(-1)
    k = amplification_ratios(e_prod, e_ref, eps)
    diags = []
    tail = None

    def result(verdict: Verdict, reason: str) -> VarianceResult:
        if len(looks) > 1:
            diags.append(diagnostic("adaptive_stopping", f"looks at R = {', '.join(map(str, looks))}"))
        return VarianceResult(output, dtype, verdict, reason, thresholds, horizon, k, e_prod, e_ref, eps, tail,
                              tuple(looks), tuple(diags))

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
    if quantile != thresholds.threshold_quantile:
        diags.append(diagnostic("threshold_lowered",
                                f"threshold lowered to the q{quantile:.3g} of {positive.size} positive K "
                                f"to keep {tail.n_exceedances} exceedances"))
        if tail.n_exceedances < need:
            diags.append(diagnostic("few_exceedances", f"the tail fit rests on {tail.n_exceedances} exceedances"))
    distinct = np.unique(tail.exceedances).size
    if distinct < 0.5 * tail.n_exceedances:
        diags.append(diagnostic("tied_exceedances", f"{distinct} distinct values among {tail.n_exceedances}"))
    if tail.shape_unconstrained > 0:
        diags.append(diagnostic("xi_clipped", f"free fit xi = {tail.shape_unconstrained:.3f}"))
    if tail.horizon_too_short:
        diags.append(diagnostic("horizon_too_short", f"T * zeta = {horizon * tail.exceedance_rate:.3g}"))
    verdict = Verdict.worst([_by_upper_bound(tail.upper_bound, thresholds), floor,
                             # an observed K above the FAIL line is a FAIL whatever the fit says
                             Verdict.FAIL if positive.max() > thresholds.fail else Verdict.PASS])
    reason = (f"U = {tail.upper_bound:.3g} (r_T = {tail.return_level:.3g} + 3 x se {tail.standard_error:.3g}) "
              f"at T = {horizon:.3g}; PASS <= {thresholds.warn:g} < WARN <= {thresholds.fail:g} < FAIL")
    return result(verdict, reason)


def interval_is_decisive(result: VarianceResult) -> bool:
    """The report's adaptive rule: stop once [r_T - 3 se, r_T + 3 se] lies on one side of every
    threshold. Results that rest on few exceedances are not decisive (more replicates help)."""
    tail = result.tail
    finite = result.amplification[np.isfinite(result.amplification)]
    if result.n_infinite or (finite.size and finite.max() > result.thresholds.fail):
        return True  # an observed FAIL stays a FAIL whatever more replicates show
    if any(d.code == "few_exceedances" for d in result.diagnostics):
        return False
    if tail is None:
        return True
    lo, hi = tail.return_level - 3 * tail.standard_error, tail.return_level + 3 * tail.standard_error
    t = result.thresholds
    return all(not (lo <= x < hi) for x in (t.warn, t.fail))
