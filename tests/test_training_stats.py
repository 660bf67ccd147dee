"""train-compare's pure parts: the paired statistics (kcert.stats.training), the sign-flip test, the
prediction, the result types (kcert.results.training) and the synthetic language (numpy/scipy only: no
torch here, checked by the first test)."""

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from kcert.training import language as lang
from kcert.training import prediction as pred
from kcert.stats import training as S


def test_pure_modules_import_without_torch():
    code = ("import sys\nimport kcert.stats.training, kcert.training.prediction, kcert.training.language, "
            "kcert.results.training\nassert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_paired_matches_the_t_interval_in_closed_form():
    ref = np.array([2.0, 2.5, 1.5, 2.2, 1.9])
    d = np.array([0.010, 0.030, -0.005, 0.020, 0.012])
    s = S.paired("loss", ref, ref + d, alpha=0.05)
    k, mean, sd = d.size, d.mean(), d.std(ddof=1)
    half = stats.t.ppf(0.975, k - 1) * sd / math.sqrt(k)
    assert s.mean == pytest.approx(mean) and s.sd == pytest.approx(sd)
    assert (s.low, s.high) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert s.p_value == pytest.approx(2 * stats.t.sf(mean / (sd / math.sqrt(k)), k - 1))
    assert s.seed_spread == pytest.approx(ref.std(ddof=1))
    assert s.in_seed_spreads == pytest.approx(mean / ref.std(ddof=1))


def test_identical_arms_and_constant_differences():
    ref = np.array([1.0, 2.0, 3.0])
    same = S.paired("x", ref, ref.copy())
    assert (same.mean, same.low, same.high, same.p_value, same.detectable) == (0.0, 0.0, 0.0, 1.0, 0.0)
    shifted = S.paired("x", ref, ref + 0.5)  # no noise at all: any non-zero shift is certain
    assert shifted.p_value == 0.0 and shifted.low == shifted.high == pytest.approx(0.5)


def test_detectable_difference_has_the_stated_power():
    sd, k, alpha = 0.3, 8, 0.05
    delta = S.detectable_difference(sd, k, alpha, power=0.8)
    crit = stats.t.ppf(1 - alpha / 2, k - 1)
    nc = delta / sd * math.sqrt(k)
    assert stats.nct.sf(crit, k - 1, nc) + stats.nct.cdf(-crit, k - 1, nc) == pytest.approx(0.8, abs=1e-6)
    # many seeds: the normal approximation (z_{1-alpha/2} + z_power) sd / sqrt(K)
    big = S.detectable_difference(1.0, 4000, alpha, power=0.8)
    assert big == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / math.sqrt(4000), rel=2e-3)


def test_sign_flip_test_exact_enumeration():
    # one channel, differences 1, 2, 3: only the all-plus and all-minus patterns reach mean^2 = 4
    statistic, p = S.sign_flip_test(np.array([[1.0], [2.0], [3.0]]))
    assert statistic == pytest.approx(4.0 / (14.0 / 3.0))
    assert p == pytest.approx(2 / 8)
    # channels that never differ carry no information; nothing at all differs: p = 1
    assert S.sign_flip_test(np.zeros((5, 4)))[1] == 1.0
    padded = np.concatenate([np.array([[1.0], [2.0], [3.0]]), np.zeros((3, 2))], axis=1)
    assert S.sign_flip_test(padded)[1] == pytest.approx(2 / 8)


def test_sign_flip_test_is_calibrated_and_has_power():
    rng = np.random.default_rng(1)
    null = [S.sign_flip_test(rng.standard_t(3, size=(8, 40)))[1] for _ in range(300)]
    # exact test: P(p <= 0.1) <= 0.1; binomial(300, 0.1) stays under 45 except with probability ~1e-3
    assert sum(p <= 0.1 for p in null) <= 45
    assert sum(p <= 0.5 for p in null) >= 100  # and it is not degenerate
    shifted = rng.normal(size=(8, 40)) + 0.8
    assert S.sign_flip_test(shifted)[1] == pytest.approx(2 / 256)  # the smallest p with 8 seeds


def test_sign_flip_test_samples_beyond_sixteen_seeds():
    rng = np.random.default_rng(2)
    p = S.sign_flip_test(rng.normal(size=(20, 10)) + 1.0)[1]
    assert p == pytest.approx(1 / (S.SAMPLED_FLIPS + 1))


def test_holm():
    adjusted = S.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": math.nan})
    assert adjusted["a"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06) and math.isnan(adjusted["d"])


def test_prediction_is_full_compensation_of_significant_channels():
    bias = pred.ChannelBias(relative_error=np.array([-0.004, 0.002, 0.003, 0.0]),
                            significant=np.array([True, True, False, False]),
                            sensitivity=np.array([1.0, 0.5, 1.0, 1.0]), z_star=5.0, output="output")
    channels = np.array([0, 1, 2, 3, 1, 0])  # two norm sites of 3 channels over a 4-channel case
    predicted = pred.predict(bias, channels)
    assert predicted == pytest.approx([0.004, -0.004, 0.0, 0.0, -0.004, 0.004])
    measured = np.stack([0.5 * predicted + 1e-4 * np.arange(6) * s for s in (1, -1, 2, -2)])
    result = pred.compare_drift(bias, channels, measured, np.full((4, 6), 0.05), np.full(6, 2.0**-8), 0.05, 0.8)
    assert result.channels == 4 and result.predicted_rms == pytest.approx(0.004)
    assert result.slope.mean == pytest.approx(0.5, abs=1e-6) and result.slope.low < 0.5 < result.slope.high
    assert result.moved_ulps == pytest.approx(0.05 / 2.0**-8)


def test_language_is_seeded_structured_and_learnable():
    language = lang.Language(vocab=16, branching=2, periodic_fraction=1.0, min_period=3, max_period=3)
    a = lang.training_batch(language, seed=4, step=7, batch=5, length=12)
    b = lang.training_batch(language, seed=4, step=7, batch=5, length=12)
    assert np.array_equal(a, b) and a.dtype == np.int64 and a.min() >= 0 and a.max() < 16
    assert not np.array_equal(a, lang.training_batch(language, seed=5, step=7, batch=5, length=12))
    assert np.array_equal(a[:, 3:], a[:, :-3])  # period 3: every token repeats the one 3 back
    successors, _ = language._table
    chain = lang.Language(vocab=16, branching=2, periodic_fraction=0.0).sample(np.random.default_rng(0), 4, 30)
    allowed = {(i, int(j)) for i in range(16) for j in lang.Language(vocab=16, branching=2)._table[0][i]}
    assert all((int(x), int(y)) in allowed for row in chain for x, y in zip(row[:-1], row[1:]))
    assert lang.Language(vocab=8, branching=1).entropy_rate == pytest.approx(0.0, abs=1e-12)
    assert 0 < lang.Language().entropy_rate < math.log(4)
