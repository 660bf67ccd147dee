"""Profile-likelihood bounds of the return level and the bounded-tail test (kcert.stats.profile)."""

import numpy as np
import pytest
from scipy import optimize, stats

from kcert.stats.profile import _binomial_loglik, _gpd_loglik, deviance_for, return_level_interval, shape_test
from kcert.stats.tail import fit_gpd, return_level

T = 6.25e5


def _sample(seed=1, n_total=4096):
    k = np.random.default_rng(seed).exponential(1.0, n_total)
    u = float(np.quantile(k, 0.9))
    return k[k > u] - u, u, n_total


def _profile_deviance(y, u, n_total, r, bounds=(-1.0, 0.0)):
    """2 (l_hat - max l subject to r_T = r), by brute force: Nelder-Mead over (xi, log zeta)."""
    n = y.size
    fit = fit_gpd(y, bounds)
    best = fit.log_likelihood + _binomial_loglik(n / n_total, n, n_total)

    def neg(p):
        xi, log_z = p
        if not bounds[0] <= xi <= bounds[1]:
            return 1e10
        z = np.exp(log_z)
        h = np.log(T * z) if abs(xi) < 1e-12 else ((T * z) ** xi - 1) / xi
        ll = _gpd_loglik(y, np.array([xi]), np.array([[(r - u) / h]]))[0, 0] + _binomial_loglik(z, n, n_total)
        return -ll if np.isfinite(ll) else 1e10

    fits = [optimize.minimize(neg, [x0, np.log(n / n_total)], method="Nelder-Mead",
                              options={"xatol": 1e-10, "fatol": 1e-10, "maxiter": 4000})
            for x0 in (-0.3, -0.1, -0.01, -1e-6)]
    return 2 * (best + min(f.fun for f in fits))


def test_each_end_sits_where_the_profile_deviance_reaches_c():
    y, u, n_total = _sample()
    iv = return_level_interval(y, u, n_total, T)
    assert iv.deviance == pytest.approx(9.0, abs=1e-3)  # z_(1-0.00135)^2: the report's 3 sigma
    assert _profile_deviance(y, u, n_total, iv.upper) == pytest.approx(iv.deviance, abs=0.05)
    assert _profile_deviance(y, u, n_total, iv.lower) == pytest.approx(iv.deviance, abs=0.15)
    assert iv.lower < iv.estimate < iv.upper


def test_estimate_is_the_mle_return_level():
    y, u, n_total = _sample(2)
    iv = return_level_interval(y, u, n_total, T)
    fit = fit_gpd(y, (-1.0, 0.0))
    assert iv.estimate == pytest.approx(float(return_level(u, y.size / n_total, T, fit.shape, fit.scale)))


def test_smaller_alpha_and_free_shape_widen_the_interval():
    y, u, n_total = _sample(3)
    base = return_level_interval(y, u, n_total, T)
    strict = return_level_interval(y, u, n_total, T, alpha=0.00135 / 3)
    free = return_level_interval(y, u, n_total, T, shape_bounds=(-1.0, 1.0))
    assert strict.upper > base.upper and strict.lower < base.lower
    assert free.upper > base.upper


def test_rarer_exceedances_lower_the_return_level():
    y, u, n_total = _sample(4)
    common = return_level_interval(y, u, n_total, T)
    rare = return_level_interval(y, u, 4 * n_total, T)  # the same tail, three quarters more K = 0
    assert rare.estimate < common.estimate and rare.upper < common.upper


def test_coverage_of_the_upper_bound_on_exponential_k():
    true = stats.expon.isf(1 / T)
    covered = 0
    for seed in range(40):
        k = np.random.default_rng(100 + seed).exponential(1.0, 1024)
        u = float(np.quantile(k, 0.9))
        covered += return_level_interval(k[k > u] - u, u, 1024, T).upper >= true
    assert covered >= 38  # nominal 99.87 %; benchmarks/tail_coverage.py measures it on 400 runs per law


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=">= 3 exceedances"):
        return_level_interval([1.0, 2.0], 0.0, 10, T)
    with pytest.raises(ValueError, match="n_total"):
        return_level_interval([1.0, 2.0, 3.0], 0.0, 2, T)
    with pytest.raises(ValueError, match="alpha"):
        deviance_for(0.7)


def test_shape_test_rejects_heavy_and_keeps_short_tails():
    rng = np.random.default_rng(8)
    heavy = shape_test(stats.genpareto.rvs(0.5, size=500, random_state=rng))
    short = shape_test(stats.genpareto.rvs(-0.3, size=500, random_state=rng))
    assert heavy.rejects and heavy.shape_free > 0 and heavy.p_value < 0.01
    assert not short.rejects and short.statistic == 0.0 and short.p_value == 1.0
    mid = shape_test(stats.genpareto.rvs(0.05, size=200, random_state=rng))
    assert mid.p_value == pytest.approx(0.5 * stats.chi2.sf(mid.statistic, 1)) or mid.statistic == 0.0


def test_shape_test_from_fit_tail_equals_the_standalone_test():
    from kcert.stats.profile import shape_test_from_fits
    from kcert.stats.tail import fit_tail
    k = stats.genpareto.rvs(0.2, size=2048, random_state=np.random.default_rng(11))
    tail = fit_tail(k, T, bootstrap=10)
    reused = shape_test_from_fits(tail.log_likelihood, tail.log_likelihood_unconstrained, tail.shape_unconstrained, 0.25)
    assert reused == shape_test(tail.exceedances, 0.25)
