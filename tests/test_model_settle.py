"""Rows held back for lack of evidence go on (docs/model.md, "Rows held back go on"): ``certify_model`` lets a row
whose variance gate's looks ran out before it decided continue to the settle cap from its own state, and its
certificate is the one ``kcert model``'s printed settle command gives by resuming the row's checkpoint (the note
worded as a settle); a row that decided does not go on; a cap the caller gives is a cap; bad settle caps are named.
Tiny models, 100 replicates."""

import json

import pytest

import kcert
from kcert.settling import lack_of_evidence
from kcert.verdict import Verdict
from model_fixtures import SEQ, VOCAB, FusedGain, swapped, tiny
from sample_kernels import stable_report

INPUTS = {"input_ids": kcert.Integers((2, SEQ), 0, VOCAB)}
FEW = kcert.Modules(names=("layers.0.norm2",))
OPTIONS = dict(modules=FEW, end_to_end=False, peer_rules=False, replicates=100)
SETTLED = "looks extended to settle a lack of evidence: the row's first plan ended at 100 replicates"


def _pair():
    ref = tiny()
    return ref, swapped(ref, "layers.0.norm1", FusedGain)  # norm2's backward row is held back at 100 replicates


def _without_notes(cert) -> dict:
    report = stable_report(cert)
    report["notes"] = [n for n in report["notes"] if not n.startswith("looks extended")]
    return report


def test_a_row_held_back_goes_on_as_its_settle_command_would(tmp_path):
    ref, prod = _pair()
    stopped = kcert.certify_model(ref, prod, INPUTS, max_replicates=100, **OPTIONS)  # a given cap is a cap
    back = stopped.row("layers.0.norm2", "backward").certificate
    assert back.verdict is Verdict.WARN and back.provenance.replicates == 100
    assert "settle_max_replicates" not in stopped.provenance
    assert lack_of_evidence(back) == 100  # held back: the row the settle goes on with

    events = []
    went = kcert.certify_model(ref, prod, INPUTS, max_replicates=100, settle=400, **OPTIONS,
                               on_event=lambda kind, detail: events.append((kind, detail)))
    assert went.provenance["settle_max_replicates"] == 400
    forward, backward = went.row("layers.0.norm2", "forward"), went.row("layers.0.norm2", "backward")
    assert forward.certificate.provenance.replicates == 100 and forward.verdict is Verdict.PASS  # decided: stays
    assert stable_report(forward.certificate) == stable_report(stopped.row("layers.0.norm2", "forward").certificate)
    assert backward.certificate.provenance.replicates > 100 and backward.verdict is not Verdict.WARN
    assert [d["direction"] for k, d in events if k == "settle"] == ["backward"]
    assert any(n.startswith(SETTLED) for n in backward.certificate.notes), backward.certificate.notes
    assert backward.certificate.provenance.resumed is None  # a temporary file: not a resume the user can repeat
    assert backward.went_on_from == 100 and forward.went_on_from is None
    assert f"went on from 100 to {backward.certificate.provenance.replicates} replicates" in backward.figure

    # the two steps a user takes without it: the run with a checkpoint, then its settle command (a resume)
    kcert.certify_model(ref, prod, INPUTS, max_replicates=100, settle=False, checkpoint=tmp_path / "run.npz",
                        **OPTIONS)
    resumed = kcert.certify_model(ref, prod, INPUTS, max_replicates=400, checkpoint=tmp_path / "run.npz",
                                  resume=True, **OPTIONS).row("layers.0.norm2", "backward").certificate
    assert _without_notes(backward.certificate) == _without_notes(resumed)
    assert [n.split(": ", 1)[1] for n in backward.certificate.notes if n.startswith("looks extended")] == \
        [n.split(": ", 1)[1].replace("the checkpoint's plan", "the row's first plan")
         for n in resumed.notes if n.startswith("looks extended")]


def test_a_settled_row_resumes_under_its_plan_and_the_default_lets_rows_go_on(tmp_path):
    ref, prod = _pair()
    options = dict(OPTIONS, modules=kcert.Modules(names=("layers.0.norm2",)))
    first = kcert.certify_model(ref, prod, INPUTS, max_replicates=100, settle=400, checkpoint=tmp_path / "run.npz",
                                **options)
    again = kcert.certify_model(ref, prod, INPUTS, max_replicates=100, settle=400, checkpoint=tmp_path / "run.npz",
                                resume=True, **options)
    for mine, theirs in zip(first.rows, again.rows):  # the settled file (written under 400) loads as it finished
        assert stable_report(mine.certificate)["notes"] == stable_report(theirs.certificate)["notes"]
        assert _without_notes(mine.certificate) == _without_notes(theirs.certificate)
    assert again.row("layers.0.norm2", "backward").certificate.provenance.resumed["checkpoint"].endswith(
        "run.001-layers.0.norm2-backward.npz")
    assert [r.went_on_from for r in again.rows] == [r.went_on_from for r in first.rows] == [None, 100]
    # by default (no cap given) rows go on to 4 times the cap: R = 25, looks 25..100, then on to 400
    default = kcert.certify_model(ref, prod, INPUTS, **{**OPTIONS, "replicates": 25})
    assert default.provenance["settle_max_replicates"] == 400


@pytest.mark.parametrize("settle, cap, match", [
    (500, 100, r"settle must be max_replicates \(100\) times a power of 2 above it \(e.g. 400\), got 500"),
    (100, 100, r"settle must be max_replicates \(100\) times a power of 2 above it"),
    ("16R", 100, r"settle must be True, False, None or a number of replicates, got '16R'"),
    (True, 300, r"rows held back cannot go on past max_replicates 300: it is not replicates \(100\) times a power of 2"),
])
def test_a_settle_cap_that_cannot_plan_looks_is_named(settle, cap, match):
    ref, prod = _pair()
    with pytest.raises(kcert.ParameterError, match=rf"certify_model\('model'\): {match}"):
        kcert.certify_model(ref, prod, INPUTS, max_replicates=cap, settle=settle, **OPTIONS)


def test_the_command_line_lets_rows_go_on_and_says_how_it_ran(tmp_path, capsys):
    from pathlib import Path

    import model_fixtures
    from kcert.cli import main

    path = tmp_path / "pairs.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(Path(model_fixtures.__file__).parent)!r})\nimport kcert\n"
                    "from model_fixtures import FusedGain, SEQ, VOCAB, swapped, tiny\n\nref = tiny()\n"
                    "fused = kcert.ModelPair('fused', ref, swapped(ref, 'layers.0.norm1', FusedGain),\n"
                    "                        {'input_ids': kcert.Integers((2, SEQ), 0, VOCAB)},\n"
                    "                        modules=kcert.Modules(names=('layers.0.norm2',)))\n")
    words = ["model", str(path), "-R", "100", "--max-replicates", "100", "--no-end-to-end", "--no-peer-rules"]
    assert main([*words, "--settle", "400", "--json", str(tmp_path / "on.json")]) == 0
    report = json.loads((tmp_path / "on.json").read_text())
    assert [r["verdict"] for r in report["rows"]] == ["PASS", "PASS"] and report["settle_command"] is None
    assert [r["went_on_from"] for r in report["rows"]] == [None, 100]
    assert report["provenance"]["settle_max_replicates"] == 400
    assert "--settle 400" in report["rows"][1]["certificate"]["provenance"]["command"]
    capsys.readouterr()
    assert main([*words, "--no-settle", "--json", str(tmp_path / "off.json")]) == 3
    report = json.loads((tmp_path / "off.json").read_text())
    assert "--no-settle" in report["rows"][1]["certificate"]["provenance"]["command"]
    # the rows left held back are named with the command: their modules, four times the last look, started over
    command = report["settle_command"]
    assert "--max-replicates 400 " in command and command.endswith("--prior-max-replicates 100"), command
    assert "--modules layers.0.norm2" in command and "settle" not in command.replace("kcert model", "")
    with pytest.raises(SystemExit, match="2"):  # a usage error, named before anything runs
        main([*words, "--settle", "300"])
    assert "--settle must be --max-replicates (100) times a power of 2 above it" in capsys.readouterr().err
