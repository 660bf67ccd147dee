"""Significance and power of the bias test, and the training horizon a replicate budget covers
(docs/method.md, "Gate 2").

z = sqrt(R) * mean / s divides by the sample sd, so for Gaussian bucket differences it follows Student t
with R - 1 degrees of freedom, whose tail is heavier than the normal's: at z* = 5 it is 1.18x the normal's
at R = 1024, 8.5x at R = 64 and 2700x at R = 8. The gate therefore calls a bucket significant when
|z| exceeds the t(R - 1) quantile with the normal's two-sided tail at z* (:func:`critical_z`): the
per-bucket false-signal rate is 2 Phi(-z*) at every R, the rate the method states, and the critical
value tends to z* as R grows (5.03 at R = 1024, 5.57 at 64, 17.1 at 8).

Under the alternative z follows a noncentral t with noncentrality sqrt(R) * rho, rho = |mu| / sigma.
The power figures use its normal approximation, P(z > c) ~ Phi((sqrt(R) rho - c) / sqrt(1 + c^2 / (2 (R - 1)))),
with c the critical value: detecting the harm boundary rho = T**-0.5 with probability ``power`` needs
R >= (c + z_power * sqrt(1 + c^2 / (2 (R - 1))))**2 * T, which is (z* + z_power)**2 * T for large R.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm, t


def _check_power(power: float) -> None:
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must lie in (0, 1), got {power!r}")


def critical_z(replicates, z_star: float):
    """|z| a bucket with ``replicates`` replicates must exceed to be significant: the Student t(R - 1)
    quantile whose two-sided tail is the normal's at ``z_star``, 2 Phi(-z*). Infinite below 2 replicates
    (no sample sd). Takes an int or an array of counts and returns the same shape."""
    counts = np.asarray(replicates, np.int64)
    out = np.full(counts.shape, np.inf)
    tested = counts >= 2
    if np.any(tested):
        # a few distinct counts per output (usually one): the quantile once per count
        values, inverse = np.unique(counts[tested], return_inverse=True)
        out[tested] = t.isf(norm.sf(z_star), values - 1)[inverse]
    return float(out) if out.ndim == 0 else out


def constant_run_minimum(z_star: float) -> int:
    """The fewest replicates at which a bucket whose difference is one non-zero constant in every replicate
    (zero spread, |z| infinite) is significant: a run of one sign over n replicates has chance 2**(1 - n)
    under a null whose differences are symmetric about zero, and it must be as rare as the stated rate
    2 Phi(-z*): 22 replicates at z* = 5. Quantised differences (whole ULPs) make such runs at small R: a
    bucket mean of +-half an ULP, each sign in one replicate in six, fills all of 4 replicates with chance
    1.3e-3 per test (benchmarks/bias_small_r.py)."""
    return math.ceil(1.0 - math.log2(2.0 * float(norm.sf(z_star))))


def _noncentrality(replicates: int, z_star: float, power: float) -> float:
    """sqrt(R) * rho at which |z| exceeds the critical value with probability ``power`` (normal approximation
    of the noncentral t, exact as R grows)."""
    _check_power(power)
    c = critical_z(replicates, z_star)
    if not math.isfinite(c):
        return math.inf
    return c + float(norm.ppf(power)) * math.sqrt(1.0 + c * c / (2.0 * (replicates - 1)))


def min_detectable_effect(replicates: int, z_star: float, power: float = 0.8) -> float:
    """Smallest standardized bias rho detected with probability ``power`` at ``replicates``."""
    return _noncentrality(replicates, z_star, power) / math.sqrt(replicates)


def horizon_covered(replicates: int, z_star: float, power: float = 0.8) -> float:
    """Largest horizon T whose harm boundary rho = T**-0.5 is detected with ``power``."""
    return 1.0 / min_detectable_effect(replicates, z_star, power) ** 2


def replicates_needed(horizon: float, z_star: float, power: float = 0.8) -> int:
    """The fewest replicates that detect a bias at the harm boundary of ``horizon`` with ``power``."""
    _check_power(power)
    # the large-R figure is a lower bound (the critical value only falls towards z*); step up from it
    r = max(2, math.ceil((z_star + float(norm.ppf(power))) ** 2 * horizon))
    while horizon_covered(r, z_star, power) < horizon:
        needed = _noncentrality(r, z_star, power) ** 2 * horizon
        r = max(r + 1, math.ceil(needed))
    while r > 2 and horizon_covered(r - 1, z_star, power) >= horizon:  # overshoot of the last step
        r -= 1
    return r


def familywise_error_bound(tests: int, z_star: float) -> float:
    """Union bound on the chance of any false signal over ``tests`` two-sided tests, each at the critical
    value of :func:`critical_z`: 2 * tests * Phi(-z*), exact per test for Gaussian differences at any R."""
    return min(1.0, 2.0 * tests * float(norm.sf(z_star)))
