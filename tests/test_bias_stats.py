import numpy as np
import pytest
from scipy.stats import norm

from kcert.stats import power
from kcert.stats.bias import (
    ATTRIBUTED_TO_REF,
    DETECTED,
    FAIL,
    IDENTICAL,
    NOT_SIGNIFICANT,
    PASS,
    PROD_UNDER_FLOOR,
    SHARED_WITH_REF,
    UNDER_EFFECT_FLOOR,
    UNDER_ULP_FLOOR,
    UNTESTED,
    WARN,
    BiasThresholds,
    attribution_z,
    judge_buckets,
)

T = 6.25e5


def _judge(count, mean, std, ulp=1.0, thresholds=BiasThresholds(), prod=None, ref=None):
    n = len(mean)
    return judge_buckets("raw", np.full(n, count) if np.isscalar(count) else count, np.array(mean, float),
                         np.array(std, float), np.full(n, ulp), thresholds, T, prod, ref)


def test_z_and_effects_are_the_closed_forms():
    r = _judge(1024, [0.5, -0.01, 0.0], [2.0, 1.0, 1.0])
    np.testing.assert_allclose(r.z, [32 * 0.25, -32 * 0.01, 0.0])
    np.testing.assert_allclose(r.standardized_effect, [0.25, 0.01, 0.0])
    np.testing.assert_allclose(r.effect_ulp, [0.5, 0.01, 0.0])


def test_three_rules_give_fail_warn_pass():
    th = BiasThresholds(z_star=5, ulp_floor=0.25, min_standardized_effect=0.1)
    # significant, rho 0.5 > 0.1, 1 ULP > 0.25: FAIL
    # significant (z = 6), rho 0.06 < 0.1 (under effect floor): WARN
    # significant, 0.2 ULP < 0.25: WARN
    # not significant: PASS
    r = _judge(10_000, [1.0, 0.06, 0.2, 0.001], [2.0, 1.0, 0.1, 1.0], thresholds=th)
    assert list(r.verdict) == [FAIL, WARN, WARN, PASS]
    assert list(r.reason) == [DETECTED, UNDER_EFFECT_FLOOR, UNDER_ULP_FLOOR, 0]


def test_a_floor_at_the_harm_unit_reviews_nothing_below_it():
    # kcert kernelbench: c = 1 ULP of the problem's format; a significant 0.3-ULP bias is an arrangement of
    # the format's rounding (PASS, still reported with its reason); above the floor it still FAILs, and
    # under the effect floor (the harm boundary) it still WARNs
    th = BiasThresholds(ulp_floor=1.0, min_standardized_effect=0.1, warn_below_floor=False)
    r = _judge(10_000, [2.0, 0.06, 0.3], [2.0, 1.0, 0.1], thresholds=th)
    assert list(r.verdict) == [FAIL, WARN, PASS]
    assert list(r.reason) == [DETECTED, UNDER_EFFECT_FLOOR, UNDER_ULP_FLOOR]
    assert list(_judge(10_000, [0.3], [0.1], thresholds=BiasThresholds(ulp_floor=1.0)).verdict) == [WARN]


def test_zero_variance_is_its_own_case():
    r = _judge(100, [0.0, 0.5, 0.1], [0.0, 0.0, 0.0])
    # identical differences: PASS; a constant bias above the floor: FAIL; below: WARN
    assert list(r.verdict) == [PASS, FAIL, WARN]
    assert r.reason[0] == IDENTICAL
    assert np.isinf(r.z[1]) and r.z[0] == 0.0


def test_a_constant_difference_is_significant_only_from_a_run_a_sign_test_rejects():
    """One non-zero value in every replicate: at R = 8 a run of one sign that long has chance 2^-7 under a
    symmetric null (quantised differences make them), not significant; from 22 replicates on (2^-21 under
    2 Phi(-5)) it is, judged by the ULP floor alone."""
    assert power.constant_run_minimum(5.0) == 22 and 2.0 ** -21 <= 2 * norm.sf(5) < 2.0 ** -20
    short = _judge(21, [0.5, 0.0], [0.0, 0.0])
    assert list(short.verdict) == [PASS, PASS] and np.isinf(short.z[0]) and np.isinf(short.critical[0])
    long = _judge(22, [0.5], [0.0])
    assert long.verdict[0] == FAIL and np.isfinite(long.critical[0])


def test_untested_buckets_and_attribution():
    r = _judge(np.array([1, 1024]), [1.0, 1.0], [0.1, 0.1])
    assert r.reason[0] == UNTESTED and r.verdict[0] == PASS and r.verdict[1] == FAIL
    # prod within the floor of the oracle and no more biased than ref: the bias is ref's (PASS);
    # prod within the floor but more biased than ref: WARN; prod's own bias above the floor: FAIL
    r = _judge(1024, [1.0, 1.0, 1.0], [0.1, 0.1, 0.1], prod=np.array([0.1, 0.2, 0.9]),
               ref=np.array([-0.9, -0.1, -0.1]))
    assert list(r.reason) == [ATTRIBUTED_TO_REF, PROD_UNDER_FLOOR, DETECTED]
    assert list(r.verdict) == [PASS, WARN, FAIL]
    # a significant bias under the floor that is ref's is PASS too; without attribution, WARN
    r = _judge(1024, [0.1], [0.1], prod=np.array([0.0]), ref=np.array([-0.1]))
    assert r.reason[0] == ATTRIBUTED_TO_REF and r.verdict[0] == PASS
    r = _judge(1024, [0.1], [0.1], thresholds=BiasThresholds(attribution=False), prod=np.array([0.0]),
               ref=np.array([-0.1]))
    assert r.reason[0] == UNDER_ULP_FLOOR and r.verdict[0] == WARN and r.prod_bias_ulp is None


def test_a_bias_prod_shares_with_a_more_biased_ref_is_not_prods():
    """Qwen2's key-bias gradient (docs/model.md): prod - ref = p - r, own biases p = +12, r = +197 ULP against the
    oracle. prod moved towards the oracle and stopped short of it: p is a part of ref's bias (PASS, shared).
    prod past the oracle (p of the other sign) or beyond ref (|p| > |r|) brings its own bias: FAIL."""
    r = _judge(1024, [-185.0, -209.0, 13.0, 185.0], [50.0] * 4, prod=np.array([12.0, -12.0, 210.0, -12.0]),
               ref=np.array([197.0, 197.0, 197.0, -197.0]))
    assert list(r.reason) == [SHARED_WITH_REF, DETECTED, DETECTED, SHARED_WITH_REF]
    assert list(r.verdict) == [PASS, FAIL, FAIL, PASS]
    # the rule before (shared_bias=False): prod's own bias above the floor FAILs whatever ref's
    r = _judge(1024, [-185.0], [50.0], thresholds=BiasThresholds(shared_bias=False), prod=np.array([12.0]),
               ref=np.array([197.0]))
    assert r.reason[0] == DETECTED and r.verdict[0] == FAIL
    # within the floor the older clause decides (attributed to ref), and an insignificant difference stays so
    r = _judge(1024, [-0.5, 0.001], [0.05, 50.0], prod=np.array([0.1, 12.0]), ref=np.array([0.6, 12.0]))
    assert list(r.reason) == [ATTRIBUTED_TO_REF, NOT_SIGNIFICANT] and list(r.verdict) == [PASS, PASS]


def test_default_s_min_is_the_harm_boundary():
    assert BiasThresholds().s_min(T) == pytest.approx(T**-0.5)
    assert BiasThresholds(min_standardized_effect=0.2).s_min(T) == 0.2


def test_power_and_fwer_closed_forms():
    from scipy.stats import nct
    margin = 5 + norm.ppf(0.8)
    # the large-R forms hold where the critical value is z* (to 1e-6 at R = 2e7)
    assert power.replicates_needed(T, 5) == pytest.approx(np.ceil(margin**2 * T), rel=1e-5)
    assert power.replicates_needed(T, 5) >= np.ceil(margin**2 * T)
    # at R = 1024 the critical value 5.03 costs 0.6 % of detectable effect against the normal form
    assert margin / 32 < power.min_detectable_effect(1024, 5) < 1.01 * margin / 32
    assert power.horizon_covered(1024, 5) == pytest.approx(power.min_detectable_effect(1024, 5) ** -2)
    # the quoted effect is detected with at least the quoted power by the exact noncentral t, and not much more
    for r in (8, 16, 47, 64, 1024):
        rho, c = power.min_detectable_effect(r, 5), power.critical_z(r, 5)
        assert 0.8 <= nct.sf(c, r - 1, np.sqrt(r) * rho) < 0.85, r
    # replicates_needed inverts horizon_covered
    for horizon in (1.0, 30.0, 1e3):
        r = power.replicates_needed(horizon, 5)
        assert power.horizon_covered(r, 5) >= horizon > power.horizon_covered(r - 1, 5)
    assert power.familywise_error_bound(256, 5) == pytest.approx(2 * 256 * norm.sf(5))
    assert power.familywise_error_bound(10**9, 5) == 1.0
    with pytest.raises(ValueError, match="power must lie in"):
        power.horizon_covered(10, 5, power=1.0)


def test_confidence_interval_contains_mean():
    r = _judge(400, [1.0], [2.0])
    lo, hi = r.confidence_interval(0.95)
    assert lo[0] == pytest.approx(1.0 - 1.959963984540054 * 0.1)
    assert hi[0] == pytest.approx(1.0 + 1.959963984540054 * 0.1)


def test_negligible_or_insignificant_prod_bias_is_not_prods_defect():
    # significant prod-ref difference; prod's own bias 0.05 ULP (negligible: under c/4 = 0.0625)
    # and larger than ref's 0.005: PASS; at 0.1 ULP it is not negligible: WARN
    r = _judge(1024, [0.055, 0.105], [0.01, 0.01], prod=np.array([0.05, 0.1]), ref=np.array([-0.005, -0.005]))
    assert list(r.verdict) == [PASS, WARN]
    # the same 0.1 ULP of prod's own, but not significant by itself: PASS
    r = judge_buckets("raw", np.full(1, 1024), np.array([0.105]), np.array([0.01]), np.ones(1), BiasThresholds(), T,
                      np.array([0.1]), np.array([-0.005]), prod_bias_z=np.array([1.5]))
    assert r.verdict[0] == PASS and r.reason[0] == ATTRIBUTED_TO_REF


def test_the_critical_value_is_the_student_quantile_with_the_normal_tail_at_z_star():
    from scipy.stats import t
    counts = np.array([0, 1, 2, 8, 64, 1024, 1024, 10**7])
    c = power.critical_z(counts, 5)
    assert np.all(np.isinf(c[:2]))
    assert np.allclose(2 * t.sf(c[2:], counts[2:] - 1), 2 * norm.sf(5), rtol=1e-6)
    assert c[3] == pytest.approx(17.10, abs=0.01) and c[4] == pytest.approx(5.565, abs=1e-3)
    assert 5 < c[-1] < 5.00001 and c[5] == c[6] == power.critical_z(1024, 5)


def test_a_bucket_is_significant_beyond_its_critical_value_not_beyond_z_star():
    """At R = 8 a null |z| above 5 is a 1-in-640 event per bucket (Student t with 7 degrees of freedom), not
    the normal's 1 in 1.7 million: z = 6 is not significant there, it is at R = 1024 (critical 5.03)."""
    std = np.ones(1)
    small = judge_buckets("raw", np.full(1, 8), np.array([6 / np.sqrt(8)]), std, np.full(1, 1e-6), BiasThresholds(), T)
    assert small.z[0] == pytest.approx(6) and not small.significant[0] and small.verdict[0] == PASS
    assert small.critical[0] == pytest.approx(17.10, abs=0.01)
    large = judge_buckets("raw", np.full(1, 1024), np.array([6 / 32]), std, np.full(1, 1e-6), BiasThresholds(), T)
    assert large.significant[0] and large.verdict[0] == FAIL
    # a strong bias still FAILs at R = 8 (|z| = 28)
    strong = judge_buckets("raw", np.full(1, 8), np.array([10.0]), np.array([1.0]), np.full(1, 1e-6),
                           BiasThresholds(), T)
    assert strong.verdict[0] == FAIL


def test_the_attribution_z_and_the_bucket_z_decide_alike_but_on_one_replicate():
    """The two zero-variance rules (stats.bias.attribution_z's docstring): over every kind of input a run
    produces (a nan spread below two replicates; finite means and spreads, zero and within 1e-12 of the
    mean included, from two on), ``|z| <= z*`` differs only for one replicate with a non-zero mean."""
    thresholds = BiasThresholds()
    rows = []
    for count in (0, 1, 2, 3, 64, 4096):
        means = (0.0,) if count == 0 else (0.0, -0.0, 1e-300, -1e-20, 1e-3, -1.0, 5.0, 1e30)
        for mean in means:
            spreads = (np.nan,) if count < 2 else (0.0, 1e-13 * abs(mean), 1e-12 * abs(mean), 1e-3, 1.0, 1e3, 1e40)
            rows += [(count, mean, std) for std in spreads]
    count, mean, std = (np.array(c) for c in zip(*rows))
    bucket_z = judge_buckets("raw", count, mean, std, np.ones(len(rows)), thresholds, 1e6).z
    with np.errstate(over="ignore"):
        prod_z = attribution_z(count, mean, std)
    differ = (np.abs(bucket_z) <= thresholds.z_star) != (np.abs(prod_z) <= thresholds.z_star)
    assert len(rows) > 200
    assert np.array_equal(differ, (count == 1) & (mean != 0))


def test_the_significance_line_counts_shared_biases_apart():
    from kcert.report.blocks import Significance
    line = Significance(significant=10, fail=1, warn=2, ref_bias=5, z_star=5.0, ulp_floor=0.25, shared=3).text()
    assert "1 FAIL, 2 WARN, 2 PASS as ref's own bias" in line
    assert "3 PASS as a bias shared with ref" in line and "2 PASS otherwise" in line


def test_rank_matched_ref_bias_sets_each_prod_bucket_against_refs_bias_at_its_rank():
    from kcert.stats.bias import rank_matched_ref_bias

    prod = np.array([0.1, -0.5, 0.3, np.nan, 0.2])
    ref = np.array([0.4, 0.2, -0.05, 0.3, np.nan])
    tested = np.array([True, True, True, False, True])
    # prod's ranks over its tested finite buckets: -0.5, 0.3, 0.2, 0.1; ref's tested finite profile: 0.4, 0.2,
    # 0.05 (its fourth rank is past the profile: 0); the untested bucket is NaN
    np.testing.assert_allclose(rank_matched_ref_bias(prod, ref, tested), [0.0, 0.4, 0.2, np.nan, 0.05])
    assert np.isnan(rank_matched_ref_bias(prod, np.full(5, np.nan), tested)).sum() == 1  # no ref: zeros, then NaN


def _gate(prod_ulp, ref_ulp, replicates=1024, thresholds=None):
    """The bias gate on one output of bf16 values of magnitude 1 whose per-bucket own biases against the oracle
    are ``prod_ulp`` and ``ref_ulp`` (in ULP), with a spread small enough that every such bias is significant."""
    from kcert.gates.bias import _judge

    unit = 2.0 ** -7  # one bf16 ULP at 1
    prod, ref = np.asarray(prod_ulp) * unit, np.asarray(ref_ulp) * unit
    n = prod.size
    count, std = np.full(n, replicates), np.full(n, 0.01 * unit)
    rows = {"magnitude": (count, np.ones(n), std)}
    for stat in ("raw", "sign_aligned"):
        rows[stat] = (count, prod - ref, std)
        rows[f"prod_{stat}"] = (count, prod, std)
        rows[f"ref_{stat}"] = (count, ref, std)
    return _judge("y", "bfloat16", "bfloat16", tuple(str(i) for i in range(n)), rows, replicates, (0, 0, ()),
                  thresholds or BiasThresholds(), T, True)


def test_a_fail_is_set_against_refs_own_bias_profile():
    from kcert.diagnostics import Code, raised

    # prod's own 0.4 ULP on bucket 0 FAILs bucket by bucket (ref's there: -0.05, other sign); ref carries
    # 0.5 ULP on buckets 1 and 2, where prod is within the floor (attributed to ref). The figures as they are
    # with the profile rule off (with it, this 4-bucket output is within ref's profile: the tests below)
    within = _gate([0.4, 0.05, 0.05, 0.0], [-0.05, 0.5, -0.5, 0.0], thresholds=BiasThresholds(profile_alpha=None))
    assert within.verdict.value == "FAIL"
    profile = [d for d in within.diagnostics if d.code == Code.FAIL_AGAINST_REF_PROFILE]
    assert len(profile) == 1 and "1 bucket, 0.8x ref's own bias at the same rank" in profile[0].message
    # of the 16 swaps of the 4 buckets, 14 leave prod's largest at least 0.8x ref's (exact enumeration)
    assert "bucket swaps: p = 0.88 (raw), p = 0.88 (sign_aligned)" in profile[0].message
    # the same prod against a reference with no bias of its own: the ratio is far above 1
    beyond = _gate([0.4, 0.05, 0.05, 0.0], [-0.01, 0.01, -0.01, 0.0])
    assert beyond.verdict.value == "FAIL"
    message = next(d.message for d in beyond.diagnostics if d.code == "fail_against_ref_profile")
    assert "40x ref's own bias" in message and "p = 0.12 (raw)" in message  # 2 of 16 swaps: 4 buckets resolve little
    # no FAIL, no diagnostic
    assert not raised(_gate([0.1, 0.05, 0.0, 0.0], [0.1, 0.5, 0.0, 0.0]).diagnostics, Code.FAIL_AGAINST_REF_PROFILE)


def test_a_model_rows_figure_quotes_the_largest_ratio_to_refs_profile():
    import types

    from kcert.model.results import against_ref_profile, profile_swap_evidence

    within = _gate([0.4, 0.05, 0.05, 0.0], [-0.05, 0.5, -0.5, 0.0])
    beyond = _gate([0.4, 0.05, 0.05, 0.0], [-0.01, 0.01, -0.01, 0.0])
    assert against_ref_profile(types.SimpleNamespace(bias=[within])) == pytest.approx(0.8)
    assert against_ref_profile(types.SimpleNamespace(bias=[within, beyond])) == pytest.approx(40)
    assert against_ref_profile(types.SimpleNamespace(bias=[_gate([0.1, 0.0], [0.1, 0.5])])) is None  # no FAIL
    # and the smallest swap test's p over the FAILing statistics
    assert profile_swap_evidence(types.SimpleNamespace(bias=[within, beyond])) == pytest.approx(0.125)
    assert profile_swap_evidence(types.SimpleNamespace(bias=[_gate([0.1, 0.0], [0.1, 0.5])])) is None


def test_the_profile_swap_test_is_exact_on_few_buckets_and_calibrated_on_many():
    from kcert.stats.bias import profile_swap_p

    two = np.ones(2, bool)
    # swaps of 2 buckets: the identity and swapping the second keep 1.0 / 0.1; the other two give 0.1
    assert profile_swap_p(np.array([1.0, 0.1]), np.array([0.1, 0.1]), two) == 0.5
    assert profile_swap_p(np.array([0.1]), np.array([0.5]), np.ones(1, bool)) == 1.0  # prod the less biased
    assert np.isnan(profile_swap_p(np.array([0.1, np.nan]), np.array([np.nan, 0.2]), two))  # no bucket has both
    rng = np.random.default_rng(1)
    # equally biased sides (one law, 64 buckets): a valid p, P(p <= a) <= a (within 3 binomial sds of 300 runs;
    # conservative, as the swaps' top value decides half the statistic's law)
    null = np.array([profile_swap_p(rng.standard_normal(64), rng.standard_normal(64), np.ones(64, bool), swaps=499,
                                    seed=k) for k in range(300)])
    for a in (0.01, 0.05, 0.2, 0.5):
        assert np.mean(null <= a) <= a + 3 * np.sqrt(a * (1 - a) / 300), a
    assert np.mean(null <= 0.5) >= 0.3  # and not a p that is never small
    # prod twice as biased as ref on every bucket: rejected at the swaps' resolution
    base = rng.standard_normal(64)
    assert profile_swap_p(2 * base, base, np.ones(64, bool), swaps=999) == 1 / 1000
    # the same seed, the same p (reproducible reports)
    p, r = rng.standard_normal(256), rng.standard_normal(256)
    assert profile_swap_p(p, r, np.ones(256, bool)) == profile_swap_p(p, r, np.ones(256, bool))


def _profile(prod_ulp, ref_ulp, **rule):
    result = _gate(prod_ulp, ref_ulp, thresholds=BiasThresholds(**rule))
    return result, {d.code: d.message for d in result.diagnostics}


def test_a_fail_within_refs_own_bias_profile_warns():
    from kcert.stats.bias import WITHIN_REF_PROFILE

    # 16 buckets: prod's own 0.4 ULP FAILs bucket 0 (ref's there -0.05); ref carries 0.5 ULP on buckets 1 and 2
    # and prod is within the floor there: equally biased sides on different buckets
    prod = [0.4] + [0.05] * 15
    ref = [-0.05, 0.5, -0.5] + [0.04] * 13
    result, said = _profile(prod, ref)
    assert result.verdict.value == "WARN" and "within_ref_profile" in said and "fail_against_ref_profile" not in said
    assert "(each p > 0.01, each ratio <= 2)" in said["within_ref_profile"]
    assert result.ref_profile.within and result.count(result.verdict.FAIL) == 0
    assert [f.reason for f in result.findings()][:1] == [
        "coherent bias, but within ref's own bias profile on this output: prod's profile no more biased than ref's "
        "by the swap test, and no bucket's own bias more than lambda times ref's at the same rank (on an output too "
        "small for the swap test: none above ref's at its rank)"]
    assert any(np.any(t.reason == WITHIN_REF_PROFILE) for t in result.tests)
    from kcert.report.blocks import significance
    assert "0 FAIL, 1 WARN (1 a FAIL bucket by bucket, within ref's own bias profile)" in significance(result).text()
    # the rule off: the bucket-wise FAIL, the figures as a diagnostic
    off, said = _profile(prod, ref, profile_alpha=None)
    assert off.verdict.value == "FAIL" and "the FAIL stands: the rule is off" in said["fail_against_ref_profile"]


def test_a_defect_on_few_buckets_keeps_its_fail_through_the_ratio():
    # a kernel's last partial tile wrong: 3 of 64 buckets at 3 ULP, 37x ref's largest own bias. The swap test
    # alone cannot reject (p ~ 2**-3), the ratio does
    prod = [0.05] * 61 + [3.0] * 3
    ref = [0.08, -0.08] * 32
    result, said = _profile(prod, ref)
    assert result.verdict.value == "FAIL"
    assert result.ref_profile.swap_p[0][1] > 0.01 and not result.ref_profile.within
    assert "the FAIL stands: a bucket at 37.5x ref's own bias at its rank > 2" in said["fail_against_ref_profile"]
    # with the ratio limit out of the way the same FAIL would WARN: the ratio is what keeps it
    assert _profile(prod, ref, profile_ratio=100.0)[0].verdict.value == "WARN"


def test_a_prod_more_biased_on_many_buckets_keeps_its_fail_through_the_swap_test():
    # prod 1.5x ref's own bias on every one of 64 buckets: no bucket beyond lambda = 2, the swap test rejects
    ref = np.resize([0.3, -0.3, 0.2, -0.2], 64)
    result, said = _profile(1.5 * np.abs(ref) + 0.01, ref)
    assert result.verdict.value == "FAIL"
    assert "the FAIL stands: swap test p = 0.0001 <= 0.01" in said["fail_against_ref_profile"]


def test_an_output_with_too_few_buckets_for_the_swap_test_is_judged_by_its_ratios():
    # 6 buckets: no swap test can reach p <= 0.01 (2**-6 = 0.016). prod's 0.4 ULP against ref's largest 0.5: no
    # more biased than ref at its rank (0.8x), a WARN; the same bucket against ref's 0.3 (1.33x) keeps the FAIL
    assert BiasThresholds().profile_min_buckets == 7 and BiasThresholds(profile_alpha=0.05).profile_min_buckets == 5
    within, said = _profile([0.4] + [0.05] * 5, [-0.05, 0.5, -0.5, 0.04, 0.04, 0.04])
    assert within.verdict.value == "WARN" and "within_ref_profile" in said
    beyond, said = _profile([0.4] + [0.05] * 5, [-0.05, 0.3, -0.3, 0.04, 0.04, 0.04])
    assert beyond.verdict.value == "FAIL"
    assert "6 tested buckets (too few for the swap test) and a bucket at 1.33x" in said["fail_against_ref_profile"]
    # a one-bucket output (a loss): prod overshoots float64 by less than ref undershoots it: WARN; by more: FAIL
    assert _profile([-0.4], [0.5])[0].verdict.value == "WARN"
    assert _profile([-0.6], [0.5])[0].verdict.value == "FAIL"


def test_a_kernel_wrong_on_its_last_partial_tile_keeps_its_fail():
    """A Gemma RMSNorm whose last partial tile (4 of 516 channels, blocks of 64) forms (1 + w) in bf16, run through
    kcert.certify: its FAIL stands under the profile rule (its ratio), where the swap test alone would let it WARN."""
    import torch

    import kcert
    from kcert.catalog import norms as N
    from kcert.controls.norms import gemma_rms_norm_bf16_gain

    def prod(x, w, eps=N.GEMMA_EPS):
        good, bad = N.gemma_rms_norm(x, w, eps), gemma_rms_norm_bf16_gain(x, w, eps)
        return torch.cat([good[..., :512], bad[..., 512:]], dim=-1)

    cert = kcert.certify(N.GEMMA_RMSNORM.case("gemma_norm_last_tile_bf16_gain", prod, shape=(64, 516)), 512, seed=0)
    profile = cert.bias[0].ref_profile
    assert cert.verdict.value == "FAIL" and cert.bias[0].verdict.value == "FAIL"
    assert profile.buckets <= 4 and profile.lowest_ratio > 10
    assert min(p for _, p in profile.swap_p) > 0.01  # the swap test alone would not keep it
