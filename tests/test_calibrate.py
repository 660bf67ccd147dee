"""`kcert calibrate`: the null-rate arithmetic, the WARN-line proposal, a tiny real calibration and
the command line. (tests/test_calibration.py checks the bias test's null rates themselves.)"""

import json

import numpy as np
import pytest

from kcert.calibration import OutputSample, calibrate, structural_alarm, summarise_family
from kcert.certificate import VarianceThresholds
from kcert.cli import main
from kcert.errors import ParameterError
from kcert.gates.variance import judge_errors
from kcert.stats.bias import BiasThresholds
from kcert.stats.calibration import Rate, exceedances, propose_warn_line, rate_upper_bound
from kcert.verdict import Verdict

TINY = "single_rounding_prod_vs_hf_double"  # a quick positive whose prod differs from ref (23 % of elements)
IDENTICAL = "rms_norm_builtin_vs_manual"  # bitwise ref on its probe: a sanity check, not null evidence


# ---------------------------------------------------------------- pure arithmetic


def test_rate_upper_bound_is_clopper_pearson():
    # no alarm in n: the bound solves (1 - p)^n = 0.05
    assert rate_upper_bound(0, 14) == pytest.approx(1 - 0.05 ** (1 / 14))
    assert rate_upper_bound(0, 59) < 0.05 < rate_upper_bound(0, 58)  # the classic "59 clean draws" rule
    assert rate_upper_bound(3, 3) == 1.0 and rate_upper_bound(0, 0) == 1.0
    assert rate_upper_bound(1, 20) > 1 / 20
    with pytest.raises(ValueError, match="alarms <= n"):
        rate_upper_bound(5, 4)


def test_exceedances_count_strictly_above_and_ignore_missing_bounds():
    r = exceedances([1.0, 2.0, 2.5, None, 7.0], 2.0)
    assert (r.alarms, r.n) == (2, 5)  # 2.0 is on the line (PASS), None has no U to compare
    assert r.rate == pytest.approx(0.4)
    assert np.isnan(Rate(0, 0).rate) and Rate(0, 0).to_dict()["rate"] is None


def test_default_line_holds_at_exactly_the_target_rate():
    u = [1.0] * 19 + [2.5]  # 1/20 = 5 % above 2
    p = propose_warn_line(u, [False] * 20)
    assert p.proposal == 2.0 and p.holds
    assert p.default_rate.alarms == 1 and p.by_line[3.0].alarms == 0


def test_proposal_climbs_the_ladder_to_the_first_line_under_target():
    u = [1.0] * 17 + [2.5, 2.8, 4.0]  # 15 % above 2, 5 % above 3
    p = propose_warn_line(u, [False] * 20)
    assert p.proposal == 3.0 and not p.holds
    assert p.default_rate.rate == pytest.approx(0.15)
    assert p.proposal_rate.rate == pytest.approx(0.05)
    assert p.to_dict()["by_line"]["5"]["alarms"] == 0


def test_no_proposal_when_every_line_is_exceeded_or_the_sample_is_empty():
    p = propose_warn_line([6.0, 7.0, 1.0], [False] * 3)
    assert p.proposal is None and not p.holds and p.by_line[5.0].alarms == 2
    assert propose_warn_line([], []).proposal is None


def test_structural_alarms_are_counted_apart_and_do_not_move_the_line():
    # the third output's U = 7 comes with a rejected bounded tail: WARN at any line, so no line is charged
    p = propose_warn_line([1.0, None, 7.0, 1.2], [False, True, True, False])
    assert p.proposal == 2.0 and (p.structural.alarms, p.structural.n) == (2, 4)
    assert all(r.alarms == 0 and r.n == 4 for r in p.by_line.values())


def test_proposal_rejects_bad_ladders_and_targets():
    with pytest.raises(ValueError, match="strictly increasing"):
        propose_warn_line([1.0], [False], ladder=(3.0, 2.0))
    with pytest.raises(ValueError, match="on the ladder"):
        propose_warn_line([1.0], [False], default=4.0)
    with pytest.raises(ValueError, match="structural flags"):
        propose_warn_line([1.0, 2.0], [False])
    with pytest.raises(ValueError, match="target"):
        propose_warn_line([1.0], [False], target=1.5)


# ---------------------------------------------------------------- the gate's verdict, split


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("law", ["small", "medium", "heavy", "few", "infinite", "below_minimum"])
def test_verdict_is_the_warn_line_or_a_structural_alarm(law, seed):
    """What the calibration assumes of the gate: an output is above PASS exactly when it is a
    structural alarm or its U is above the WARN line, so re-placing the line is re-judging."""
    rng = np.random.default_rng(seed)
    ref = 20 * rng.exponential(size=512)
    prod = {"small": lambda: 0.5 * ref,
            "medium": lambda: 2.5 * 20 * rng.exponential(size=512),
            "heavy": lambda: 20 * (rng.pareto(2.0, 512) + 1),
            "few": lambda: np.r_[np.zeros(509), [5.0, 10.0, 15.0]],
            "infinite": lambda: np.r_[20 * rng.exponential(size=511), np.inf],
            "below_minimum": lambda: ref[:50]}[law]()
    t = VarianceThresholds(bootstrap=20)
    v = judge_errors(prod, ref[:prod.size], 6.25e5, t)
    u = v.pass_bound  # U, the separate-shapes bound and the observed ratio: what a PASS needs under the line
    assert (v.verdict is not Verdict.PASS) == (structural_alarm(v) or (u is not None and u > t.warn)), v.reason
    assert u is None or u >= v.upper_bound
    if law == "infinite":
        assert structural_alarm(v) and v.verdict is Verdict.FAIL
    if law == "below_minimum":
        assert structural_alarm(v) and v.verdict is Verdict.WARN


def _sample(u, verdict, structural=False, bias="PASS"):
    return OutputSample("norm", "c", 0, "y", 64, bias, 1.0, 0, 0.01, 0.02, None, 0, 0, 1e-4,
                        variance_verdict=verdict, upper_bound=u, return_level=None if u is None else u / 2,
                        variance_structural=structural)


def test_family_summary_counts_verdicts_and_skips_outputs_without_a_variance_gate():
    samples = [_sample(1.0, "PASS"), _sample(2.4, "WARN"), _sample(None, "WARN", structural=True, bias="WARN"),
               _sample(None, None)]
    f = summarise_family("norm", ["c"], samples, VarianceThresholds(), BiasThresholds(), target=0.05)
    assert len(f.judged) == 3
    assert (f.variance_warn.alarms, f.variance_warn.n) == (2, 3)
    assert (f.bias_warn.alarms, f.bias_warn.n) == (1, 4)
    assert f.warn_line.default_rate.alarms == 1 and f.warn_line.proposal == 3.0
    assert f.u_max == 2.4 and f.max_effect_ulp == 0.02
    d = f.to_dict()
    assert d["variance"]["warn_line"]["proposal"] == 3.0 and d["bias"]["ulp_floor"] == 0.25


# ---------------------------------------------------------------- a real calibration


def test_calibrate_one_control_over_two_seeds():
    cal = calibrate(controls=[TINY], seeds=2, replicates=64)
    assert [f.family for f in cal.families] == ["norm"]
    f = cal.families[0]
    assert f.controls == (TINY,) and not cal.errors
    assert sorted({s.seed for s in f.samples}) == [0, 1]
    warn = cal.variance_thresholds.warn
    for s in f.samples:
        assert s.replicates >= 64 and np.isfinite(s.max_abs_z) and s.max_effect_ulp_raw >= 0
        assert s.max_effect_ulp_sign_aligned is not None  # the gate tests both statistics by default
        above = s.variance_structural or (s.upper_bound is not None and s.upper_bound > warn)
        assert (s.variance_verdict != "PASS") == above
    d = json.loads(json.dumps(cal.to_dict()))  # strict JSON: no NaN or infinity
    assert d["schema"] == "kcert.calibration/1" and len(d["samples"]) == len(f.samples)
    md = cal.markdown("kcert calibrate --control x")
    assert "| norm |" in md and f"`{TINY}`" in md and "max \\|z\\|" in md


def test_bitwise_identical_outputs_are_left_out_of_the_null_rates():
    cal = calibrate(controls=[TINY, IDENTICAL], seeds=1, replicates=64)
    assert [f.controls for f in cal.families] == [(TINY,)]
    assert {(s.control, s.differing_share) for s in cal.excluded} == {(IDENTICAL, 0.0)}
    assert all(s.differing_share >= 0.01 for s in cal.samples)
    assert IDENTICAL in cal.markdown() and len(cal.to_dict()["excluded"]) == 1


def test_calibrate_rejects_bad_input():
    with pytest.raises(ParameterError, match="families: norm, rope"):
        calibrate("norms")
    with pytest.raises(ParameterError, match="not positive controls"):
        calibrate(controls=["gemma_one_plus_w_bf16"])  # a negative control
    with pytest.raises(ParameterError, match="seeds"):
        calibrate(seeds=0)
    with pytest.raises(ParameterError, match="replicates"):
        calibrate(replicates=1)


# ---------------------------------------------------------------- command line


def test_cli_unknown_family_exits_2_and_lists_the_families(capsys):
    assert main(["calibrate", "--family", "nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope' is not a control family" in err and "norm, rope, attention" in err


def test_cli_bad_seeds_and_missing_folder_exit_2(tmp_path, capsys):
    assert main(["calibrate", "--seeds", "0"]) == 2
    assert "seeds must be a count >= 1" in capsys.readouterr().err
    assert main(["calibrate", "--control", TINY, "--json", str(tmp_path / "no" / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_writes_json_and_markdown(tmp_path, capsys):
    out_json, out_md = tmp_path / "cal.json", tmp_path / "cal.md"
    code = main(["calibrate", "--control", TINY, "--seeds", "1", "--replicates", "64",
                 "--json", str(out_json), "--markdown", str(out_md)])
    out = capsys.readouterr().out
    assert code == 0
    assert "variance gate on known-good outputs" in out and "bias gate on known-good outputs" in out
    d = json.loads(out_json.read_text())
    assert d["seeds"] == [0] and d["replicates"] == 64 and d["families"][0]["family"] == "norm"
    md = out_md.read_text()
    assert md.startswith(f"Generated by `kcert calibrate --seeds 1 --replicates 64 --control {TINY}`")
    assert "| proposed WARN line |" in md


def test_markdown_numbers_keep_the_sign_of_an_infinity():
    from kcert.calibration import fmt  # kcert.numbers.fmt, the one number formatter

    assert (fmt(float("-inf")), fmt(float("inf")), fmt(float("nan")), fmt(None), fmt(1.23456)) == \
        ("-inf", "inf", "nan", "-", "1.23")
