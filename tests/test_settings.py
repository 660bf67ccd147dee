"""The settings source (kcert.settings): each setting's default, rule, flag and reproduce rule, and what is
generated from it (the command line's options, their pre-import check, the reproduce command, the library
call)."""

import argparse
import dataclasses
import shlex

import pytest
import torch

import kcert
from kcert import settings
from kcert.commands import options
from kcert.commands.certify import add_arguments, reproduce_command
from kcert.errors import ParameterError
from kcert.reproduce import library_call
from kcert.settings import Settings


def _parser():
    p = argparse.ArgumentParser(prog="kcert certify")
    add_arguments(p)
    return p


def _other(name, value):
    """A valid value other than ``value`` for setting ``name``."""
    flag = settings.FLAGS.get(name)
    if flag is not None and flag.kind in ("toggle", "switch"):
        return not value if value is not None else True
    return {"replicates": 96, "horizon": 1234567.8, "seed": 5, "device": "cpu:0", "max_replicates": 500,
            "batch_memory": 1 << 22, "checkpoint_every": 128, "checkpoint_seconds": 60.0, "max_time": 30.0,
            "algebra_points": 3, "prior_max_replicates": 2048}.get(name)


def test_every_flag_of_a_setting_is_an_option_with_the_settings_default():
    parsed = _parser().parse_args(["cases.py"])
    for name, flag in settings.FLAGS.items():
        assert hasattr(parsed, name), name
        assert getattr(parsed, name) == settings.DEFAULTS[name], name
        assert flag.name in _parser().format_help(), flag.name


def test_the_reproduce_command_parses_back_to_the_same_settings():
    # every setting the command line reproduces, set to another value, is written so that parsing the
    # reproduce command gives it back (a flag written wrongly, or not at all, fails here)
    reproduced = [n for n in settings.FLAGS if n in settings.REPRODUCED]
    assert {"algebra_proof", "shapes", "accept_untested_algebra", "peer_rules", "adequacy", "batch_memory"} <= \
        set(reproduced)
    for name in reproduced:
        args = _parser().parse_args(["cases.py"])
        setattr(args, name, _other(name, getattr(args, name)))
        command = shlex.split(reproduce_command(args, "cases.py", "c"))
        assert command[:5] == ["kcert", "certify", "cases.py", "--case", "c"]
        again = _parser().parse_args(command[2:])
        assert getattr(again, name) == getattr(args, name), (name, command)


def test_the_library_call_names_what_changes_the_certificate():
    for f in settings.FIELDS:
        value = _other(f.name, f.default)
        if f.metadata["reproduce"] != "both" or value is None:
            continue
        s = Settings.build(**{f.name: value}).check()
        assert f"{f.name}={value!r}" in library_call("c", s), f.name
    s = Settings.build(batch_memory=1 << 22, checkpoint_every=64).check()  # the run, not the certificate
    assert library_call("c", s) == "kcert.certify(<c>, replicates=1024, horizon=625000, seed=0)"


def test_build_by_keyword():
    base = Settings(replicates=64, seed=3)
    assert Settings.build(base, seed=4) == dataclasses.replace(base, seed=4)
    assert Settings.build(256).replicates == 256  # an integer in the settings' place is the replicates
    with pytest.raises(ParameterError, match="unknown setting.*replicate.*the settings are replicates"):
        Settings.build(replicate=64)
    with pytest.raises(ParameterError, match="replicates given twice"):
        Settings.build(64, replicates=128)
    with pytest.raises(ParameterError, match="settings must be a kcert.Settings"):
        Settings.build("fast")


def test_one_rule_names_the_setting_as_each_caller_spells_it():
    with pytest.raises(ParameterError, match="^checkpoint_every must be an integer >= 1, got 0$"):
        Settings(checkpoint_every=0).check()
    args = _parser().parse_args(["cases.py", "--checkpoint-every", "0"])
    assert options.check_run_options(args) == "--checkpoint-every must be an integer >= 1, got 0"
    args = _parser().parse_args(["cases.py", "-R", "8", "--max-replicates", "4"])
    assert options.check_run_options(args) == "--max-replicates must be an integer >= 8, got 4"
    with pytest.raises(ParameterError, match="^max_replicates must be an integer >= 8, got 4$"):
        Settings(replicates=8, max_replicates=4).check()


def test_an_earlier_cap_must_plan_the_first_looks_of_this_run():
    """prior_max_replicates names an earlier run's cap on the same draws: R times a power of 2, below this
    run's cap (its looks are then this run's first ones: docs/method.md, "Stopping")."""
    assert Settings(replicates=64, max_replicates=1024, prior_max_replicates=256).check().prior_max_replicates == 256
    for bad, why in ((1024, "to below max_replicates"), (32, "from replicates"), (192, "not replicates .64. times a "
                                                                                   "power of 2"), (True, "got True")):
        with pytest.raises(ParameterError, match=f"^prior_max_replicates.*{why}"):
            Settings(replicates=64, max_replicates=1024, prior_max_replicates=bad).check()
    args = _parser().parse_args(["cases.py", "-R", "64", "--prior-max-replicates", "192", "--max-replicates", "1024"])
    assert options.check_run_options(args).startswith("--prior-max-replicates 192 is not --replicates (64) times")
    args = _parser().parse_args(["cases.py", "-R", "64", "--prior-max-replicates", "256"])
    assert "to below --max-replicates (256)" in options.check_run_options(args)


def test_certify_takes_settings_and_overrides():
    case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
                      inputs={"x": kcert.Gaussian((16,))}, dtype=torch.bfloat16)
    s = Settings(replicates=32, peer_rules=False, algebra_proof=False)
    a = kcert.certify(case, s, seed=2)
    b = kcert.certify(case, replicates=32, peer_rules=False, algebra_proof=False, seed=2)
    assert a.provenance.command == b.provenance.command
    assert a.provenance.command == ("kcert.certify(<half>, replicates=32, horizon=625000, seed=2, "
                                    "algebra_proof=False, peer_rules=False)")
    assert [r.verdict for r in a.bias] == [r.verdict for r in b.bias]
