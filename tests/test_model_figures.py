"""A module row's figure says when its variance gate WARNs for lack of evidence (docs/model.md, "Reports"): U under
the PASS line held back, or an interval still across a line, which more replicates settle, is not a tail found
heavier; ``kcert model`` prints the command that lets those rows' looks go on."""

import dataclasses
import json

import numpy as np
import pytest
import torch

import kcert
from kcert.gates.variance import judge_errors
from kcert.model.results import ModuleRow, variance_held_back, variance_undecided
from kcert.stats.thresholds import VarianceThresholds
from kcert.verdict import Verdict

T = 6.25e5


@pytest.fixture(scope="module")
def base():
    """A certificate to carry the variance results under test (its own are replaced): not a control."""
    case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2, inputs={"x": kcert.Gaussian((32,))},
                      dtype=torch.bfloat16)
    return kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False)


def _judged(seed: int, prod_scale: float, output: str = "output"):
    rng = np.random.default_rng(seed)
    b = rng.exponential(1.0, 1024) * 3
    a = rng.exponential(1.0, 1024) * 3 * prod_scale
    return judge_errors(a, b, T, VarianceThresholds(), output=output)


def _row(base, *variance) -> ModuleRow:
    # the looks of the judged errors (1024 replicates) under the plan of `-R 256`, cap 1024
    cert = dataclasses.replace(base, variance=tuple(variance),
                               provenance=dataclasses.replace(base.provenance, max_replicates=1024))
    return ModuleRow(module="layer", kind="Block", prod_kind="Block", direction="backward", order=0, certificate=cert)


def test_a_warn_held_back_for_evidence_says_so_and_a_heavier_tail_does_not(base):
    held = _judged(1, 1.0)  # two independent draws of one law: U under 2, one shape per side above it
    assert held.verdict is Verdict.WARN and held.interval.upper <= 2 < held.interval.separate_upper
    row = _row(base, held)
    assert row.verdict is Verdict.WARN and row.deciding_gate == "variance"
    assert variance_held_back(row.certificate) == 1024 and variance_undecided(row.certificate) == 1024
    assert f"U {held.interval.upper:.3g} (held back at 1024 replicates: more decide)" in row.figure

    # prod's errors three times ref's: U above the line, but the interval still reaches under it: undecided
    wide = _judged(1, 3.0)
    assert wide.verdict is Verdict.WARN and wide.interval.lower <= 2 < wide.interval.upper
    assert variance_held_back(_row(base, wide).certificate) is None
    assert variance_undecided(_row(base, wide).certificate) == 1024
    assert f"U {wide.interval.upper:.3g} (undecided at 1024 replicates: more decide)" in _row(base, wide).figure

    heavier = _judged(1, 5.0)  # five times: the interval between the lines, a finding more data would not change
    assert heavier.verdict is Verdict.WARN and 2 < heavier.interval.lower and heavier.interval.upper < 10
    assert variance_held_back(_row(base, heavier).certificate) is None
    assert variance_undecided(_row(base, heavier).certificate) is None
    assert "more decide" not in _row(base, heavier).figure
    # one output held back and another decided above the line: the row's WARN is not only a lack of evidence
    mixed = _row(base, held, dataclasses.replace(heavier, output="other")).certificate
    assert variance_held_back(mixed) is None and variance_undecided(mixed) is None
    assert variance_undecided(_row(base, held, dataclasses.replace(wide, output="other")).certificate) == 1024


def test_a_pass_row_has_no_hold_back(base):
    row = _row(base, *base.variance)
    assert row.verdict is Verdict.PASS and variance_held_back(row.certificate) is None
    assert "held back" not in row.figure and variance_undecided(row.certificate) is None


def test_the_command_says_how_to_settle_the_rows_held_back(base, tmp_path, capsys, monkeypatch):
    """``kcert model`` names the rows WARNing only for lack of evidence and the command that lets their looks go
    on (their modules, four times the last look); nothing when no row is held back."""
    import kcert.model
    from kcert.cli import main
    from kcert.model.results import ModelCertificate
    from model_fixtures import write_defect_pair_file

    path = write_defect_pair_file(tmp_path / "pairs.py", ("layers.1",))
    held, wide, heavier = _judged(1, 1.0), _judged(1, 3.0), _judged(1, 5.0)
    biased = dataclasses.replace(_row(base, held), module="biased")  # held back too, but its bias gate WARNs
    biased = dataclasses.replace(biased, certificate=dataclasses.replace(
        biased.certificate, bias=tuple(dataclasses.replace(b, verdict=Verdict.WARN) for b in base.bias)))
    assert biased.certificate.gates["bias"] is Verdict.WARN and "held back" in biased.figure
    rows = {"held": (_row(base, held), dataclasses.replace(_row(base, heavier), module="other"), biased,
                     dataclasses.replace(_row(base, wide), module="wide")),
            "none": (_row(base, heavier), biased)}
    for case, expected in (("held", True), ("none", False)):
        monkeypatch.setattr(kcert.model, "certify_model",
                            lambda *a, _rows=rows[case], **k: ModelCertificate(k["name"], _rows))
        main(["model", str(path), "-R", "256", "--no-peer-rules", "--json", str(tmp_path / f"{case}.json")])
        err = capsys.readouterr().err
        report = json.loads((tmp_path / f"{case}.json").read_text())
        assert [r["variance_held_back_at"] for r in report["rows"]] == ([1024, None, 1024, None] if expected else
                                                                        [None, 1024])
        assert [r["variance_undecided_at"] for r in report["rows"]] == ([1024, None, 1024, 1024] if expected else
                                                                        [None, 1024])
        assert ("only for lack of evidence" in err) == expected, err
        if expected:
            assert "(layer backward, wide backward: the variance gate's looks ran out" in err, err
            assert "other" not in err and "biased" not in err
            assert "--modules layer --modules wide" in err and "--max-replicates 4096" in err and "--case defect" in err
            assert "--no-end-to-end" in err  # the end-to-end row was not held back: not run again
            assert "--resume" not in err and "with --checkpoint, a rerun would continue" in err
            # started over, the rows' draws are judged again: the command names this run's cap for the level
            assert "--prior-max-replicates 1024" in err
        # the JSON carries the command a CI job can run as it is printed (null when there is none)
        command = report["settle_command"]
        assert (command is not None) == expected and (command is None or err.rstrip().endswith(command))
    # with a checkpoint, the command continues the rows from their files (one pair: the file named itself)
    monkeypatch.setattr(kcert.model, "certify_model", lambda *a, **k: ModelCertificate(k["name"], rows["held"]))
    main(["model", str(path), "-R", "256", "--no-peer-rules", "--checkpoint", str(tmp_path / "ck.npz")])
    err = capsys.readouterr().err
    assert f"--checkpoint {tmp_path / 'ck.npz'} --resume" in err and "--max-replicates 4096" in err, err
    assert "--prior-max-replicates" not in err  # the checkpoint records the plan


def test_kcert_certify_prints_the_command_for_a_case_warning_for_lack_of_evidence(base, tmp_path):
    """The same rule for a case (docs/scaling.md, "A raised cap goes on"): four times the last look, and the
    checkpoint with --resume, or without one --prior-max-replicates this run's cap; nothing for a WARN that is a
    finding, or when another gate does not PASS."""
    import argparse

    from kcert.commands.certify import add_arguments, settle_hint

    def args(*words):
        p = argparse.ArgumentParser()
        add_arguments(p)
        return p.parse_args(["cases.py", *words])

    held = dataclasses.replace(base, variance=(_judged(1, 1.0),))
    line = settle_hint(args("-R", "256"), "cases.py", held, 1)
    assert "case 'half' WARNs only for lack of evidence at its last look (1024 replicates" in line
    assert line.endswith("kcert certify cases.py --case half --replicates 256 --horizon 625000 --seed 0 "
                         "--max-replicates 4096 --prior-max-replicates 1024"), line
    line = settle_hint(args("-R", "256", "--checkpoint", str(tmp_path / "run.npz")), "cases.py", held, 2)
    assert line.endswith(f"--max-replicates 4096 --checkpoint {tmp_path / 'run.half.npz'} --resume"), line
    assert "--prior-max-replicates" not in line
    assert settle_hint(args(), "cases.py", dataclasses.replace(base, variance=(_judged(1, 5.0),)), 1) is None
    biased = dataclasses.replace(held, bias=tuple(dataclasses.replace(b, verdict=Verdict.WARN) for b in held.bias))
    assert settle_hint(args(), "cases.py", biased, 1) is None
    assert settle_hint(args(), "cases.py", base, 1) is None  # a PASS
