"""The command line: exit codes, reports, and every input error message."""

import json
import subprocess
import sys
import textwrap

import pytest

from kcert.cli import main

GOOD = '''
import torch, kcert
def ref(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
def prod(x, w):
    return torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), w.float(), eps=1e-6).to(x.dtype)
case = kcert.Case(name="rms", ref=ref, prod=prod, inputs={"x": kcert.Gaussian((4, 32), shift=0.1)},
                  weights={"w": kcert.Gaussian((32,), shift=1.0, std=0.1)})
'''


def write(tmp_path, text, name="cases.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_pass_exit_zero_and_json_schema(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    out_json = tmp_path / "cert.json"
    code, out, err = run(["certify", path, "--replicates", "100", "--seed", "7", "--json", str(out_json),
                          "--html", str(tmp_path / "cert.html")], capsys)
    assert code == 0, out + err
    report = json.loads(out_json.read_text())
    assert report["schema"] == "kcert.certificate/1"
    assert report["case"] == "rms" and report["verdict"] == "PASS"
    assert set(report["gates"]) == {"algebra", "bias", "variance"}
    assert report["provenance"]["seed"] == 7
    assert report["provenance"]["command"].startswith("kcert certify")
    assert "--seed 7" in report["provenance"]["command"]
    for key in ("torch", "numpy", "scipy", "kcert", "triton", "transformers"):
        assert key in report["provenance"]["environment"]["versions"]
    assert "cpu" in report["provenance"]["environment"]
    assert "reproduce: kcert certify" in out
    html = (tmp_path / "cert.html").read_text()
    assert "<html>" in html and "rms" in html and "PASS" in html


def test_json_to_stdout_keeps_stdout_pure(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    code, out, err = run(["certify", path, "-R", "100", "--json", "-"], capsys)
    assert code == 0
    assert json.loads(out)["verdict"] == "PASS"
    assert "reproduce:" in err


def test_fail_exit_one_and_review_exit_three(tmp_path, capsys):
    path = write(tmp_path, GOOD + '''
def bad(x, w):
    return (ref(x, w).float() * 1.02).to(x.dtype)
def opaque(x, w):
    if x.dtype is not torch.bfloat16:  # one precision only: the precision ladder cannot run either
        raise TypeError("bf16 only")
    y = ref(x, w).float()
    return (y.view(torch.int32) + 0).view(torch.float32).to(x.dtype)
fail = kcert.Case(name="gain", ref=ref, prod=bad, inputs={"x": kcert.Gaussian((4, 32), shift=0.1)},
                  weights={"w": kcert.Gaussian((32,), shift=1.0, std=0.1)})
skip = kcert.Case(name="opaque", ref=ref, prod=opaque, inputs={"x": kcert.Gaussian((4, 32), shift=0.1)},
                  weights={"w": kcert.Gaussian((32,), shift=1.0, std=0.1)})
''')
    assert run(["certify", path, "--case", "gain", "-R", "32"], capsys)[0] == 1
    code, out, _ = run(["certify", path, "--case", "opaque", "-R", "32"], capsys)
    assert code == 3 and "SKIPPED" in out
    code, out, _ = run(["certify", path, "-R", "32", "--json", str(tmp_path / "all.json")], capsys)
    assert code == 1
    assert [c["case"] for c in json.loads((tmp_path / "all.json").read_text())] == ["rms", "gain", "opaque"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("import nonexistent_module_xyz\n", "does not import: ModuleNotFoundError"),
        ("x = 1\n", "defines no kcert.Case"),
        ("raise RuntimeError('boom')\n", "does not import: RuntimeError: boom"),
        ("import kcert\nc = kcert.Case(name='c', ref=1, prod=len, inputs={})\n", "ref must be callable"),
        ("import kcert, torch\nc = kcert.Case(name='c', ref=len, prod=len, inputs={'x': kcert.Gaussian((2,))},"
         " dtype=torch.int32)\n", "dtype must be one of"),
        ("import kcert\nc = kcert.Case(name='c', ref=len, prod=len, inputs={'x': kcert.Gaussian((2,), std=0)})\n",
         "std must be a finite number > 0"),
    ],
)
def test_case_file_errors_exit_two_with_a_clear_message(tmp_path, capsys, text, message):
    code, out, err = run(["certify", write(tmp_path, text)], capsys)
    assert code == 2
    assert message in " ".join(err.split())
    assert "Traceback" not in err


def test_missing_file_unknown_case_and_bad_parameters(tmp_path, capsys):
    code, _, err = run(["certify", str(tmp_path / "nope.py")], capsys)
    assert code == 2 and "does not exist" in err
    path = write(tmp_path, GOOD)
    code, _, err = run(["certify", path, "--case", "other"], capsys)
    assert code == 2 and "no case named 'other'" in err and "it defines: rms" in err
    for flag, value, message in (("--replicates", "1", "--replicates must be an integer >= 2, got 1"),
                                 ("--horizon", "0.5", "--horizon must be a finite number > 1, got 0.5")):
        with pytest.raises(SystemExit) as exc:
            main(["certify", path, flag, value])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and message in err and "usage: kcert certify" in err
    code, _, err = run(["certify", path, "--device", "cuda:0"], capsys)
    assert code == 2 and ("CUDA is not available" in err or "device" in err)
    code, _, err = run(["certify", path, "--json", str(tmp_path / "missing" / "x.json")], capsys)
    assert code == 2 and "does not exist" in err
    with pytest.raises(SystemExit) as exc:
        main(["certify"])
    assert exc.value.code == 2


KERNEL_ERRORS = '''
import torch, kcert
def ref(x):
    return x * 2
def wrong_shape(x):
    return (x * 2)[:1]
def wrong_count(x):
    return x * 2, x
def raises(x):
    if float(x.float().sum()) > -1e9:
        raise ValueError("kernel exploded")
    return x
P = {"x": kcert.Gaussian((4, 8))}
shape = kcert.Case(name="shape", ref=ref, prod=wrong_shape, inputs=P)
count = kcert.Case(name="count", ref=ref, prod=wrong_count, inputs=P)
boom = kcert.Case(name="boom", ref=ref, prod=raises, inputs=P)
'''


@pytest.mark.parametrize(
    "case, message",
    [
        ("shape", "output of prod has shape (1, 8), expected (4, 8)"),
        ("count", "ref returns 1 outputs but prod returns 2"),
        ("boom", "prod raised ValueError: kernel exploded"),
    ],
)
def test_kernel_errors_name_case_output_replicate_and_seed(tmp_path, capsys, case, message):
    code, _, err = run(["certify", write(tmp_path, KERNEL_ERRORS), "--case", case, "-R", "8", "--seed", "11"], capsys)
    flat = " ".join(err.split())
    assert code == 2
    assert message in flat
    assert f"case '{case}', replicate 0 (seed 11, replicate seed" in flat


def test_an_error_in_one_case_keeps_the_others_reports(tmp_path, capsys):
    path = write(tmp_path, KERNEL_ERRORS + "\nok = kcert.Case(name='ok', ref=ref, prod=lambda x: x + x, inputs=P)\n")
    out_json = tmp_path / "r.json"
    code, _, err = run(["certify", path, "--case", "boom", "--case", "ok", "-R", "8", "--json", str(out_json)], capsys)
    assert code == 2 and "kernel exploded" in err
    # two cases ran: an array (docs/json-schema.md), holding the one that ended with a certificate
    assert [c["case"] for c in json.loads(out_json.read_text())] == ["ok"]


def test_demo_through_the_installed_command_line(tmp_path):
    out_json = tmp_path / "demo.json"
    proc = subprocess.run([sys.executable, "-m", "kcert", "demo", "--replicates", "512", "--json", str(out_json)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "both verdicts as expected" in proc.stdout
    reports = {r["case"]: r for r in json.loads(out_json.read_text())}
    assert reports["gemma_rmsnorm_correct"]["verdict"] == "PASS"
    bad = reports["gemma_rmsnorm_bf16_gain"]
    assert bad["verdict"] == "FAIL"
    assert bad["gates"]["bias"]["verdict"] == "FAIL" and bad["gates"]["variance"]["verdict"] != "FAIL"


def test_json_report_has_every_documented_field(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    code, out, _ = run(["certify", path, "-R", "64", "--json", "-"], capsys)
    r = json.loads(out)
    assert set(r) >= {"schema", "case", "description", "verdict", "gates", "outputs", "provenance"}
    a = r["gates"]["algebra"]
    assert set(a) >= {"verdict", "reason", "level", "points", "wide_points", "ref_side", "prod_side", "outputs"}
    b = r["gates"]["bias"]["outputs"][0]
    assert set(b) >= {"output", "dtype", "verdict", "replicates", "horizon", "thresholds", "familywise_error_bound",
                      "min_detectable_effect", "horizon_covered", "replicates_for_horizon", "attribution",
                      "nonfinite", "buckets", "statistics", "findings", "diagnostics"}
    assert set(b["statistics"]) == {"raw", "sign_aligned"}
    assert len(b["statistics"]["raw"]["z"]) == b["buckets"]["count"] == 32
    v = r["gates"]["variance"]["outputs"][0]
    assert set(v) >= {"output", "verdict", "reason", "thresholds", "replicates", "looks", "k", "errors", "tail",
                      "observed", "rare_events", "lattice_spacing"}
    assert len(v["k"]["values"]) == v["replicates"] == len(v["errors"]["prod"])
    rare = v["rare_events"]  # the rule of three: the rate R replicates would show with 95 % confidence
    assert rare["replicates"] == v["replicates"] and abs(rare["rate"] - (1 - 0.05 ** (1 / v["replicates"]))) < 1e-12
    p = r["provenance"]
    assert set(p) >= {"seed", "replicates", "horizon", "dtype", "device", "probes", "command", "environment", "date",
                      "wall_time_s"}
    assert p["probes"]["inputs"]["x"] == {"kind": "Gaussian", "shape": [4, 32], "shift": 0.1, "std": 1.0}
    assert r["outputs"][0]["shape"] == [4, 32]


def test_nonfinite_numbers_are_strings_in_strict_json(tmp_path, capsys):
    path = write(tmp_path, '''
import torch, kcert
def prod(x):
    y = x * 2
    y[0] = float("inf")
    return y
case = kcert.Case(name="inf", ref=lambda x: x * 2, prod=prod, inputs={"x": kcert.Gaussian((4, 8))})
''')
    code, out, _ = run(["certify", path, "-R", "8", "--json", "-"], capsys)
    assert code == 1
    r = json.loads(out)  # strict: json.loads rejects bare Infinity only with parse_constant; check strings
    assert "Infinity" in r["gates"]["variance"]["outputs"][0]["k"]["values"]
    assert r["gates"]["bias"]["outputs"][0]["nonfinite"]["prod"] == 64


def test_progress_rate_column_reads_replicates_per_second():
    from types import SimpleNamespace

    from kcert.commands.progress import Rate

    assert Rate().render(SimpleNamespace(speed=None)).plain == ""
    assert Rate().render(SimpleNamespace(speed=12.34)).plain == "12.3 rep/s"


def test_no_algebra_proof_flag_reaches_certify_and_the_reproduce_command():
    from kcert.cli import build_parser
    from kcert.commands.certify import reproduce_command
    args = build_parser().parse_args(["certify", "cases.py", "--no-algebra-proof"])
    assert args.algebra_proof is False
    assert reproduce_command(args, "cases.py", "rms").endswith("--no-algebra-proof")
    assert build_parser().parse_args(["certify", "cases.py"]).algebra_proof is True


# --- daily use (issue 13) ---------------------------------------------------------------------------

def test_help_version_and_usage_errors_import_no_torch():
    code = '''
import sys
from kcert.cli import main
for argv in (["--help"], ["--version"], ["certify"], ["certify", "--help"], ["certify", "x.py", "-R", "many"],
             ["compare", "--help"], ["nope"]):
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, 2), (argv, exc.code)
heavy = sorted(m for m in ("torch", "numpy", "scipy", "sympy", "matplotlib", "rich") if m in sys.modules)
assert not heavy, heavy
'''
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-m", "kcert", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("kcert ")


SPY = GOOD + '''
import pathlib
CALLS = pathlib.Path(__file__).with_name("calls.txt")
def spy(x, w):
    with CALLS.open("a") as f:
        f.write("x")
    return ref(x, w)
case = kcert.Case(name="rms", ref=ref, prod=spy, inputs={"x": kcert.Gaussian((4, 32), shift=0.1)},
                  weights={"w": kcert.Gaussian((32,), shift=1.0, std=0.1)})
'''


@pytest.mark.parametrize("flag, value, message", [
    ("--html", "{tmp}", "is a folder"),
    ("--json", "{tmp}", "is a folder"),
    ("--json", "/proc/kcert-test.json", "cannot create files in '/proc'"),
    ("--html", "{tmp}/missing/x.html", "does not exist"),
    ("--checkpoint", "/proc/kcert-test.npz", "cannot create files in '/proc'"),
])
def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys, flag, value, message):
    if value.startswith("/proc") and not __import__("os").path.isdir("/proc"):
        pytest.skip("no /proc on this system")
    path = write(tmp_path, SPY)
    code, out, err = run(["certify", path, "-R", "8", flag, value.format(tmp=tmp_path)], capsys)
    assert code == 2 and message in " ".join(err.split()), err
    assert "Traceback" not in err
    assert not (tmp_path / "calls.txt").exists()  # nothing ran


def test_a_report_that_fails_to_write_at_the_end_is_saved_elsewhere(tmp_path, capsys, monkeypatch):
    # the output folder exists when the run starts and disappears while it runs
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    path = write(tmp_path, GOOD.replace("def prod(x, w):", f'''def prod(x, w):
    import shutil
    shutil.rmtree({str(out_dir)!r}, ignore_errors=True)'''))
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["certify", path, "-R", "8", "--json", str(out_dir / "cert.json")], capsys)
    flat = " ".join(err.split())
    assert code == 2, err
    assert "the report could not be written" in flat and "it was saved to" in flat
    saved = flat.split("it was saved to ")[1].split(" instead")[0]
    assert json.loads(open(saved).read())["case"] == "rms"


ODD_NAMES = ["llama/rmsnorm", "..", "../up", "a b", "a:b", "a\\b", "tab\there", "ünï", "*?<>|", ".hidden", "x" * 300,
             "a_b", "a/b"]


def test_case_names_with_odd_characters_get_distinct_checkpoint_files_in_the_folder(tmp_path, capsys):
    cases = "\n".join(f"c{i} = kcert.Case(name={n!r}, ref=lambda x: x * 2, prod=lambda x: x + x, "
                      f"inputs={{'x': kcert.Gaussian((2, 4))}})" for i, n in enumerate(ODD_NAMES))
    path = write(tmp_path, "import kcert\n" + cases + "\n")
    folder = tmp_path / "ck"
    folder.mkdir()
    code, out, err = run(["certify", path, "-R", "4", "--no-algebra-proof", "--checkpoint", str(folder / "run.npz")],
                         capsys)
    assert code in (0, 3), err
    files = sorted(p.name for p in folder.iterdir())
    assert len(files) == len(ODD_NAMES), files
    assert all(f.startswith("run.") and f.endswith(".npz") and "/" not in f for f in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.py", "ck"]  # nothing escaped the folder
    from kcert.commands.output import safe_name
    assert safe_name("llama_rmsnorm") == "llama_rmsnorm" and safe_name("llama/rmsnorm").startswith("llama_rmsnorm-")
    # resuming finds each case's own file again
    code, _, err = run(["certify", path, "-R", "4", "--no-algebra-proof", "--checkpoint", str(folder / "run.npz"),
                        "--resume"], capsys)
    assert code in (0, 3), err


def test_a_multi_case_run_ends_with_a_summary_naming_the_deciding_case(tmp_path, capsys):
    path = write(tmp_path, KERNEL_ERRORS + '''
ok = kcert.Case(name='ok', ref=ref, prod=lambda x: x + x, inputs=P)
off = kcert.Case(name='off', ref=ref, prod=lambda x: x * 2.1, inputs=P)
''')
    code, out, err = run(["certify", path, "--case", "off", "--case", "ok", "-R", "8"], capsys)
    assert code == 1
    tail = out[out.rindex("kcert: 2 cases"):]
    assert "exit 1 (a FAIL)" in tail
    rows = {line.split("│")[1].strip(): line for line in tail.splitlines() if line.count("│") > 5}
    assert "decides exit 1" in rows["off"] and "FAIL" in rows["off"]
    assert "decides" not in rows["ok"] and "PASS" in rows["ok"]
    code, out, err = run(["certify", path, "--case", "ok", "--case", "boom", "-R", "8"], capsys)
    assert code == 2
    tail = out[out.rindex("kcert: 2 cases"):]
    assert "ERROR" in tail and "decides exit 2" in tail and "kernel exploded" in tail


def test_a_kernel_error_names_the_kernels_own_line_and_traceback_shows_all(tmp_path, capsys):
    path = write(tmp_path, KERNEL_ERRORS + '''
def deep(x):
    return torch.matmul(x, torch.ones(3, 3))
mismatch = kcert.Case(name="mismatch", ref=ref, prod=deep, inputs=P)
''')
    code, _, err = run(["certify", path, "--case", "mismatch", "-R", "8"], capsys)
    flat = " ".join(err.split())
    assert code == 2
    assert "prod raised RuntimeError" in flat
    line = 1 + textwrap.dedent(KERNEL_ERRORS).count("\n") + 2  # the matmul line of `deep`
    assert f"(at {path}:{line} in deep)" in flat or f"cases.py:{line} in deep" in flat, flat
    assert "--traceback prints the full traceback" in flat and "Traceback" not in err
    code, _, err = run(["certify", path, "--case", "mismatch", "-R", "8", "--traceback"], capsys)
    assert code == 2 and "Traceback (most recent call last)" in err and "torch.matmul(x, torch.ones(3, 3))" in err


def test_html_to_stdout_and_a_repeated_case_runs_once(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # before the fix, `--html -` wrote a file named '-' in the working folder
    path = write(tmp_path, GOOD)
    code, out, err = run(["certify", path, "--case", "rms", "--case", "rms", "-R", "100", "--html", "-"], capsys)
    assert code == 0, err
    assert out.lstrip().lower().startswith("<!doctype html>") and out.rstrip().endswith("</html>")
    assert err.count("reproduce: kcert certify") == 1  # certified once; the terminal report went to stderr
    assert not (tmp_path / "-").exists()
    with pytest.raises(SystemExit) as exc:
        main(["certify", path, "--html", "-", "--json", "-"])
    assert exc.value.code == 2 and "cannot both write to stdout" in capsys.readouterr().err


DERIVED = '''
import dataclasses, torch, kcert
def ref(x):
    return x * 2
base = kcert.Case(name="base", ref=ref, prod=lambda x: x + x, inputs={"x": kcert.Gaussian((2, 4))})
wide = dataclasses.replace(base, name="wide", inputs={"x": kcert.Gaussian((2, 16))})
'''


@pytest.mark.parametrize("declaration, expected, how", [
    ("", ["base", "wide"], "every module-level kcert.Case"),
    ("__all__ = ['wide']\n", ["wide"], "listed in __all__"),
    ("cases = [wide]\n", ["wide"], "listed in its `cases` list"),
])
def test_list_shows_the_cases_and_all_or_cases_choose_them(tmp_path, capsys, declaration, expected, how):
    path = write(tmp_path, DERIVED + declaration)
    code, out, err = run(["certify", path, "--list"], capsys)
    assert code == 0
    assert [line.split("\t")[0] for line in out.splitlines() if line.strip()] == expected
    assert how in " ".join(err.split())
    code, out, err = run(["certify", path, "-R", "4", "--no-algebra-proof", "--json", str(tmp_path / "r.json")], capsys)
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["case"] for r in (report if isinstance(report, list) else [report])] == expected
    assert f"{len(expected)} case" in err and ", ".join(expected) in err


@pytest.mark.parametrize("declaration, message", [
    ("__all__ = ['nothing']\n", "__all__ names 'nothing', which the file does not define"),
    ("__all__ = ['ref']\n", "__all__ names no kcert.Case"),
    ("cases = [base, 3]\n", "`cases` must be a non-empty list of kcert.Case"),
])
def test_bad_all_or_cases_lists_are_input_errors(tmp_path, capsys, declaration, message):
    code, _, err = run(["certify", write(tmp_path, DERIVED + declaration), "--list"], capsys)
    assert code == 2 and message in " ".join(err.split())


def test_batch_memory_flag(tmp_path, capsys):
    from kcert.cli import build_parser
    from kcert.commands.certify import reproduce_command

    args = build_parser().parse_args(["certify", "c.py", "--batch-memory", "64MiB"])
    assert args.batch_memory == 64 * 2**20
    assert "--batch-memory 67108864" in reproduce_command(args, "c.py", "x")
    assert build_parser().parse_args(["certify", "c.py", "--batch-memory", "1048576"]).batch_memory == 2**20
    with pytest.raises(SystemExit) as exc:
        main(["certify", "c.py", "--batch-memory", "lots"])
    assert exc.value.code == 2 and "must be a number of bytes" in capsys.readouterr().err
    path = write(tmp_path, GOOD.replace("weights={", "independent_leading_axis=True, weights={"))
    code, out, err = run(["certify", path, "-R", "100", "--batch-memory", "1", "--json", "-"], capsys)
    assert code == 0 and "--batch-memory 1" in json.loads(out)["provenance"]["command"]


@pytest.mark.parametrize("kernels, message", [
    ("ref=lambda x: x * 2, prod=lambda x: x + x, inputs={'x': kcert.Gaussian((0, 64))}",
     "inputs['x'] is Gaussian of shape (0, 64), which has no elements"),
    ("ref=lambda x: x * 2, prod=lambda x: x + x, inputs={'x': kcert.Gaussian((4, 8))}, "
     "weights={'w': kcert.Uniform((0,))}", "weights['w'] is Uniform of shape (0,), which has no elements"),
    ("ref=lambda x: x[:0] * 2, prod=lambda x: x[:0] + x[:0], inputs={'x': kcert.Gaussian((4, 8))}",
     "output of ref has shape (0, 8), no elements"),
])
def test_zero_size_probes_and_outputs_are_input_errors(tmp_path, capsys, kernels, message):
    path = write(tmp_path, f"import kcert\ncase = kcert.Case(name='z', {kernels})\n")
    code, _, err = run(["certify", path, "-R", "8"], capsys)
    assert code == 2 and message in " ".join(err.split()) and "Traceback" not in err


def test_reproduce_commands_keep_every_digit_of_the_horizon():
    """A horizon of 1234567.8 printed with ``:g`` would read 1.23457e+06: another certificate."""
    import kcert
    from kcert.cli import build_parser
    from kcert.commands.certify import reproduce_command

    args = build_parser().parse_args(["certify", "c.py", "--horizon", "1234567.8"])
    words = reproduce_command(args, "c.py", "x").split()
    assert float(words[words.index("--horizon") + 1]) == 1234567.8
    assert "--horizon 625000 " in reproduce_command(build_parser().parse_args(["certify", "c.py"]), "c.py", "x") + " "
    case = kcert.Case(name="mul", ref=lambda x: x * 2, prod=lambda x: x + x, inputs={"x": kcert.Gaussian((4,))})
    cert = kcert.certify(case, replicates=4, max_replicates=4, horizon=1234567.8, algebra_points=1)
    assert "horizon=1234567.8" in cert.provenance.command
    from kcert.assertions import reproduce_command as plugin_command  # the pytest plugin's and assert_certified's

    line = plugin_command(case, "cases.py", replicates=4, horizon=1234567.8, seed=0, max_replicates=None,
                          device="cpu", extras={})
    assert "--horizon 1234567.8 " in line + " "


def test_bucket_wise_bias_turns_the_profile_rule_off_and_is_reproduced(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    reports = {}
    for extra in ([], ["--bucket-wise-bias"]):
        out_json = tmp_path / f"cert{len(extra)}.json"
        code, out, err = run(["certify", path, "-R", "64", "--json", str(out_json), *extra], capsys)
        assert code in (0, 3), out + err  # PASS or WARN (64 replicates are few for the variance gate)
        reports[bool(extra)] = json.loads(out_json.read_text())
    thresholds = {k: r["gates"]["bias"]["outputs"][0]["thresholds"] for k, r in reports.items()}
    assert (thresholds[False]["profile_alpha"], thresholds[False]["profile_ratio"]) == (0.01, 2.0)
    assert thresholds[True]["profile_alpha"] is None
    assert "--bucket-wise-bias" in reports[True]["provenance"]["command"]
    assert "--bucket-wise-bias" not in reports[False]["provenance"]["command"]
