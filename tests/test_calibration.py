"""Seeded null calibration: false alarms of the bias test stay within their stated bounds.

Deterministic (fixed seeds), so never flaky: a change that breaks calibration fails every time.
"""

import numpy as np
import pytest
from scipy.stats import binom, norm
from scipy.stats import t as t_dist

import kcert
from kcert.stats import power
from kcert.stats.bias import BiasThresholds, judge_buckets
from kcert.stats.moments import MomentAccumulator


def _null_run(rng, replicates, buckets, z_star):
    acc = MomentAccumulator.zeros(buckets)
    data = rng.standard_t(df=8, size=(replicates, buckets)) * 1e-3  # heavier than normal, mean zero
    for block in np.array_split(data, 8):
        acc.add(block)
    t = judge_buckets("raw", acc.count, acc.mean, acc.std(), np.full(buckets, 1e-6),
                      BiasThresholds(z_star=z_star, ulp_floor=0.0), 6.25e5)
    return np.abs(t.z) > z_star


def test_per_bucket_false_signal_rate_matches_two_sided_normal_tail():
    rng = np.random.default_rng(20261129)
    z_star, runs, buckets, replicates = 3.0, 100, 256, 512
    signals = sum(int(_null_run(rng, replicates, buckets, z_star).sum()) for _ in range(runs))
    n = runs * buckets
    p = 2 * norm.sf(z_star)
    lo, hi = binom.ppf(1e-6, n, p), binom.ppf(1 - 1e-6, n, p * 1.15)  # small-sample t inflation allowed
    assert lo <= signals <= hi, (signals, n * p)


def test_familywise_false_alarms_under_the_union_bound():
    rng = np.random.default_rng(7)
    z_star, runs, buckets = 4.0, 300, 256
    any_signal = sum(bool(_null_run(rng, 1024, buckets, z_star).any()) for _ in range(runs))
    bound = power.familywise_error_bound(buckets, z_star, 1024)
    # the union bound over buckets: observed rate at or below it (up to binomial noise)
    assert any_signal <= binom.ppf(1 - 1e-6, runs, bound), (any_signal, runs * bound)


def test_known_good_kernel_pair_never_fails_over_seeds(small_case):
    verdicts = [kcert.certify(small_case, replicates=128, seed=s, algebra_points=2).gate_verdict("bias")
                for s in range(10)]
    assert kcert.Verdict.FAIL not in verdicts
    cert = kcert.certify(small_case, replicates=128, seed=0, algebra_points=2)
    # Student t with R - 1 degrees of freedom: z divides by the sample sd
    assert cert.bias[0].familywise_error_bound == pytest.approx(2 * 2 * 64 * t_dist.sf(5.0, 127))
    assert cert.bias[0].familywise_error_bound > 2 * 2 * 64 * norm.sf(5.0)
