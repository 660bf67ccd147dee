"""Gate 3 on synthetic error norms: K, its special cases, the tail verdict and adaptive looks."""

import numpy as np
import pytest
from scipy.stats import genpareto

from kcert.certificate import VarianceThresholds
from kcert.gates.variance import interval_is_decisive, judge_variance
from kcert.stats.amplification import amplification_ratios
from kcert.stats.ulp import ulp
from kcert.verdict import Verdict

T = 6.25e5


def test_amplification_closed_form_and_special_cases():
    eps = 1.0
    e_prod = np.array([0.5, 0.5, 3.0, 3.0, 3.0, np.inf, np.inf, 1.0])
    e_ref = np.array([0.5, 2.0, 1.0, 0.0, 4.0, 1.0, np.inf, 0.0])
    k = amplification_ratios(e_prod, e_ref, eps)
    # both within eps: 0; prod within eps: 0; (3-1)/1; ref exact, prod off: inf; (3-1)/4;
    # prod inf: inf; both inf: undefined (nan); prod at eps exactly with exact ref: 0
    np.testing.assert_array_equal(k[:5], [0.0, 0.0, 2.0, np.inf, 0.5])
    assert np.isinf(k[5]) and np.isnan(k[6]) and k[7] == 0.0


def _judge(e_prod, e_ref, peak=1.0, thresholds=VarianceThresholds(), looks=(), planned_looks=1):
    e_prod = np.asarray(e_prod, float)
    return judge_variance("out", "bfloat16", e_prod, e_ref, np.full(e_prod.shape, peak), T, thresholds, 0, looks,
                          planned_looks)


def test_eps_is_one_true_ulp_at_each_replicates_peak():
    v = _judge([0.0, 0.0], [0.0, 0.0], peak=1.99)
    np.testing.assert_array_equal(v.epsilon, [ulp(1.99, "bfloat16")] * 2)
    assert v.verdict is Verdict.PASS and v.n_zero == 2


def test_infinite_k_fails_and_names_replicates():
    v = _judge([0.1, 5.0], [0.01, 0.0])
    assert v.verdict is Verdict.FAIL and v.n_infinite == 1
    assert "K = inf in 1 of 2" in v.reason
    assert any(d.code == "infinite_ratio" and "[1]" in d.message for d in v.diagnostics)


def test_undefined_k_is_counted_never_dropped():
    v = _judge([np.inf, 0.0, 0.0], [np.inf, 0.0, 0.0])
    assert v.n_undefined == 1 and v.verdict is Verdict.WARN


def test_few_positive_k_warns_instead_of_extrapolating():
    e_ref = np.full(1000, 0.004)
    e_prod = np.zeros(1000)
    e_prod[:5] = 0.004 + ulp(1.0, "bfloat16")  # K = 1 in five replicates
    v = _judge(e_prod, e_ref)
    assert v.tail is None and v.verdict is Verdict.WARN
    assert any(d.code == "few_exceedances" for d in v.diagnostics)
    assert not interval_is_decisive(v)


def _k_sample(k):
    """Error norms that produce exactly the K values given (E_ref = 1, eps = ULP at peak 1)."""
    eps = ulp(1.0, "bfloat16")
    return k + eps, np.ones_like(k)


@pytest.mark.parametrize("scale, expected", [(0.2, Verdict.PASS), (1.1, Verdict.WARN), (5.0, Verdict.FAIL)])
def test_tail_verdict_follows_u_against_two_and_ten(scale, expected):
    rng = np.random.default_rng(1)
    k = genpareto.rvs(-0.2, scale=scale, size=2048, random_state=rng)  # a bounded tail: kept bounded
    v = _judge(*_k_sample(k))
    t = v.tail
    assert t is not None and t.n_exceedances >= 10 and not v.shape_test.rejects
    # the report's return level by hand (u + GPD quantile at 1/(T zeta)) and its U = r_T + 3 se
    assert t.return_level == pytest.approx(
        t.threshold + genpareto.isf(1 / (T * t.exceedance_rate), t.shape, scale=t.scale))
    assert t.upper_bound == pytest.approx(t.return_level + 3 * t.standard_error)
    # the verdict follows the profile bound U against 2 and 10
    assert v.interval.estimate == pytest.approx(t.return_level, rel=1e-9)
    assert v.verdict is expected
    assert (v.upper_bound <= 2) == (expected is Verdict.PASS) and (v.upper_bound > 10) == (expected is Verdict.FAIL)


def test_observed_k_above_fail_line_fails_even_if_the_fit_is_low():
    k = np.full(2048, 0.01)
    k[:300] = np.linspace(0.01, 0.5, 300)
    k[0] = 50.0
    v = _judge(*_k_sample(k))
    assert v.verdict is Verdict.FAIL


def test_looks_spend_alpha_and_the_rule_is_reported():
    rng = np.random.default_rng(2)
    sample = _k_sample(rng.exponential(0.1, size=512))
    one = _judge(*sample)
    three = _judge(*sample, looks=(256, 512), planned_looks=3)
    assert three.looks == (256, 512)
    assert "3 planned looks" in three.stopping_rule and "fixed" in one.stopping_rule
    # each of three looks gets alpha/3: a wider interval on the same data
    assert three.interval.alpha == pytest.approx(one.interval.alpha / 3)
    assert three.upper_bound > one.upper_bound and three.interval.lower < one.interval.lower


def test_a_handful_of_positive_k_is_fitted_from_the_smallest_and_flagged():
    rng = np.random.default_rng(3)
    k = np.zeros(4096)
    k[:7] = rng.exponential(0.04, size=7)
    v = _judge(*_k_sample(k))
    assert v.tail is not None and v.tail.threshold == pytest.approx(np.sort(k[:7])[0])
    codes = {d.code for d in v.diagnostics}
    assert {"threshold_lowered", "few_exceedances"} <= codes
    assert v.verdict is Verdict.PASS and not interval_is_decisive(v)


def _judge_k(k, planned_looks=1):
    from kcert.gates.variance import judge_amplification
    return judge_amplification(np.asarray(k, float), T, VarianceThresholds(), planned_looks=planned_looks)


def test_a_heavy_tail_is_tested_not_clipped_and_refused_a_pass():
    rng = np.random.default_rng(4)
    v = _judge_k(genpareto.rvs(0.4, scale=0.01, size=4096, random_state=rng))
    codes = {d.code for d in v.diagnostics}
    assert v.shape_test.rejects and "tail_heavier_than_bounded" in codes
    assert v.interval.shape_bounds == (-1.0, 1.0)  # the free-xi bound, never a clipped one
    assert v.verdict is not Verdict.PASS
    # the report's clipped rule would have called this tail tiny
    assert v.report_upper_bound < v.upper_bound


def test_a_short_tail_keeps_the_bounded_fit_and_can_pass():
    rng = np.random.default_rng(5)
    v = _judge_k(genpareto.rvs(-0.3, scale=0.1, size=4096, random_state=rng))
    assert not v.shape_test.rejects and v.interval.shape_bounds == (-1.0, 0.0)
    assert v.verdict is Verdict.PASS and v.upper_bound <= 2.0
    assert v.interval.lower <= v.interval.estimate <= v.upper_bound


def test_zero_mass_counts_in_the_exceedance_rate_not_in_the_fit():
    rng = np.random.default_rng(6)
    k = rng.exponential(0.1, 4096)
    k[rng.random(4096) < 0.6] = 0.0
    v = _judge_k(k)
    assert v.n_zero > 2000
    assert v.tail.n_exceedances < 0.11 * v.n_positive + 2
    assert v.interval.rate == pytest.approx(v.tail.n_exceedances / 4096)
    assert np.all(v.tail.exceedances > 0)


def test_unstable_threshold_is_named():
    rng = np.random.default_rng(0)
    # uniform bulk below the 0.90 quantile, exponential tail above: u = q0.85 sees a mixture
    v = _judge_k(np.concatenate([rng.uniform(0, 1, 3600), 1 + rng.exponential(0.1, 400)]))
    assert [q for q, _ in v.threshold_stability] == [0.85, 0.95]
    assert any(d.code == "unstable_threshold" for d in v.diagnostics)
    stable = _judge_k(np.random.default_rng(0).exponential(0.1, 4096))
    assert not any(d.code == "unstable_threshold" for d in stable.diagnostics)


def test_a_fail_on_the_estimate_is_checked_on_both_halves():
    rng = np.random.default_rng(0)
    k = np.zeros(1024)
    k[:60] = rng.exponential(1.2, 60)
    v = _judge_k(k)
    assert v.verdict is Verdict.FAIL and v.interval.estimate > 10 and k.max() <= 10
    # one independent half estimates r_T under the FAIL line: the FAIL is flagged as not reproduced
    assert v.confirmation is not None and min(v.confirmation) <= 10 < max(v.confirmation)
    assert any(d.code == "fail_not_confirmed" for d in v.diagnostics)


def test_a_bound_above_the_fail_line_alone_warns_unless_asked_for_the_reports_rule():
    rng = np.random.default_rng(0)
    k = np.zeros(1024)
    k[:60] = rng.exponential(0.8, 60)
    v = _judge_k(k)
    assert v.upper_bound > 10 >= v.interval.estimate
    assert v.verdict is Verdict.WARN and "cannot be bounded below 10" in v.reason
    from kcert.gates.variance import judge_amplification
    strict = judge_amplification(k, T, VarianceThresholds(fail_on="bound"))
    assert strict.verdict is Verdict.FAIL
    with pytest.raises(ValueError, match="fail_on"):
        VarianceThresholds(fail_on="maybe")


def test_decisive_uses_the_profile_interval():
    rng = np.random.default_rng(7)
    v = _judge_k(rng.exponential(0.05, 4096))
    assert v.upper_bound < 2 and interval_is_decisive(v)
    straddling = _judge_k(rng.exponential(0.16, 1024))
    assert straddling.interval.lower < 2 <= straddling.upper_bound
    assert not interval_is_decisive(straddling)


def test_looks_are_planned_before_the_data():
    from kcert.certification import look_schedule
    assert look_schedule(1024, 4096) == [1024, 2048, 4096]
    assert look_schedule(1000, 3000) == [1000, 2000, 3000]
    assert look_schedule(512, 512) == [512]


def test_tied_excesses_skip_the_shape_test_and_keep_the_bounded_fit():
    rng = np.random.default_rng(9)
    # near-tied router weights: K just under 1, the top 10 % on two values a round-off apart
    k = np.where(rng.random(1024) < 0.9, rng.uniform(0.99, 0.999, 1024), 0.9999 + 1e-12 * rng.integers(0, 2, 1024))
    v = _judge_k(k)
    assert any(d.code == "tied_exceedances" for d in v.diagnostics)
    assert v.shape_test is None and v.interval.shape_bounds == (-1.0, 0.0)
    assert v.verdict is Verdict.PASS and v.upper_bound < 1.01
