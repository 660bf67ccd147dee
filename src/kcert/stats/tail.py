"""Peaks-over-threshold tail of the amplification ratio K: T-step return level and its bootstrap
standard error (variance gate, docs/method.md, "Gate 3"), and the threshold diagnostics the report
plots. The GPD fit they rest on (Grimshaw's method, its numerics and bounds) is
:mod:`kcert.stats.gpd`; its public names are importable from here too.

This module imports numpy and scipy only (never torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .gpd import GPDFit, _check_bounds, _chunk_rows, fit_gpd, fit_gpd_batch, gpd_quantile, return_level

__all__ = [
    "GPDFit",
    "MeanResidualLifeResult",
    "TailFitResult",
    "ThresholdStabilityResult",
    "bootstrap_indices",
    "fit_gpd",
    "fit_gpd_batch",
    "fit_tail",
    "gpd_quantile",
    "mean_excess",
    "return_level",
    "threshold_stability",
]

# --------------------------------------------------------------------------------------------
# The variance gate's tail fit
# --------------------------------------------------------------------------------------------


def _bootstrap_blocks(n_exceedances: int, bootstrap: int, seed: int):
    """Resample indices in row blocks (bounded memory), always drawn in the same blocks so
    that the stream, hence the resamples, depend on ``seed`` alone."""
    rng = np.random.default_rng(seed)
    step = _chunk_rows(n_exceedances)
    for lo in range(0, bootstrap, step):
        yield rng.integers(0, n_exceedances, size=(min(step, bootstrap - lo), n_exceedances))


def bootstrap_indices(n_exceedances: int, bootstrap: int, seed: int) -> np.ndarray:
    """The (bootstrap, n_exceedances) resample indices :func:`fit_tail` uses for ``seed``."""
    blocks = list(_bootstrap_blocks(n_exceedances, bootstrap, seed))
    return np.concatenate(blocks) if blocks else np.empty((0, n_exceedances), dtype=np.int64)


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class TailFitResult:
    """Peaks-over-threshold fit of the K sample and its T-step return level (docs/method.md, "Gate 3")."""

    sample: np.ndarray  # the K values as given, float64 (zeros included)
    n_total: int
    n_zero: int
    n_positive: int
    threshold_quantile: float
    threshold: float  # u: quantile of the positive K
    exceedances: np.ndarray  # y = K - u for K > u
    n_exceedances: int
    exceedance_rate: float  # zeta = n_exceedances / n_total (zeros in the denominator)
    shape: float  # xi under shape_bounds (verdict)
    scale: float
    log_likelihood: float
    shape_unconstrained: float  # xi under free_shape_bounds: shows when the clip bites
    scale_unconstrained: float
    log_likelihood_unconstrained: float
    shape_bounds: tuple[float, float]
    horizon: float
    return_level: float
    horizon_too_short: bool  # T*zeta <= 1: r_T is at or below u (reported as u)
    standard_error: float
    upper_bound: float  # r_T + 3*se
    bootstrap: int
    seed: int
    bootstrap_return_levels: np.ndarray
    bootstrap_shapes: np.ndarray
    bootstrap_scales: np.ndarray

    def return_level_at(self, horizon: float) -> float:
        """r_T at another horizon with the stored fit."""
        return float(
            return_level(self.threshold, self.exceedance_rate, horizon, self.shape, self.scale)
        )

    def qq_points(self) -> tuple[np.ndarray, np.ndarray]:
        """QQ plot of the exceedances against the fitted GPD: (model, empirical) quantiles, both
        sorted, at the plotting positions ``(i - 0.5)/n``."""
        empirical = np.sort(self.exceedances)
        n = empirical.size
        p = (np.arange(1, n + 1) - 0.5) / n
        return gpd_quantile(p, self.shape, self.scale), empirical

    def return_level_curve(self, horizons, level: float = 0.95):
        """Return levels at each horizon with the stored fit, the bootstrap percentile band at
        ``level`` and ``r_T + 3*se``: arrays ``(return_level, lower, upper, upper_bound)``."""
        horizons = np.atleast_1d(np.asarray(horizons, dtype=np.float64))
        level = float(level)
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        fit = np.array([self.return_level_at(h) for h in horizons])
        lower, upper, bound = (np.empty_like(fit) for _ in range(3))
        for j, h in enumerate(horizons):
            boot = np.asarray(return_level(self.threshold, self.exceedance_rate, h,
                                           self.bootstrap_shapes, self.bootstrap_scales), dtype=np.float64)
            lower[j], upper[j] = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
            bound[j] = fit[j] + 3.0 * float(np.std(boot, ddof=1))
        return fit, lower, upper, bound

    def upper_bound_at(self, horizon: float) -> float:
        """``r_T + 3*se`` at another horizon, se from the stored bootstrap fits."""
        levels = return_level(
            self.threshold,
            self.exceedance_rate,
            horizon,
            self.bootstrap_shapes,
            self.bootstrap_scales,
        )
        return self.return_level_at(horizon) + 3.0 * float(np.std(levels, ddof=1))


def _over_threshold(sample: np.ndarray, threshold_quantile: float) -> tuple[int, float, np.ndarray]:
    """The positive values' count, the threshold u (their ``threshold_quantile`` quantile) and the
    excesses over it, in sample order."""
    positive = sample[sample > 0]
    threshold = float(np.quantile(positive, threshold_quantile)) if positive.size else 0.0
    return int(positive.size), threshold, positive[positive > threshold] - threshold


def fit_tail_if_possible(k, horizon: float, threshold_quantile: float = 0.90, bootstrap: int = 1000,
                         seed: int = 0) -> TailFitResult | None:
    """:func:`fit_tail` of finite, non-negative ``k``, or None when fewer than three values exceed the
    threshold (no tail to fit: a finding, not an error). Invalid input still raises ``ValueError``."""
    _, _, exceedances = _over_threshold(np.asarray(k, np.float64), float(threshold_quantile))
    if exceedances.size < 3:
        return None
    return fit_tail(k, horizon, threshold_quantile=threshold_quantile, bootstrap=bootstrap, seed=seed)


def fit_tail(
    k,
    horizon: float,
    threshold_quantile: float = 0.90,
    shape_bounds=(-1.0, 0.0),
    bootstrap: int = 1000,
    seed: int = 0,
    free_shape_bounds=(-1.0, 1.0),
) -> TailFitResult:
    """Fit the tail of the K sample and bound its T-step return level (the report's rule).

    ``k``: every finite K of the run, zeros included (the caller counts infinite K itself).
    The threshold ``u`` is the ``threshold_quantile`` quantile of the positive K only, while the
    exceedance rate counts all K: zeros in the tail sample break the fit, and zeros dropped from
    the rate over-estimate r_T (docs/method.md, "Gate 3"). The standard error resamples the exceedances with
    ``u`` and ``zeta`` held fixed (:func:`bootstrap_indices`), so it ignores their uncertainty."""
    a, b = _check_bounds(shape_bounds)
    _check_bounds(free_shape_bounds)
    sample = np.array(k, dtype=np.float64)  # a copy: the result must not change under the caller
    if sample.ndim != 1:
        raise ValueError(f"k must be 1-D, got shape {sample.shape}")
    for name, bad in (("nan", np.isnan(sample)), ("infinite", np.isinf(sample))):
        if bad.any():
            raise ValueError(
                f"k has {int(bad.sum())} {name} value(s) (first at index {int(np.argmax(bad))}); "
                "pass finite K only and count infinite K (E_ref = 0) separately"
            )
    if (sample < 0).any():
        neg = sample < 0
        raise ValueError(
            f"k must be non-negative: {int(neg.sum())} value(s) < 0 "
            f"(first at index {int(np.argmax(neg))}, value {sample[np.argmax(neg)]!r})"
        )
    horizon = float(horizon)
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon must be finite and > 0, got {horizon!r}")
    threshold_quantile = float(threshold_quantile)
    if not 0.0 <= threshold_quantile < 1.0:
        raise ValueError(f"threshold_quantile must be in [0, 1), got {threshold_quantile!r}")
    bootstrap = int(bootstrap)
    if bootstrap < 2:
        raise ValueError(f"bootstrap must be >= 2 resamples for a standard error, got {bootstrap}")

    n_total = int(sample.size)
    n_positive, threshold, exceedances = _over_threshold(sample, threshold_quantile)
    n_exc = int(exceedances.size)
    if n_exc < 3:
        raise ValueError(
            f"too few exceedances for a tail fit: {n_positive} positive K of {n_total}, "
            f"{n_exc} above the {threshold_quantile:g} quantile u = {threshold!r} (need >= 3)"
        )
    zeta = n_exc / n_total

    fit = fit_gpd(exceedances, (a, b))
    free = fit_gpd(exceedances, free_shape_bounds)
    r_t = fit.return_level(threshold, zeta, horizon)

    blocks = _bootstrap_blocks(n_exc, bootstrap, seed)
    fits = [fit_gpd_batch(exceedances[i], (a, b)) for i in blocks]
    shapes = np.concatenate([f[0] for f in fits])
    scales = np.concatenate([f[1] for f in fits])
    levels = np.asarray(return_level(threshold, zeta, horizon, shapes, scales), dtype=np.float64)
    se = float(np.std(levels, ddof=1))

    return TailFitResult(
        sample=_frozen(sample),
        n_total=n_total,
        n_zero=int(np.count_nonzero(sample == 0)),
        n_positive=n_positive,
        threshold_quantile=threshold_quantile,
        threshold=threshold,
        exceedances=_frozen(exceedances),
        n_exceedances=n_exc,
        exceedance_rate=zeta,
        shape=fit.shape,
        scale=fit.scale,
        log_likelihood=fit.log_likelihood,
        shape_unconstrained=free.shape,
        scale_unconstrained=free.scale,
        log_likelihood_unconstrained=free.log_likelihood,
        shape_bounds=(a, b),
        horizon=horizon,
        return_level=r_t,
        horizon_too_short=bool(horizon * zeta <= 1.0),
        standard_error=se,
        upper_bound=r_t + 3.0 * se,
        bootstrap=bootstrap,
        seed=int(seed),
        bootstrap_return_levels=_frozen(levels),
        bootstrap_shapes=_frozen(shapes),
        bootstrap_scales=_frozen(scales),
    )


# --------------------------------------------------------------------------------------------
# Threshold diagnostics (read by the report's plots; pure functions of the K sample)
# --------------------------------------------------------------------------------------------


def _finite_k(k) -> np.ndarray:
    sample = np.asarray(k, dtype=np.float64)
    if sample.ndim != 1:
        raise ValueError(f"k must be 1-D, got shape {sample.shape}")
    return sample[np.isfinite(sample)]


@dataclass(frozen=True, eq=False)
class MeanResidualLifeResult:
    """Mean excess ``e(u) = mean(K - u | K > u)`` per threshold: linear in ``u`` (slope
    ``xi/(1 - xi)``) above a threshold where the GPD holds."""

    thresholds: np.ndarray
    mean_excess: np.ndarray  # nan where no K exceeds the threshold
    n_exceedances: np.ndarray
    standard_error: np.ndarray  # std(K - u)/sqrt(n) (nan with fewer than 2 exceedances)

    def confidence_interval(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Normal-theory interval of each mean excess."""
        from scipy.stats import norm

        half = norm.ppf(0.5 + float(level) / 2) * self.standard_error
        return self.mean_excess - half, self.mean_excess + half


def mean_excess(k, thresholds) -> MeanResidualLifeResult:
    """Mean residual life of the K sample at each threshold (non-finite K are ignored: the
    variance gate counts infinite K itself)."""
    sample = _finite_k(k)
    u = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
    if u.ndim != 1 or not np.all(np.isfinite(u)):
        raise ValueError("thresholds must be a 1-D array of finite values")
    me, n, se = (np.full(u.shape, np.nan) for _ in range(3))
    for j, t in enumerate(u):
        y = sample[sample > t] - t
        n[j] = y.size
        if y.size:
            me[j] = y.mean()
        if y.size >= 2:
            se[j] = y.std(ddof=1) / math.sqrt(y.size)
    return MeanResidualLifeResult(thresholds=_frozen(u.copy()), mean_excess=_frozen(me),
                                  n_exceedances=_frozen(n.astype(np.int64)), standard_error=_frozen(se))


@dataclass(frozen=True, eq=False)
class ThresholdStabilityResult:
    """GPD fits of the K tail as the threshold moves over quantiles of the positive K. Above a
    threshold where the GPD holds, the shape and the modified scale ``sigma - xi*u`` are constant."""

    quantiles: np.ndarray
    thresholds: np.ndarray
    n_exceedances: np.ndarray
    shapes: np.ndarray  # nan where too few exceedances
    scales: np.ndarray
    modified_scales: np.ndarray  # sigma - xi*u
    shape_bounds: tuple[float, float]


def threshold_stability(k, quantiles, shape_bounds=(-1.0, 1.0), min_exceedances: int = 5) -> ThresholdStabilityResult:
    """Fit the GPD above each threshold ``u_q`` = the ``q`` quantile of the positive finite K
    (the same rule as :func:`fit_tail`), with the shape restricted to ``shape_bounds`` (default:
    the free fit's ``[-1, 1]``); thresholds with fewer than ``min_exceedances`` exceedances get nan."""
    a, b = _check_bounds(shape_bounds)
    sample = _finite_k(k)
    q = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
    if q.ndim != 1 or np.any((q < 0) | (q >= 1) | np.isnan(q)):
        raise ValueError("quantiles must be a 1-D array of values in [0, 1)")
    if int(min_exceedances) < 2:
        raise ValueError(f"min_exceedances must be an integer >= 2, got {min_exceedances!r}")
    positive = sample[sample > 0]
    if positive.size == 0:
        raise ValueError("threshold_stability needs positive K, got none")
    u = np.quantile(positive, q)
    n = np.zeros(q.shape, np.int64)
    xi, sigma = np.full(q.shape, np.nan), np.full(q.shape, np.nan)
    for j, t in enumerate(u):
        y = positive[positive > t] - t
        n[j] = y.size
        if y.size >= int(min_exceedances):
            fit = fit_gpd(y, (a, b))
            xi[j], sigma[j] = fit.shape, fit.scale
    return ThresholdStabilityResult(quantiles=_frozen(q.copy()), thresholds=_frozen(u), n_exceedances=_frozen(n),
                                    shapes=_frozen(xi), scales=_frozen(sigma), modified_scales=_frozen(sigma - xi * u),
                                    shape_bounds=(a, b))
