"""kcert.assert_certified and the pytest plugin: verdicts, failure text, the reproduce command, the
--kcert-* options and ini values, reports, and a plugin load that imports nothing heavy."""

import dataclasses
import json
import shlex
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest
import torch

import kcert
from kcert import assertions
from kcert.catalog import norms as N
from kcert.cli import main as kcert_main
from kcert.controls.norms import gemma_rms_norm_bf16_gain, gemma_rms_norm_folded
from kcert.report.stable import stable_dict

pytest_plugins = ["pytester"]

HEAVY = ("torch", "numpy", "scipy", "matplotlib", "rich")

# A case file that is also a test module: the Gemma (1 + w)-in-bf16 defect (a bias FAIL) and a correct
# fused rewrite, on a small slice of the catalogue's Gemma contract so that 100 replicates take ~0.2 s.
CASES = """
import kcert
from kcert.catalog import norms as N
from kcert.controls.norms import gemma_rms_norm_bf16_gain, gemma_rms_norm_folded

gemma_bf16 = N.GEMMA_RMSNORM.case("gemma_one_plus_w_bf16", gemma_rms_norm_bf16_gain, shape=(1, 16, 128))
gemma_fused = N.GEMMA_RMSNORM.case("gemma_fused", gemma_rms_norm_folded, shape=(1, 16, 128))


def test_fused(kcert_certify):
    cert = kcert_certify(gemma_fused)
    assert cert.verdict is kcert.Verdict.PASS


def test_bf16():
    kcert.assert_certified(gemma_bf16)
"""

OPTIONS = ("--kcert-seed", "2", "--kcert-replicates", "100", "--kcert-report-dir", "reports")


# Inner runs load kcert's plugin through its entry point but no other installed plugin: pytester drops
# the modules an inner run imports, and re-importing the other plugins cost ~2.3 s per run.
OTHER_PLUGINS = tuple(f"-pno:{ep.name}" for ep in entry_points(group="pytest11") if ep.name != "kcert.pytest_plugin")


def run(pytester, *args):
    return pytester.runpytest(*OTHER_PLUGINS, *args)


def small_gemma(prod, name):
    return N.GEMMA_RMSNORM.case(name, prod, shape=(1, 16, 128))


def opaque_case():
    """A reference real mode cannot follow (it leaves torch through NumPy): algebra and variance are
    SKIPPED, so a correct prod gets a WARN (needs review), deterministically."""

    def opaque_ref(x, w):
        return torch.from_numpy(N.gemma_rms_norm(x, w).float().numpy()).to(x.dtype)

    return dataclasses.replace(small_gemma(gemma_rms_norm_folded, "gemma_opaque_ref"), ref=opaque_ref)


def reproduced_part(report: dict) -> dict:
    """What a rerun must reproduce exactly: the verdicts, every bias and variance number, and the run's
    settings (not its date, wall time or the algebra gate's timings)."""
    provenance = {k: v for k, v in stable_dict(report)["provenance"].items() if k != "command"}
    gates = {name: gate["verdict"] for name, gate in report["gates"].items()}
    return {"verdict": report["verdict"], "gates": gates, "bias": report["gates"]["bias"],
            "variance": report["gates"]["variance"], "provenance": provenance}


# --- the plugin inside a pytest session -------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _torch_warmed_up():
    """pytester's in-process runs drop every module first imported inside them, and torch imports its
    compiler stack (which registers operator libraries, once per process) lazily on the first
    certification: certify once out here so that those modules outlive the inner runs. The same for rich
    and the renderers: a renderer first imported inside an inner run leaves its classes to a later
    command of the outer process, which rich then cannot render (the file run alone failed so)."""
    kcert.certify(small_gemma(gemma_rms_norm_folded, "warm_up"), replicates=2)
    import importlib

    for name in ("kcert.report.formats", "kcert.report.html", "kcert.report.jsonio", "kcert.report.terminal"):
        importlib.import_module(name)
    importlib.import_module("kcert.cli")._commands()


def test_options_become_defaults_and_reports_carry_them(pytester):
    pytester.makepyfile(test_gemma=CASES)
    result = run(pytester, "-k", "fused", *OPTIONS)
    result.assert_outcomes(passed=1, deselected=1)
    report = json.loads((pytester.path / "reports" / "gemma_fused.json").read_text())
    assert report["verdict"] == "PASS"
    provenance = report["provenance"]
    assert provenance["seed"] == 2
    # R = 100 planned (the variance gate's minimum for a PASS); it may double it up to 4 R while its
    # interval straddles a threshold
    assert provenance["max_replicates"] == 400 and provenance["replicates"] in (100, 200, 400)
    assert provenance["command"] == ("kcert certify test_gemma.py --case gemma_fused --replicates 100 "
                                     "--horizon 625000 --seed 2")
    result.stdout.fnmatch_lines([f"kcert: 1 certificate report(s) written to {pytester.path / 'reports'}"])


def test_failure_shows_diagnosis_and_a_command_that_reproduces_it(pytester):
    pytester.makepyfile(test_gemma=CASES)
    result = run(pytester, "-k", "bf16", *OPTIONS)
    result.assert_outcomes(failed=1, deselected=1)
    command = ("kcert certify test_gemma.py --case gemma_one_plus_w_bf16 --replicates 100 --horizon 625000 "
               "--seed 2")
    result.stdout.fnmatch_lines([
        "E *.NotCertified: kcert: case 'gemma_one_plus_w_bf16' is FAIL: blocks the migration",
        "E *bias FAIL: output: * of 128 buckets FAIL*worst [[]..., *] (sign_aligned): |prod| * |ref| by * ULP*",
        f"E *reproduce: {command}",
        "E *rerun: pytest test_gemma.py::test_bf16 --kcert-seed 2 --kcert-replicates 100",
        f"E *report: {pytester.path / 'reports' / 'gemma_one_plus_w_bf16.json'}",
        "*kcert certificate 'gemma_one_plus_w_bf16': FAIL*",  # the terminal rendering, under the traceback
        "*verdict FAIL*",
    ])
    # the traceback ends at the test's own line, not inside kcert
    assert "assertions.py" not in result.stdout.str()

    # the printed command, run as it is, gives the same certificate
    report = json.loads((pytester.path / "reports" / "gemma_one_plus_w_bf16.json").read_text())
    assert report["provenance"]["command"] == command
    words = shlex.split(command)
    assert words[0] == "kcert"
    assert kcert_main([*words[1:], "--json", "cli.json"]) == 1  # what the `kcert` command runs, in this folder
    again = json.loads((pytester.path / "cli.json").read_text())
    assert reproduced_part(again) == reproduced_part(report)


def test_ini_values_are_defaults_and_the_command_line_wins(pytester):
    pytester.makeini("[pytest]\nkcert_seed = 5\nkcert_replicates = 100\nkcert_report_dir = out\n")
    pytester.makepyfile(test_gemma=CASES)
    run(pytester, "-k", "fused").assert_outcomes(passed=1, deselected=1)
    provenance = json.loads((pytester.path / "out" / "gemma_fused.json").read_text())["provenance"]
    assert (provenance["seed"], provenance["max_replicates"]) == (5, 400)
    run(pytester, "-k", "fused", "--kcert-seed", "7").assert_outcomes(passed=1, deselected=1)
    provenance = json.loads((pytester.path / "out" / "gemma_fused.json").read_text())["provenance"]
    assert (provenance["seed"], provenance["max_replicates"]) == (7, 400)


def test_an_argument_in_the_test_wins_over_the_session_option(pytester):
    pytester.makepyfile(test_seed=CASES + textwrap.dedent("""
        def test_explicit():
            cert = kcert.assert_certified(gemma_fused, seed=11, replicates=100)
            assert (cert.provenance.seed, cert.provenance.max_replicates) == (11, 400)
    """))
    run(pytester, "-k", "explicit", *OPTIONS).assert_outcomes(passed=1, deselected=2)


@pytest.mark.parametrize("args, message", [
    (("--kcert-seed", "-1"), "--kcert-seed must be an integer >= 0, got '-1'"),
    (("--kcert-replicates", "1"), "--kcert-replicates must be an integer >= 2, got '1'"),
    (("--kcert-replicates", "many"), "--kcert-replicates must be an integer >= 2, got 'many'"),
    (("--kcert-horizon", "1"), "--kcert-horizon must be a finite number > 1, got '1'"),
])
def test_bad_options_are_usage_errors(pytester, args, message):
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_bad_ini_value_names_the_ini_option(pytester):
    pytester.makeini("[pytest]\nkcert_seed = zero\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option kcert_seed must be an integer >= 0, got 'zero'"])


def test_plugin_is_inert_without_options_and_restores_the_outer_session(pytester):
    outer = assertions.current_settings()
    pytester.makepyfile("""
        from kcert import assertions

        def test_defaults():
            s = assertions.current_settings()
            assert (s.seed, s.replicates, s.horizon, s.report_dir) == (None, None, None, None)
            assert (s.html, s.rerun) == (False, ())
    """)
    run(pytester).assert_outcomes(passed=1)
    assert assertions.current_settings() is outer
    # naming the plugin explicitly while the entry point has loaded it is not an error
    run(pytester, "-p", "kcert.pytest_plugin").assert_outcomes(passed=1)
    # and it can be switched off
    result = run(pytester, "-p", "no:kcert.pytest_plugin", "--kcert-seed", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --kcert-seed*"])


def test_marker_selects_certification_tests(pytester):
    pytester.makepyfile(test_gemma=CASES + textwrap.dedent("""
        import pytest

        @pytest.mark.kcert
        def test_marked():
            pass

        def test_other():
            pass
    """))
    result = run(pytester, "--collect-only", "-q", "-m", "kcert", "--strict-markers")
    result.stdout.fnmatch_lines(["test_gemma.py::test_fused", "test_gemma.py::test_marked", "*2/4 tests collected*"])


# --- loading the plugin imports nothing heavy -------------------------------------------------------


def test_plugin_module_imports_nothing_heavy():
    code = (
        "import sys\n"
        "import kcert.pytest_plugin, kcert.assertions\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "assert not heavy, f'imported {heavy}'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_pytest_loading_the_plugin_imports_nothing_heavy(pytester, monkeypatch):
    # only this plugin (-p), so that what is measured is its own load, with all its options in use
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(f"""
        import sys

        def test_light(request):
            assert request.config.pluginmanager.has_plugin("kcert.pytest_plugin")
            heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
            assert not heavy, heavy
    """)
    result = pytester.runpytest_subprocess("-p", "kcert.pytest_plugin", "--kcert-seed", "3", "--kcert-replicates",
                                           "64", "--kcert-report-dir", "reports", "--kcert-html")
    result.assert_outcomes(passed=1)


def test_entry_point_names_the_plugin_module():
    found = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert found.get("kcert.pytest_plugin") == "kcert.pytest_plugin"


# --- assert_certified called directly -----------------------------------------------------------


def test_returns_the_certificate_of_a_pass(tmp_path):
    case = small_gemma(gemma_rms_norm_folded, "gemma_fused")
    cert = kcert.assert_certified(case, replicates=100, seed=1, report_dir=tmp_path / "new" / "dir", html=True)
    assert isinstance(cert, kcert.Certificate) and cert.verdict is kcert.Verdict.PASS
    assert "gemma_fused" in (tmp_path / "new" / "dir" / "gemma_fused.html").read_text()
    kcert.assert_certified(case, replicates=100, seed=2, report_dir=tmp_path / "new" / "dir")
    # two certificates of one case in one session do not overwrite each other
    seeds = {p.name: json.loads(p.read_text())["provenance"]["seed"] for p in (tmp_path / "new" / "dir").glob("*.json")}
    assert seeds == {"gemma_fused.json": 1, "gemma_fused-2.json": 2}


def test_fail_of_a_case_built_in_the_test_gives_the_python_call(request):
    with pytest.raises(kcert.NotCertified) as info:
        kcert.assert_certified(small_gemma(gemma_rms_norm_bf16_gain, "gemma bf16"), replicates=64, seed=2,
                               horizon=6.25e5)
    assert isinstance(info.value, AssertionError)
    cert = info.value.certificate
    assert cert.verdict is kcert.Verdict.FAIL and cert.gates["bias"] is kcert.Verdict.FAIL
    assert info.value.reports == ()
    message = str(info.value)
    assert message.startswith("kcert: case 'gemma bf16' is FAIL: blocks the migration\n  bias FAIL: ")
    call = "kcert.certify(<case 'gemma bf16'>, replicates=64, horizon=625000, seed=2)"
    assert f"  reproduce: {call}" in message.splitlines()
    assert cert.provenance.command == call
    rerun = f"  rerun: {shlex.join(['pytest', request.node.nodeid])}"
    assert any(line.startswith(rerun) for line in message.splitlines())


def test_warn_fails_unless_allowed_and_then_warns():
    case = opaque_case()
    with pytest.raises(kcert.NotCertified) as info:
        kcert.assert_certified(case, replicates=32)
    assert info.value.certificate.verdict is kcert.Verdict.WARN
    message = str(info.value)
    assert "algebra SKIPPED: " in message and "variance SKIPPED: no float64 oracle" in message
    assert "pass allow_warn=True to accept it" in message
    with pytest.warns(assertions.CertificationWarning, match="'gemma_opaque_ref' is WARN: needs a human numerical"):
        cert = kcert.assert_certified(case, replicates=32, allow_warn=True)
    assert cert.verdict is kcert.Verdict.WARN


def test_custom_thresholds_are_spelled_in_the_python_call():
    case = small_gemma(gemma_rms_norm_bf16_gain, "gemma_bf16")
    with pytest.raises(kcert.NotCertified) as info:
        kcert.assert_certified(case, replicates=64, seed=2, bias_thresholds=kcert.BiasThresholds(z_star=6.0))
    assert "BiasThresholds(z_star=6.0" in info.value.certificate.provenance.command


@pytest.mark.parametrize("kwargs, message", [
    ({"case": "gemma"}, "case must be a kcert.Case, got str"),
    ({"allow_warn": "yes"}, "allow_warn must be True or False, got 'yes'"),
    ({"html": 1}, "html must be True or False, got 1"),
    ({"report_dir": 3}, "report_dir must be a folder path or None, got 3"),
    ({"casefile": "no/such/cases.py"}, "casefile must be the path of the case file defining the case"),
    ({"replicates": 1}, "replicates must be an integer >= 2, got 1"),
    ({"horizon": "long"}, "horizon must be a number > 1, got 'long'"),
])
def test_bad_arguments_name_the_parameter(kwargs, message):
    kwargs = {"case": small_gemma(gemma_rms_norm_folded, "g"), **kwargs}
    with pytest.raises(kcert.ParameterError, match=message.replace("(", r"\(")):
        kcert.assert_certified(**kwargs)


def test_report_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(kcert.ParameterError, match="report_dir .*taken' exists and is not a folder"):
        kcert.assert_certified(small_gemma(gemma_rms_norm_folded, "g"), replicates=16, report_dir=tmp_path / "taken")
