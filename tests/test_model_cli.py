"""``kcert model FILE`` (docs/model.md): the table, --json (kcert.model/1) and --html written, the exit code of
a FAIL, --export-case round trip through ``kcert certify``, a model file that defines no pair, and pairs listed
in a module-level list."""

import json
from pathlib import Path

import pytest

from kcert.cli import main
from model_fixtures import write_defect_pair_file


def _file(tmp_path) -> Path:
    return write_defect_pair_file(tmp_path / "pairs.py", ("layers.1", "layers.1.norm*"))


def test_the_command_reports_the_localized_module_and_exits_1(tmp_path, capsys):
    path = _file(tmp_path)
    code = main(["model", str(path), "-R", "64", "--no-backward", "--no-end-to-end", "--no-peer-rules", "--json",
                 str(tmp_path / "out.json"), "--html", str(tmp_path / "out.html")])
    out = capsys.readouterr().out
    assert code == 1
    assert "localized: layers.1.norm2 (Norm, forward)" in out
    assert "includes layers.1.norm2" in out  # the block FAILs through its norm, and says so
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["schema"] == "kcert.model/1"
    assert report["first_failure"] == {"module": "layers.1.norm2", "direction": "forward", "kind": "Norm"}
    rows = {(r["module"], r["direction"]): r for r in report["rows"]}
    assert rows[("layers.1.norm2", "forward")]["verdict"] == "FAIL"
    assert rows[("layers.1", "forward")]["includes"] == ["layers.1.norm2"]
    assert rows[("layers.1.norm2", "forward")]["certificate"]["schema"] == "kcert.certificate/1"
    # a row whose bias gate FAILs a bucket quotes its ratio to ref's own bias profile, in the figure and the JSON
    for r in report["rows"]:
        assert (r["ref_profile_ratio"] is None) == ("ref's profile" not in r["figure"]), r
        assert (r["ref_profile_swap_p"] is None) == (r["ref_profile_ratio"] is None), r
        assert r["verdict"] == "FAIL" or r["ref_profile_ratio"] is None, r
    page = (tmp_path / "out.html").read_text()
    assert "<h3>forward</h3>" in page and "layers.1.norm2" in page


def test_an_exported_case_fails_under_kcert_certify(tmp_path, capsys):
    path = _file(tmp_path)
    out = tmp_path / "norm2_case.py"
    assert main(["model", str(path), "--no-backward", "--export-case", "layers.1.norm2", str(out)]) == 0
    assert "kcert certify" in capsys.readouterr().err
    code = main(["certify", str(out), "-R", "64", "--quiet", "--no-peer-rules"])
    text = capsys.readouterr().out
    assert code == 1, text
    assert "FAIL  defect:layers.1.norm2" in text


def test_export_of_an_unknown_module_and_a_file_without_pairs_are_errors(tmp_path, capsys):
    path = _file(tmp_path)
    assert main(["model", str(path), "--export-case", "layers.9", str(tmp_path / "x.py")]) == 2
    assert "has no module 'layers.9'" in capsys.readouterr().err
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert main(["model", str(empty)]) == 2
    assert "defines no kcert.ModelPair" in capsys.readouterr().err


def test_pairs_in_a_module_level_list_are_found_once(tmp_path):
    from kcert.model.pair import load_pairs

    text = _file(tmp_path).read_text()
    listed = tmp_path / "listed.py"  # the pair only inside a list, as a case file's cases = [...]
    listed.write_text(text.replace("defect = kcert.ModelPair(", "pairs = [kcert.ModelPair(").rstrip() + "]\n")
    assert [p.name for p in load_pairs(str(listed))] == ["defect"]
    both = tmp_path / "both.py"  # named and listed (twice): one pair
    both.write_text(text + "pairs = [defect, defect]\n")
    assert [p.name for p in load_pairs(str(both))] == ["defect"]


def test_a_pair_that_stops_unexpectedly_is_one_line_exit_2_and_ctrl_c_is_130(tmp_path, capsys, monkeypatch):
    """The command runs each pair through the shared command run (commands.session.CommandRun): an exception
    kcert did not expect is one line and exit 2 (never a traceback, never exit 1); Ctrl-C is 130 and names
    the pair and what was saved."""
    import kcert.model

    path = _file(tmp_path)

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(kcert.model, "certify_model", broken)
    assert main(["model", str(path), "-R", "8"]) == 2
    err = capsys.readouterr().err
    assert "case 'defect': kcert stopped on an unexpected ZeroDivisionError: a bug" in err
    assert "Traceback" not in err

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(kcert.model, "certify_model", interrupted)
    assert main(["model", str(path), "-R", "8", "--checkpoint", str(tmp_path / "m.npz")]) == 130
    err = capsys.readouterr().err
    assert "interrupted in pair 'defect'" in err and "continue with --resume" in err


def test_max_time_bounds_the_whole_command_and_exits_124(tmp_path, capsys):
    path = _file(tmp_path)
    code = main(["model", str(path), "-R", "64", "--no-peer-rules", "--max-time", "0.001", "--checkpoint",
                 str(tmp_path / "m.npz")])
    err = capsys.readouterr().err
    assert code == 124, err
    assert "--max-time" in err and "reached in pair 'defect' before row" in err and "(0 of " in err
    assert "continue with --resume" in err


def test_padding_options_reach_certify_model_and_export_refuses_them(tmp_path, capsys, monkeypatch):
    import kcert.model

    path = _file(tmp_path)
    seen = []

    def capture(*args, **kwargs):
        seen.append(kwargs.get("padding", "default"))
        raise KeyboardInterrupt  # stop here: only the options are under test

    monkeypatch.setattr(kcert.model, "certify_model", capture)
    for flags, expected in (([], "default"), (["--no-padding"], None), (["--padding", "pad_mask"], "pad_mask")):
        assert main(["model", str(path), "-R", "8", *flags]) == 130
        assert seen[-1] == expected
    capsys.readouterr()
    with pytest.raises(SystemExit) as usage:  # one or the other, as argparse says
        main(["model", str(path), "--padding", "x", "--no-padding"])
    assert usage.value.code == 2
    assert main(["model", str(path), "--no-padding", "--export-case", "layers.1.norm2", str(tmp_path / "c.py")]) == 2
    assert "with the pair's own padding" in capsys.readouterr().err


def test_shard_option_reaches_certify_model(tmp_path, capsys, monkeypatch):
    import kcert.model

    path = _file(tmp_path)
    seen = []

    def capture(*args, **kwargs):
        seen.append(kwargs["shard"])
        raise KeyboardInterrupt  # stop here: only the option is under test

    monkeypatch.setattr(kcert.model, "certify_model", capture)
    for flags, expected in (([], "replicates"), (["--shard", "rows"], "rows"), (["--shard", "replicates"], "replicates")):
        assert main(["model", str(path), "-R", "8", *flags]) == 130
        assert seen[-1] == expected
    capsys.readouterr()
    with pytest.raises(SystemExit) as usage:
        main(["model", str(path), "--shard", "auto"])
    assert usage.value.code == 2
