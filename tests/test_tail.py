"""Tests of the GPD fit and the tail fit (kcert.stats.gpd, kcert.stats.tail). Run with PYTHONPATH=src
until kcert is installed."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

from kcert.stats import gpd, tail
from kcert.stats.gpd import GPDFit, fit_gpd, fit_gpd_batch, return_level
from kcert.stats.tail import TailFitResult, bootstrap_indices, fit_tail

STATS = Path(__file__).resolve().parents[1] / "src" / "kcert" / "stats"
GPD_PY, TAIL_PY = STATS / "gpd.py", STATS / "tail.py"
HORIZON = 6.25e5  # the default horizon T


def gpd_sample(xi, n, seed, scale=1.0):
    return stats.genpareto.rvs(xi, scale=scale, size=n, random_state=np.random.default_rng(seed))


def gpd_loglik(y, xi, sigma):
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(stats.genpareto.logpdf(y, xi, 0, sigma).sum())


# ----------------------------------------------------------------------------------------------
# fit_gpd against scipy and against brute force
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "xi, n, seed", [(-0.4, 200, 1), (-0.4, 400, 2), (-0.2, 300, 3), (-0.05, 250, 4), (-0.05, 400, 5)]
)
def test_fit_gpd_matches_scipy_free_optimum(xi, n, seed):
    y = gpd_sample(xi, n, seed, scale=2.0)
    fit = fit_gpd(y, shape_bounds=(-1.0, 1.0))
    c, loc, scale = stats.genpareto.fit(y, floc=0)
    assert loc == 0
    assert -1.0 < c < 1.0  # the free optimum is inside the bounds
    assert fit.n == n
    # at least as likely as scipy's optimum, and the reported value is the real log-likelihood
    assert fit.log_likelihood >= gpd_loglik(y, c, scale) - 1e-6
    assert fit.log_likelihood == pytest.approx(gpd_loglik(y, fit.shape, fit.scale), rel=1e-10)
    assert fit.shape == pytest.approx(c, abs=1e-3)
    assert fit.scale == pytest.approx(scale, rel=1e-3)


def test_positive_shape_free_and_clipped():
    y = gpd_sample(0.2, 300, 11)
    c, _, scale = stats.genpareto.fit(y, floc=0)
    free = fit_gpd(y, shape_bounds=(-1.0, 1.0))
    assert free.shape == pytest.approx(c, abs=1e-3)
    assert free.scale == pytest.approx(scale, rel=1e-3)
    assert free.log_likelihood >= gpd_loglik(y, c, scale) - 1e-6

    clipped = fit_gpd(y)  # default (-1, 0): the constrained MLE is the exponential
    assert clipped.shape == 0.0
    assert clipped.scale == pytest.approx(y.mean(), rel=1e-12, abs=0)
    assert clipped.log_likelihood == pytest.approx(-y.size * (math.log(y.mean()) + 1), rel=1e-12)


def brute_force_max(y, lo, hi, points=41):
    """max over a shape grid in [lo, hi] of the log-likelihood maximised over sigma (scipy)."""
    best = -np.inf
    for xi in np.linspace(lo, hi, points):
        # support: sigma > -xi*max(y) when xi < 0
        s_lo = math.log(-xi * y.max()) + 1e-12 if xi < 0 else math.log(y.min()) - 10
        res = optimize.minimize_scalar(
            lambda ls: -gpd_loglik(y, xi, math.exp(ls)),
            bounds=(s_lo, math.log(y.max()) + 10),
            method="bounded",
            options={"xatol": 1e-10},
        )
        best = max(best, -res.fun)
    return best


@pytest.mark.parametrize(
    "xi, bounds",
    [(-0.3, (-1.0, 0.0)), (0.3, (-1.0, 0.0)), (0.6, (-0.5, 0.3)), (-0.6, (-0.2, 0.5)), (2.0, (-1, 1))],
)
def test_constrained_fit_beats_brute_force(xi, bounds):
    """Optima on a face xi = bound (sigma re-optimised) as well as inside."""
    y = gpd_sample(xi, 150, 21)
    fit = fit_gpd(y, shape_bounds=bounds)
    assert bounds[0] <= fit.shape <= bounds[1]
    assert fit.log_likelihood == pytest.approx(gpd_loglik(y, fit.shape, fit.scale), rel=1e-10)
    assert fit.log_likelihood >= brute_force_max(y, *bounds) - 1e-6


def test_bounded_and_degenerate_samples():
    # all equal: the likelihood rises towards xi = -1 (uniform on [0, max]), the bound
    fit = fit_gpd(np.full(12, 2.5))
    assert (fit.shape, fit.scale) == (-1.0, 2.5)
    assert fit.log_likelihood == pytest.approx(-12 * math.log(2.5))
    # uniform data (xi = -1): the fit is at or near the bound, never worse than its face
    # (sigma = max(y), log-likelihood -n*log(max y)) or any interior point
    for seed in (3, 7):
        y = np.random.default_rng(seed).uniform(0, 1, 400)
        fit = fit_gpd(y)
        assert -1.0 <= fit.shape < -0.9
        assert fit.log_likelihood >= -y.size * math.log(y.max())
        assert fit.log_likelihood >= brute_force_max(y, -0.99, 0.0, points=12) - 1e-6
    # a single fixed shape
    fit = fit_gpd(gpd_sample(-0.2, 100, 4), shape_bounds=(-0.3, -0.3))
    assert fit.shape == -0.3
    # tiny and huge scales
    for scale in (1e-300, 1e300):
        y = gpd_sample(-0.2, 100, 5) * scale
        ref = fit_gpd(y / scale)
        fit = fit_gpd(y)
        assert fit.shape == pytest.approx(ref.shape, abs=1e-10)
        assert fit.scale / scale == pytest.approx(ref.scale, rel=1e-10)


def test_fit_gpd_validation():
    with pytest.raises(ValueError, match="at least 2 exceedances, got 1"):
        fit_gpd([1.0])
    with pytest.raises(ValueError, match="positive"):
        fit_gpd([1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        fit_gpd([1.0, -3.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        fit_gpd([1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="finite"):
        fit_gpd([1.0, np.inf, 2.0])
    with pytest.raises(ValueError, match="unbounded for shape < -1"):
        fit_gpd([1.0, 2.0], shape_bounds=(-1.5, 0.0))
    with pytest.raises(ValueError, match="low <= high"):
        fit_gpd([1.0, 2.0], shape_bounds=(0.5, 0.0))
    with pytest.raises(ValueError, match="2-D"):
        fit_gpd_batch([1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        fit_gpd_batch([[1.0, 2.0], [0.0, 1.0]])


# ----------------------------------------------------------------------------------------------
# The vectorised batch fit agrees with the scalar one
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", [(-1.0, 0.0), (-1.0, 1.0), (-0.5, 0.3)])
@pytest.mark.parametrize("xi", [-0.9, -0.3, 0.0, 0.3])
def test_fit_gpd_batch_matches_fit_gpd(xi, bounds):
    y = gpd_sample(xi, 60, 31)
    samples = y[bootstrap_indices(y.size, 40, seed=7)]
    shapes, scales = fit_gpd_batch(samples, shape_bounds=bounds)
    assert shapes.shape == scales.shape == (40,)
    fits = [fit_gpd(row, shape_bounds=bounds) for row in samples]
    ref_shapes = np.array([f.shape for f in fits])
    ref_scales = np.array([f.scale for f in fits])
    np.testing.assert_allclose(shapes, ref_shapes, rtol=0, atol=1e-8)
    np.testing.assert_allclose(scales, ref_scales, rtol=1e-8)
    levels = return_level(1.0, 0.01, HORIZON, shapes, scales)
    ref_levels = return_level(1.0, 0.01, HORIZON, ref_shapes, ref_scales)
    np.testing.assert_allclose(levels, ref_levels, rtol=1e-6)


def test_fit_gpd_batch_chunks_and_empty():
    y = gpd_sample(-0.2, 50, 8)
    samples = y[bootstrap_indices(y.size, 30, seed=1)]
    shapes, scales = fit_gpd_batch(samples)
    old = gpd._CHUNK_ELEMENTS
    try:
        gpd._CHUNK_ELEMENTS = 7 * 50  # 7 rows a chunk: 5 chunks, the last one short
        shapes_c, scales_c = fit_gpd_batch(samples)
    finally:
        gpd._CHUNK_ELEMENTS = old
    # equal up to the last bits of SIMD log (which depend on an element's position)
    np.testing.assert_allclose(shapes, shapes_c, rtol=0, atol=1e-12)
    np.testing.assert_allclose(scales, scales_c, rtol=1e-12)
    empty = fit_gpd_batch(np.empty((0, 5)))
    assert empty[0].shape == empty[1].shape == (0,)


def test_fallback_maximisers_agree():
    """The golden-section fallback (batch) and scipy's bounded search (scalar) find the same
    profile maximum, where the derivative vanishes."""
    samples = np.stack([gpd_sample(xi, 80, 40 + i) for i, xi in enumerate((-0.5, -0.2, -0.05))])
    rows = gpd._Rows(samples)
    lo, hi = np.full(3, -6.0), np.full(3, -0.01)
    idx = np.arange(3)
    s_vec = gpd._max_vector(gpd._profile_fn(rows), lo, hi, idx)
    s_sca = gpd._max_scalar(gpd._profile_fn(rows), lo, hi, idx)
    np.testing.assert_allclose(s_vec, s_sca, atol=1e-6)
    assert np.all(np.abs(gpd._dprofile(rows, s_vec)) < 1e-6)


def test_derivative_matches_finite_differences():
    rows = gpd._Rows(gpd_sample(-0.3, 50, 9)[None, :])
    for s in (-150.0, -5.0, -0.7, -1e-3, -1e-9, 0.0, 1e-6, 0.5, 3.0):
        h = 1e-6 * max(1.0, abs(s))
        fd = (gpd._profile(rows, np.array([s + h])) - gpd._profile(rows, np.array([s - h]))) / (
            2 * h
        )
        assert gpd._dprofile(rows, np.array([s]))[0] == pytest.approx(fd[0], rel=1e-6, abs=1e-9)


# ----------------------------------------------------------------------------------------------
# Return level
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("xi", [-1.0, -0.5, -0.1, -1e-9, 0.0, 1e-9, 0.3])
def test_return_level_closed_form(xi):
    u, zeta, sigma = 1.5, 0.01, 0.7
    expected = u + stats.genpareto.isf(1.0 / (HORIZON * zeta), xi, scale=sigma)
    fit = GPDFit(shape=xi, scale=sigma, log_likelihood=0.0, n=10)
    assert fit.return_level(u, zeta, HORIZON) == pytest.approx(expected, rel=1e-12)
    assert return_level(u, zeta, HORIZON, xi, sigma) == pytest.approx(expected, rel=1e-12)


def test_return_level_continuous_at_zero_and_below_threshold():
    u, zeta, sigma = 1.5, 0.01, 0.7
    at_zero = u + sigma * math.log(HORIZON * zeta)
    for xi in (-1e-9, 1e-9, -1e-14, 1e-14):
        assert return_level(u, zeta, HORIZON, xi, sigma) == pytest.approx(at_zero, rel=1e-7)
    assert return_level(u, zeta, HORIZON, 0.0, sigma) == at_zero
    # T*zeta <= 1: the T-step level is at or below u
    for horizon in (100.0, 50.0):  # T*zeta = 1 and 0.5
        assert GPDFit(-0.2, sigma, 0.0, 10).return_level(u, zeta, horizon) == u
        np.testing.assert_array_equal(
            return_level(u, zeta, horizon, np.array([-0.2, 0.0, 0.3]), sigma), [u, u, u]
        )


# ----------------------------------------------------------------------------------------------
# fit_tail
# ----------------------------------------------------------------------------------------------


def k_sample(n=4000, zero_share=0.5, rate=2.0, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.exponential(1.0 / rate, n)
    k[rng.random(n) < zero_share] = 0.0
    return k


def test_fit_tail_zeros_threshold_and_rate():
    k = k_sample()
    res = fit_tail(k, HORIZON, bootstrap=50)
    assert isinstance(res, TailFitResult)
    positive = k[k > 0]
    assert res.n_total == k.size
    assert res.n_zero == int(np.sum(k == 0)) and res.n_zero > 0
    assert res.n_positive == positive.size == res.n_total - res.n_zero
    # threshold from the positive K only; zeta over all K, zeros included
    assert res.threshold == np.quantile(positive, 0.90)
    np.testing.assert_array_equal(res.exceedances, k[k > res.threshold] - res.threshold)
    assert res.n_exceedances == res.exceedances.size
    assert res.exceedance_rate == res.n_exceedances / k.size
    np.testing.assert_array_equal(res.sample, k)
    assert res.sample.dtype == np.float64
    assert res.threshold_quantile == 0.90 and res.shape_bounds == (-1.0, 0.0)
    assert res.horizon == HORIZON and not res.horizon_too_short
    assert res.bootstrap == 50 and res.seed == 0
    assert res.bootstrap_return_levels.shape == res.bootstrap_shapes.shape == (50,)
    assert res.upper_bound == res.return_level + 3 * res.standard_error
    assert res.return_level_at(HORIZON) == res.return_level
    assert res.upper_bound_at(HORIZON) == pytest.approx(res.upper_bound, rel=1e-14)
    assert res.upper_bound_at(10 * HORIZON) > res.upper_bound
    fit = fit_gpd(res.exceedances)
    assert (res.shape, res.scale, res.log_likelihood) == (
        fit.shape,
        fit.scale,
        fit.log_likelihood,
    )
    assert res.return_level == fit.return_level(res.threshold, res.exceedance_rate, HORIZON)
    # the result does not change under the caller, and cannot be changed
    k[:] = 0.0
    assert res.sample.max() > 0
    with pytest.raises(ValueError):
        res.exceedances[0] = 1.0


def test_fit_tail_exponential_return_level():
    rate = 2.0
    res = fit_tail(k_sample(n=40000, zero_share=0.3, rate=rate, seed=1), HORIZON, bootstrap=200)
    truth = res.threshold + math.log(HORIZON * res.exceedance_rate) / rate
    assert abs(res.return_level - truth) < 3 * res.standard_error
    assert res.return_level == pytest.approx(truth, rel=0.05)
    assert res.upper_bound >= truth
    assert res.shape <= 0.0
    assert -0.1 < res.shape_unconstrained < 0.1


def test_fit_tail_reports_the_free_shape():
    k = stats.genpareto.rvs(0.3, size=3000, random_state=np.random.default_rng(2))
    res = fit_tail(k, HORIZON, bootstrap=20)
    assert res.shape == 0.0  # clipped
    assert res.scale == pytest.approx(res.exceedances.mean(), rel=1e-12)
    assert res.shape_unconstrained > 0.1


def test_fit_tail_seeds():
    k = k_sample(seed=3)
    a = fit_tail(k, HORIZON, bootstrap=100, seed=5)
    b = fit_tail(k, HORIZON, bootstrap=100, seed=5)
    c = fit_tail(k, HORIZON, bootstrap=100, seed=6)
    np.testing.assert_array_equal(a.bootstrap_return_levels, b.bootstrap_return_levels)
    assert a.standard_error == b.standard_error and a.upper_bound == b.upper_bound
    assert c.standard_error != a.standard_error
    assert c.return_level == a.return_level  # the point fit does not depend on the seed


def test_bootstrap_se_equals_a_loop_of_scalar_fits():
    """The vectorised bootstrap reproduces a plain loop of fit_gpd on the same resamples."""
    k = k_sample(n=3000, seed=4)
    res = fit_tail(k, HORIZON, bootstrap=200, seed=9)
    idx = bootstrap_indices(res.n_exceedances, 200, seed=9)
    levels = np.array(
        [
            fit_gpd(res.exceedances[i]).return_level(res.threshold, res.exceedance_rate, HORIZON)
            for i in idx
        ]
    )
    np.testing.assert_allclose(res.bootstrap_return_levels, levels, rtol=1e-6)
    assert res.standard_error == pytest.approx(np.std(levels, ddof=1), rel=0.02)
    assert res.standard_error == pytest.approx(np.std(levels, ddof=1), rel=1e-6)


def test_fit_tail_short_horizon():
    res = fit_tail(k_sample(), horizon=5.0, bootstrap=20)
    assert res.horizon_too_short
    assert res.return_level == res.threshold
    assert res.standard_error == 0.0 and res.upper_bound == res.threshold


def test_fit_tail_validation():
    good = k_sample(n=200)
    with pytest.raises(ValueError, match="non-negative"):
        fit_tail(np.append(good, -1e-3), HORIZON)
    with pytest.raises(ValueError, match="nan"):
        fit_tail(np.append(good, np.nan), HORIZON)
    with pytest.raises(ValueError, match="infinite"):
        fit_tail(np.append(good, np.inf), HORIZON)
    # 20 positive K: the 0.90 quantile leaves 2 above it
    few = np.concatenate([np.zeros(100), np.arange(1.0, 21.0)])
    with pytest.raises(ValueError, match=r"20 positive K of 120, 2 above"):
        fit_tail(few, HORIZON)
    with pytest.raises(ValueError, match=r"0 positive K of 50, 0 above"):
        fit_tail(np.zeros(50), HORIZON)
    with pytest.raises(ValueError, match="1-D"):
        fit_tail(good.reshape(10, 20), HORIZON)
    with pytest.raises(ValueError, match="horizon"):
        fit_tail(good, 0.0)
    with pytest.raises(ValueError, match="bootstrap"):
        fit_tail(good, HORIZON, bootstrap=1)


# ----------------------------------------------------------------------------------------------
# Layering and cost
# ----------------------------------------------------------------------------------------------


def test_tail_imports_only_numpy_scipy_and_stdlib():
    allowed = {"numpy", "scipy", "__future__"} | set(sys.stdlib_module_names)
    for path, siblings in ((GPD_PY, set()), (TAIL_PY, {"gpd"})):  # tail.py builds on gpd.py only
        roots = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    assert (node.level, node.module) in {(1, s) for s in siblings}, \
                        f"{path.name} must not import from the kcert package"
                    continue
                roots.add(node.module.split(".")[0])
        assert roots <= allowed, (path.name, roots - allowed)
    # and loading gpd.py alone (outside the kcert package) pulls in no torch
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('_gpd_probe', {str(GPD_PY)!r})\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['_gpd_probe'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "mod.fit_gpd([1.0, 2.0, 3.0])\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_tail_keeps_the_gpd_names():
    """The GPD fit moved to kcert.stats.gpd; its public names still import from kcert.stats.tail."""
    for name in gpd.__all__:
        assert name in tail.__all__ and getattr(tail, name) is getattr(gpd, name)


# --------------------------------------------------------------------------------------------
# Threshold diagnostics: mean residual life, threshold stability, QQ, return-level curve
# --------------------------------------------------------------------------------------------


def test_gpd_quantile_matches_scipy():
    p = np.linspace(0.0, 0.999, 50)
    for xi in (-0.7, -0.2, 0.0, 0.3):
        np.testing.assert_allclose(gpd.gpd_quantile(p, xi, 1.7), stats.genpareto.ppf(p, xi, scale=1.7),
                                   rtol=1e-12, atol=1e-15)
    # continuous through xi = 0
    assert gpd.gpd_quantile(0.9, 1e-12, 2.0) == pytest.approx(gpd.gpd_quantile(0.9, 0.0, 2.0), rel=1e-9)
    with pytest.raises(ValueError, match="probability"):
        gpd.gpd_quantile([0.5, 1.0], 0.0, 1.0)
    with pytest.raises(ValueError, match="scale"):
        gpd.gpd_quantile(0.5, 0.0, 0.0)


def test_mean_excess_of_exponential_is_its_scale():
    scale = 0.5
    k = k_sample(n=200_000, zero_share=0.3, rate=1 / scale, seed=3)
    k = np.concatenate([k, [np.inf]])  # infinite K are ignored (counted by the gate)
    u = np.array([0.0, 0.25, 0.5, 1.0])
    res = tail.mean_excess(k, u)
    assert isinstance(res, tail.MeanResidualLifeResult)
    finite = k[np.isfinite(k)]
    np.testing.assert_array_equal(res.n_exceedances, [np.sum(finite > t) for t in u])
    # memoryless: e(u) = scale at every threshold, within a few standard errors
    assert np.all(np.abs(res.mean_excess - scale) < 4 * res.standard_error)
    lo, hi = res.confidence_interval(0.999)
    assert np.all((lo < scale) & (scale < hi))
    # GPD with xi < 0: e(u) = (sigma + xi*u)/(1 - xi), linear in u
    xi, sigma = -0.25, 1.0
    y = gpd_sample(xi, 400_000, 4, scale=sigma)
    res = tail.mean_excess(y, [0.0, 1.0, 2.0])
    np.testing.assert_allclose(res.mean_excess, (sigma + xi * np.array([0.0, 1.0, 2.0])) / (1 - xi), rtol=0.02)
    # above the maximum: nan and no exceedances
    res = tail.mean_excess([1.0, 2.0], [5.0])
    assert np.isnan(res.mean_excess[0]) and res.n_exceedances[0] == 0 and np.isnan(res.standard_error[0])
    with pytest.raises(ValueError, match="thresholds"):
        tail.mean_excess([1.0], [np.nan])


def test_threshold_stability_of_a_gpd_sample_is_stable():
    xi, sigma = -0.2, 1.0
    y = gpd_sample(xi, 20_000, 5, scale=sigma)
    k = np.concatenate([np.zeros(5000), y])  # zeros do not move the quantiles of the positive K
    q = np.array([0.0, 0.3, 0.6, 0.8, 0.9])
    res = tail.threshold_stability(k, q)
    assert isinstance(res, tail.ThresholdStabilityResult)
    np.testing.assert_array_equal(res.thresholds, np.quantile(y, q))
    np.testing.assert_array_equal(res.n_exceedances, [np.sum(y > t) for t in res.thresholds])
    # shape constant, modified scale sigma - xi*u constant (= sigma) for a GPD
    np.testing.assert_allclose(res.shapes, xi, atol=0.08)
    np.testing.assert_allclose(res.modified_scales, sigma, rtol=0.1)
    np.testing.assert_allclose(res.modified_scales, res.scales - res.shapes * res.thresholds)
    # each point is the plain fit above its threshold
    fit = fit_gpd(y[y > res.thresholds[2]] - res.thresholds[2], (-1.0, 1.0))
    assert (res.shapes[2], res.scales[2]) == (fit.shape, fit.scale)
    # too few exceedances: nan, not an error
    res = tail.threshold_stability(y[:50], [0.5, 0.95], min_exceedances=5)
    assert np.isfinite(res.shapes[0]) and np.isnan(res.shapes[1]) and res.n_exceedances[1] < 5
    with pytest.raises(ValueError, match="positive K"):
        tail.threshold_stability(np.zeros(10), [0.5])
    with pytest.raises(ValueError, match="quantiles"):
        tail.threshold_stability(y, [1.0])


def test_qq_points_and_return_level_curve():
    res = fit_tail(k_sample(n=4000, seed=6), HORIZON, bootstrap=100)
    model, empirical = res.qq_points()
    np.testing.assert_array_equal(empirical, np.sort(res.exceedances))
    p = (np.arange(1, res.n_exceedances + 1) - 0.5) / res.n_exceedances
    np.testing.assert_allclose(model, stats.genpareto.ppf(p, res.shape, scale=res.scale), rtol=1e-10)
    assert np.corrcoef(model, empirical)[0, 1] > 0.98  # the exponential tail fits
    horizons = np.array([1e2, 1e4, HORIZON, 1e7])
    fit, lo, hi, bound = res.return_level_curve(horizons)
    np.testing.assert_array_equal(fit, [res.return_level_at(h) for h in horizons])
    assert fit[2] == res.return_level
    assert bound[2] == pytest.approx(res.upper_bound, rel=1e-14)
    np.testing.assert_allclose(bound, [res.upper_bound_at(h) for h in horizons], rtol=1e-14)
    assert np.all(lo <= hi) and np.all(np.diff(fit) > 0)
    with pytest.raises(ValueError, match="level"):
        res.return_level_curve(horizons, level=1.0)
