"""The control-suite runner, its summary against the bar, and `kcert controls`."""

import json

import pytest

import kcert
from kcert.cli import main
from kcert.controls.registry import all_controls
from kcert.controls.suite import ControlResult, run_controls, summarize
from kcert.verdict import Verdict


def test_registry_has_the_full_suite_with_unique_names_and_sources():
    controls = all_controls()
    names = [c.name for c in controls]
    assert len(names) == len(set(names))
    negatives = [c for c in controls if c.kind == "negative"]
    positives = [c for c in controls if c.kind == "positive"]
    assert len(negatives) >= 30 and len(positives) >= 35
    report = ("norm", "rope", "attention", "moe", "activation", "gemm", "loss")  # the technical report's families
    forward = [c for c in controls if c.family in report]
    assert sum(c.kind == "negative" for c in forward) == 30 and sum(c.kind == "positive" for c in forward) == 35
    for c in controls:
        assert c.source and c.doc and c.summary
        assert isinstance(c.build(), kcert.Step if c.family == "step" else kcert.Case)  # steps: L2


def test_run_and_summarise_a_real_negative_and_positive():
    by_name = {c.name: c for c in all_controls()}
    results = run_controls([by_name["eps_added_to_rms"], by_name["gemma_rms_norm_fused_rewrite"]], quick=True)
    neg, pos = results
    assert neg.detected and neg.meets_bar and neg.gates["algebra"] is Verdict.FAIL
    assert "algebra: rel. discrepancy" in neg.deciding_figure()
    assert pos.verdict is Verdict.PASS and pos.meets_bar
    s = summarize(results)
    assert (s.negatives, s.detected, s.positives, s.positive_fail, s.positive_warn) == (1, 1, 1, 0, 0)
    assert s.only_by["algebra"] == ["eps_added_to_rms"]
    assert s.meets_bar


class _FakeCert:
    def __init__(self, verdict):
        self.verdict = verdict
        self.gates = {"algebra": Verdict.PASS, "bias": verdict, "variance": Verdict.PASS}
        self.bias = ()
        self.bitwise = ()
        self.accepted_skips = ()


@pytest.mark.parametrize(
    "negatives, positives, met, beyond",
    [
        ([Verdict.FAIL] * 29 + [Verdict.PASS], [Verdict.PASS] * 33 + [Verdict.WARN] * 2, True, ()),
        ([Verdict.FAIL] * 28 + [Verdict.PASS] * 2, [Verdict.PASS] * 35, False, ()),
        ([Verdict.WARN] * 30, [Verdict.PASS] * 34 + [Verdict.FAIL], False, ()),
        ([Verdict.FAIL] * 30, [Verdict.PASS] * 32 + [Verdict.WARN] * 3, False, ()),
        # every family counts: two WARNs beyond the report's families on top of two within break the bar
        ([Verdict.FAIL] * 30, [Verdict.PASS] * 33 + [Verdict.WARN] * 2, False, [Verdict.WARN] * 2),
        ([Verdict.FAIL] * 30, [Verdict.PASS] * 35, True, [Verdict.WARN] * 2),
        ([Verdict.FAIL] * 30, [Verdict.PASS] * 35, False, [Verdict.FAIL]),
    ],
)
def test_the_bar(negatives, positives, met, beyond):
    proto = all_controls()[0]
    results = []
    for kind, family, verdicts in (("negative", "norm", negatives), ("positive", "norm", positives),
                                   ("positive", "framework", beyond)):
        for i, v in enumerate(verdicts):
            control = type(proto)(f"{kind}{family}{i}", family, kind, "src", proto.build, "doc")
            results.append(ControlResult(control, _FakeCert(v), 0.0))
    assert summarize(results).meets_bar is met


def test_controls_command_json_and_markdown(tmp_path, capsys):
    out_json, out_md = tmp_path / "c.json", tmp_path / "c.md"
    code = main(["controls", "--control", "eps_added_to_rms", "--quick", "--json", str(out_json),
                 "--markdown", str(out_md)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    payload = json.loads(out_json.read_text())
    assert payload["schema"] == "kcert.controls/1"
    row = payload["controls"][0]
    assert row["name"] == "eps_added_to_rms" and row["verdict"] == "FAIL" and row["source"] == "gpt-neox #1342"
    assert row["certificate"]["schema"] == "kcert.certificate/1"
    assert "`eps_added_to_rms`" in out_md.read_text()
    assert "negatives detected (at least WARN): 1/1" in out


def test_controls_command_rejects_unknown_names(capsys):
    assert main(["controls", "--family", "nope"]) == 2
    assert "is not a control family" in capsys.readouterr().err
    assert main(["controls", "--control", "nope"]) == 2


def test_halves_are_fixed_by_the_name_and_both_hold_controls_of_each_kind():
    import hashlib

    controls = all_controls()
    for c in controls:
        assert c.half == ("tuning" if hashlib.sha256(c.name.encode()).digest()[0] % 2 == 0 else "validation")
    for kind in ("negative", "positive"):
        halves = {c.half for c in controls if c.kind == kind}
        assert halves == {"tuning", "validation"}


def test_a_bitwise_identical_positive_is_counted_as_a_sanity_check_not_null_evidence():
    by_name = {c.name: c for c in all_controls()}
    identical, differing = run_controls([by_name["rms_norm_builtin_vs_manual"],
                                         by_name["single_rounding_prod_vs_hf_double"]], quick=True)
    assert identical.differing_share == 0.0 and identical.evidence == "identical"
    assert differing.differing_share > 0.1 and differing.evidence == "differs"
    s = summarize([identical, differing])
    assert s.positive_evidence == {"differs": 1, "near identical": 0, "identical": 1}
    assert sum(h["positives"] for h in s.halves.values()) == 2
