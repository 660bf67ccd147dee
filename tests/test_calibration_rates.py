"""Calibration tests with the power to catch a realistic miscalibration (marker ``calibration``, run by
.ci/run; ``python -m pytest -m calibration``).

Each test counts misses (or false signals) over enough seeded runs that a stated rate and a realistic
miscalibrated one lead to different conclusions, and it shows that it would: the same runs, judged by
a deliberately miscalibrated variant of the statistic (a bound whose coverage is 99.0 % where 99.87 %
is stated; a z whose scale is 10 % too small), must fail the same acceptance criterion. Acceptance
limits are the 1 - 1e-3 quantiles of the stated rate's binomial law: a correct statistic fails its own
test at most once in a thousand seeds, a deterministic seed makes each outcome repeat exactly.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from scipy import stats

from kcert.stats import power
from kcert.stats.bias import BiasThresholds, judge_buckets
from kcert.stats.moments import MomentAccumulator

pytestmark = pytest.mark.calibration

T = 6.25e5
ALPHA = 0.00135  # the variance gate's stated one-sided level at one look
RUNS = 1500


def _limit(n: int, p: float) -> int:
    """The largest count a correct rate ``p`` exceeds with probability at most 1e-3."""
    return int(stats.binom.ppf(1 - 1e-3, n, p))


def _variance_run(run: int) -> tuple[float, float, float]:
    """One certification's variance statistics on two independent half-normal error samples (the same
    law on both sides, so the true tail ratio is 1), R = 1024: (estimate, U, true ratio)."""
    from kcert.stats.tail_ratio import exceedances_of, tail_ratio_interval

    rng = np.random.default_rng([20261201, run])
    a, b = 1e6 * np.abs(rng.standard_normal((2, 1024)))  # errors far above the one-unit slack
    iv = tail_ratio_interval(exceedances_of(a), exceedances_of(b), T, ALPHA)
    return iv.estimate, iv.upper, 1.0


def test_the_variance_bound_covers_at_its_stated_level_and_the_test_would_see_99_percent():
    with ProcessPoolExecutor(2) as pool:
        rows = np.array(list(pool.map(_variance_run, range(RUNS), chunksize=25)))
    estimate, upper, truth = rows.T
    limit = _limit(RUNS, ALPHA)
    misses = int(np.sum(upper < truth))
    assert misses <= limit, f"{misses} of {RUNS} bounds below the truth; a {1 - ALPHA:.5f} bound allows {limit}"
    # A realistic miscalibration: the same bound built with the normal quantile of 99.0 % instead of
    # 99.865 % (z = 2.326 instead of 3.0 on the same pivot). It must fail the same criterion.
    shrunk = estimate + (upper - estimate) * stats.norm.isf(0.01) / stats.norm.isf(ALPHA)
    caught = int(np.sum(shrunk < truth))
    assert caught > limit, f"a 99 % bound missed {caught} times, within the limit {limit}: the test has no power"


def _null_z(rng, replicates: int, buckets: int) -> np.ndarray:
    """|z| of every bucket of one null run: heavy-tailed (t with 8 degrees of freedom) differences with
    mean zero, accumulated in blocks as the runner does."""
    acc = MomentAccumulator.zeros(buckets)
    data = rng.standard_t(df=8, size=(replicates, buckets)) * 1e-3
    for block in np.array_split(data, 8):
        acc.add(block)
    t = judge_buckets("raw", acc.count, acc.mean, acc.std(), np.full(buckets, 1e-6),
                      BiasThresholds(z_star=3.0, ulp_floor=0.0), T)
    return np.abs(t.z)


def test_per_bucket_false_signal_rate_and_a_ten_percent_scale_error_is_caught():
    rng = np.random.default_rng(20261129)
    runs, buckets, replicates, z_star = 200, 256, 512, 3.0
    z = np.concatenate([_null_z(rng, replicates, buckets) for _ in range(runs)])
    p = 2 * stats.t.sf(z_star, replicates - 1)  # what the gate states for one bucket
    limit = _limit(z.size, p)
    assert np.sum(z > z_star) <= limit
    assert np.sum(z > z_star) >= int(stats.binom.ppf(1e-3, z.size, p))  # not conservative by a lot either
    assert np.sum(1.1 * z > z_star) > limit  # an sd 10 % too small: caught


def test_familywise_rate_under_the_stated_bound_and_a_ten_percent_scale_error_is_caught():
    rng = np.random.default_rng(7)
    runs, buckets, replicates, z_star = 400, 256, 1024, 4.0
    z = [_null_z(rng, replicates, buckets) for _ in range(runs)]
    bound = power.familywise_error_bound(buckets, z_star, replicates)
    limit = _limit(runs, bound)
    assert sum(bool((zz > z_star).any()) for zz in z) <= limit
    assert sum(bool((1.1 * zz > z_star).any()) for zz in z) > limit
