"""The shape difference bounded through the pairs (kcert.stats.paired; docs/method.md, Gate 3)."""

import numpy as np
from scipy import stats

from kcert.gates.variance import judge_errors
from kcert.stats.paired import paired_bound, return_level_floor, return_level_growth
from kcert.stats.thresholds import VarianceThresholds
from kcert.verdict import Verdict

T = 6.25e5


def test_the_order_statistic_misses_ref_s_level_with_probability_under_its_share_of_alpha():
    for r, alpha in ((256, 0.00135), (1024, 0.00135 / 3), (4096, 0.00135 / 3)):
        b = np.arange(r, dtype=float)
        k = r - int(return_level_floor(b, T, alpha))  # b_(k) = r - k
        assert stats.binom.sf(k - 1, r, 1 / T) <= 0.01 * alpha
        assert k == 1 or stats.binom.sf(k - 2, r, 1 / T) > 0.01 * alpha  # the smallest such k
    assert return_level_floor([], T, 0.001) == 0.0


def test_ref_s_return_level_grows_by_the_bounded_factor_for_every_allowed_shape():
    """Brute force over GPD tails (threshold at zero or above, shapes in the model's range)."""
    bound = return_level_growth(0.1, 50.0)
    for xi in np.linspace(-1, 1, 41):
        for u in (0.0, 0.5, 3.0):
            def level(calls):
                m = 50.0 * calls
                return u + (np.log(m) if abs(xi) < 1e-12 else np.expm1(xi * np.log(m)) / xi)
            assert level(1 / 0.9) / level(1.0) <= bound + 1e-12


def test_prod_as_ref_plus_a_small_difference_passes_through_the_pairs():
    """Both errors large and heavy-tailed, prod = ref + a difference of at most one unit (a benign pair
    rounding the same computation): the separate-shapes bound cannot exclude a shape difference at this
    R; the paired bound does, and the gate PASSes on it."""
    rng = np.random.default_rng(3)
    b = 40.0 * rng.pareto(6.0, 1024) + 2.0 + 5.0 * rng.random(1024)
    a = b + rng.uniform(-1.0, 1.0, 1024)
    v = judge_errors(a, b, T, VarianceThresholds())
    assert v.interval.separate_upper > 2.0 and v.paired is not None
    assert v.paired.ratio_upper <= 2.0 and v.verdict is Verdict.PASS
    assert "through the pairs" in v.reason and v.pass_bound <= 2.0


def test_a_rare_large_difference_is_not_bounded_through_the_pairs():
    """prod = ref plus, in a few replicates, a large excursion: the difference's tail is what grows."""
    rng = np.random.default_rng(5)
    b = 40.0 * rng.pareto(6.0, 1024) + 2.0 + 5.0 * rng.random(1024)
    d = rng.uniform(-1.0, 1.0, 1024)
    d[rng.choice(1024, 12, replace=False)] += rng.uniform(5.0, 30.0, 12)
    p = paired_bound(b + d, b, T, 0.00135, slack=1.0, quantile=0.9, min_exceedances=10)
    assert p.ratio_upper > 2.0


def test_unrelated_errors_gain_nothing_from_the_pairs():
    """Independent errors of a heavier shape: the difference is as heavy as prod's error."""
    rng = np.random.default_rng(8)
    b = rng.exponential(1.0, 1024) * 30
    a = stats.genpareto.rvs(0.1, size=1024, random_state=rng) * 30
    p = paired_bound(a, b, T, 0.00135, slack=1.0, quantile=0.9, min_exceedances=10)
    assert p.ratio_upper > 2.0


def test_too_few_positive_differences_bound_nothing():
    b = np.linspace(1.0, 5.0, 512)
    a = b.copy()
    a[:2] += 0.1
    p = paired_bound(a, b, T, 0.00135, slack=1.0, quantile=0.9, min_exceedances=10)
    assert p.ratio_upper == np.inf and p.positive == 2


def test_the_paired_bound_is_reported_where_it_decided():
    """JSON (docs/json-schema.md "paired") and the text line the terminal and HTML reports show."""
    from kcert.report.jsonio import _variance
    from kcert.report.text import paired_text

    rng = np.random.default_rng(3)
    b = 40.0 * rng.pareto(6.0, 1024) + 2.0 + 5.0 * rng.random(1024)
    v = judge_errors(b + rng.uniform(-1.0, 1.0, 1024), b, T, VarianceThresholds())
    record = _variance(v)["paired"]
    assert record["ratio_upper"] == v.paired.ratio_upper <= 2.0 and record["share"] == 0.1
    assert record["positive"] == v.paired.positive > 400
    assert "bounds A_T by" in paired_text(v) and "PASS <= 2" in paired_text(v)
    # computed only when it decides: not for a prod three times ref (U above the line), nor for errors
    # that are the same numbers (one sample, one shape)
    for a in (3.0 * b, b):
        other = judge_errors(a, b, T, VarianceThresholds())
        assert other.paired is None and _variance(other)["paired"] is None and paired_text(other) is None
    heavier = judge_errors(3.0 * b, b, T, VarianceThresholds())
    assert other.verdict is Verdict.PASS and heavier.verdict is not Verdict.PASS
