"""Power of the bias test and the training horizon a replicate budget covers (docs/method.md, "Gate 2").

Under the alternative, z ~ sqrt(R) * rho with rho = |mu| / sigma. Detecting with probability
``power`` at the harm boundary rho = T**-0.5 needs R >= (z* + z_power)**2 * T, so a budget of R
replicates covers the horizon T = R / (z* + z_power)**2.
"""

from __future__ import annotations

import math

from scipy.stats import norm, t


def _margin(z_star: float, power: float) -> float:
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must lie in (0, 1), got {power!r}")
    return z_star + float(norm.ppf(power))


def min_detectable_effect(replicates: int, z_star: float, power: float = 0.8) -> float:
    """Smallest standardized bias rho detected with probability ``power`` at ``replicates``."""
    return _margin(z_star, power) / math.sqrt(replicates)


def horizon_covered(replicates: int, z_star: float, power: float = 0.8) -> float:
    """Largest horizon T whose harm boundary rho = T**-0.5 is detected with ``power``."""
    return replicates / _margin(z_star, power) ** 2


def replicates_needed(horizon: float, z_star: float, power: float = 0.8) -> int:
    """Replicates that detect a bias at the harm boundary of ``horizon`` with ``power``."""
    return math.ceil(_margin(z_star, power) ** 2 * horizon)


def familywise_error_bound(tests: int, z_star: float, replicates: int | None = None) -> float:
    """Union bound on the chance of any false FAIL signal over ``tests`` two-sided z tests.

    ``replicates``: the fewest replicates behind a tested bucket. z divides by the sample sd, so
    for Gaussian differences it follows Student t with R - 1 degrees of freedom; the normal tail
    understates the rate (1.18x at R = 1024, 1.86x at 256, 8.5x at 64 for z* = 5; measured in
    benchmarks/bias_power.py). Without ``replicates``: the normal (large-R) tail."""
    if replicates is not None and replicates >= 2:
        return min(1.0, 2.0 * tests * float(t.sf(z_star, replicates - 1)))
    return min(1.0, 2.0 * tests * float(norm.sf(z_star)))
