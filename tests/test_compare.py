"""kcert compare OLD.json NEW.json: what changed between two certificates, read generically."""

import json
import textwrap

import pytest

from kcert.cli import main
from kcert.report.compare import compare_certificates, compare_files

CASES = '''
import torch, kcert
GAIN = {gain}
def ref(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
def prod(x, w):
    return (ref(x, w).float() * GAIN).to(x.dtype)
rms = kcert.Case(name="rms", ref=ref, prod=prod, inputs={{"x": kcert.Gaussian((4, 32), shift=0.1)}},
                 weights={{"w": kcert.Gaussian((32,), shift=1.0, std=0.1)}})
other = kcert.Case(name="other", ref=lambda x: x * 2, prod=lambda x: x + x, inputs={{"x": kcert.Gaussian((2, 8))}})
'''


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    out = {}
    for label, gain, seed in (("old", 1.0, 0), ("new", 1.02, 0), ("seed", 1.0, 1)):
        path = folder / f"{label}.py"
        path.write_text(textwrap.dedent(CASES.format(gain=gain)))
        assert main(["certify", str(path), "-R", "40", "-s", str(seed), "--no-algebra-proof",
                     "--json", str(folder / f"{label}.json")]) in (0, 1, 3)
        out[label] = folder / f"{label}.json"
    return out


def run(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_verdict_that_got_worse_exits_one_and_names_what_moved(reports, capsys):
    code, out, err = run(["compare", str(reports["old"]), str(reports["new"])], capsys)
    flat = " ".join(out.split())
    assert code == 1, out + err
    assert "case rms:" in flat and "(worse)" in flat and "exit 1: rms: verdict" in flat
    assert "gates.bias" in flat and "FAIL" in flat
    assert "figures that moved most" in flat
    labels = next(c for c in json.loads(reports["new"].read_text()) if c["case"] == "rms")
    labels = labels["gates"]["bias"]["outputs"][0]["buckets"]["labels"]
    assert "gates.bias.outputs[output].statistics" in out  # places keep their brackets (no rich markup)
    result = compare_files(reports["old"], reports["new"])
    rms = next(c for c in result.cases if c.case == "rms")
    assert rms.figures and rms.figures[0].change >= rms.figures[-1].change  # largest change first
    per_bucket = [f for f in rms.figures if f.where.startswith("gates.bias.outputs[output].statistics")]
    assert per_bucket and all(f.label in labels for f in per_bucket)  # an element is named by its bucket
    assert any(f"{f.label} (of {f.elements_changed} changed)" in out for f in per_bucket)
    assert any(p.where == "provenance.command" for p in rms.provenance)  # the case file differs
    other = next(c for c in result.cases if c.case == "other")
    assert not other.verdicts and not other.worse


def test_the_same_certificates_compare_equal_and_a_better_verdict_exits_zero(reports, capsys):
    code, out, _ = run(["compare", str(reports["old"]), str(reports["old"])], capsys)
    assert code == 0 and "no verdict got worse" in out and "no figure moved" in out
    code, out, _ = run(["compare", str(reports["new"]), str(reports["old"])], capsys)
    assert code == 0 and "(better)" in out


def test_provenance_differences_are_listed_and_the_date_is_not(reports):
    result = compare_files(reports["old"], reports["seed"])
    places = {p.where for c in result.cases for p in c.provenance}
    assert "provenance.seed" in places
    assert not any(p.startswith(("provenance.date", "provenance.wall_time_s")) for p in places)


def test_fields_only_one_side_has_and_new_fields_are_handled_generically(reports):
    old = json.loads(reports["old"].read_text())
    new = json.loads(reports["old"].read_text())
    old = next(c for c in old if c["case"] == "rms")
    new = next(c for c in new if c["case"] == "rms")
    new["gates"]["variance"]["outputs"][0]["a_new_figure"] = 2.5  # a field a later kcert adds
    old["gates"]["variance"]["outputs"][0]["a_new_figure"] = 2.0
    new["gates"]["bias"]["outputs"][0]["only_in_new"] = {"x": 1}
    del new["gates"]["algebra"]["reason"]
    new["gates"]["variance"]["verdict"] = "FAIL"
    c = compare_certificates(old, new)
    assert [(f.where, f.old, f.new) for f in c.figures] == [("gates.variance.outputs[output].a_new_figure", 2.0, 2.5)]
    assert [(v.where, v.new, v.worse) for v in c.verdicts] == [("gates.variance", "FAIL", True)]


def test_missing_cases_and_bad_files(reports, tmp_path, capsys):
    single = json.loads(reports["old"].read_text())[0]
    (tmp_path / "one.json").write_text(json.dumps(single))
    code, out, _ = run(["compare", str(reports["old"]), str(tmp_path / "one.json")], capsys)
    assert code == 1 and "missing from" in out
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something/1"}))
    for path, message in ((tmp_path / "nope.json", "no such file"), (tmp_path / "bad.json", "not JSON"),
                          (tmp_path / "other.json", "is not a kcert certificate")):
        code, _, err = run(["compare", str(path), str(reports["old"])], capsys)
        assert code == 2 and message in " ".join(err.split()) and "Traceback" not in err
