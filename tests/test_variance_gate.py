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


def _judge(e_prod, e_ref, peak=1.0, thresholds=VarianceThresholds(), looks=()):
    e_prod = np.asarray(e_prod, float)
    return judge_variance("out", "bfloat16", e_prod, e_ref, np.full(e_prod.shape, peak), T, thresholds, 0, looks)


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


@pytest.mark.parametrize("scale, expected", [(0.05, Verdict.PASS), (0.6, Verdict.WARN), (3.0, Verdict.FAIL)])
def test_tail_verdict_follows_u_against_two_and_ten(scale, expected):
    rng = np.random.default_rng(1)
    k = rng.exponential(scale, size=2048)
    v = _judge(*_k_sample(k))
    t = v.tail
    assert t is not None and t.n_exceedances >= 10
    # the exponential-tail return level by hand: u + sigma * ln(T * zeta) (xi clipped at 0 here)
    if t.shape == 0:
        assert t.return_level == pytest.approx(t.threshold + t.scale * np.log(T * t.exceedance_rate))
    else:
        assert t.return_level == pytest.approx(
            t.threshold + genpareto.isf(1 / (T * t.exceedance_rate), t.shape, scale=t.scale))
    assert t.upper_bound == pytest.approx(t.return_level + 3 * t.standard_error)
    assert v.verdict is expected


def test_observed_k_above_fail_line_fails_even_if_the_fit_is_low():
    k = np.full(2048, 0.01)
    k[:300] = np.linspace(0.01, 0.5, 300)
    k[0] = 50.0
    v = _judge(*_k_sample(k))
    assert v.verdict is Verdict.FAIL


def test_adaptive_looks_are_reported():
    rng = np.random.default_rng(2)
    v = _judge(*_k_sample(rng.exponential(0.1, size=512)), looks=(256, 512))
    assert v.looks == (256, 512)
    assert any(d.code == "adaptive_stopping" for d in v.diagnostics)


def test_a_handful_of_positive_k_is_fitted_from_the_smallest_and_flagged():
    rng = np.random.default_rng(3)
    k = np.zeros(4096)
    k[:7] = rng.exponential(0.04, size=7)
    v = _judge(*_k_sample(k))
    assert v.tail is not None and v.tail.threshold == pytest.approx(np.sort(k[:7])[0])
    codes = {d.code for d in v.diagnostics}
    assert {"threshold_lowered", "few_exceedances"} <= codes
    assert v.verdict is Verdict.PASS and not interval_is_decisive(v)
