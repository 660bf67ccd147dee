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
    code, out, err = run(["certify", path, "--replicates", "32", "--seed", "7", "--json", str(out_json),
                          "--html", str(tmp_path / "cert.html")], capsys)
    assert code == 0, out + err
    report = json.loads(out_json.read_text())
    assert report["schema"] == "kcert.certificate/1"
    assert report["case"] == "rms" and report["verdict"] == "PASS"
    assert set(report["gates"]) == {"algebra", "bias", "variance"}
    assert report["provenance"]["seed"] == 7
    assert report["provenance"]["command"].startswith("kcert certify")
    assert "--seed 7" in report["provenance"]["command"]
    for key in ("torch", "numpy", "scipy", "kcert"):
        assert key in report["provenance"]["environment"]["versions"]
    assert "cpu" in report["provenance"]["environment"]
    assert "reproduce: kcert certify" in out
    html = (tmp_path / "cert.html").read_text()
    assert "<html>" in html and "rms" in html and "PASS" in html


def test_json_to_stdout_keeps_stdout_pure(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    code, out, err = run(["certify", path, "-R", "16", "--json", "-"], capsys)
    assert code == 0
    assert json.loads(out)["verdict"] == "PASS"
    assert "reproduce:" in err


def test_fail_exit_one_and_review_exit_three(tmp_path, capsys):
    path = write(tmp_path, GOOD + '''
def bad(x, w):
    return (ref(x, w).float() * 1.02).to(x.dtype)
def opaque(x, w):
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
    code, _, err = run(["certify", path, "--replicates", "1"], capsys)
    assert code == 2 and "replicates must be an integer >= 2, got 1" in err
    code, _, err = run(["certify", path, "--horizon", "0.5"], capsys)
    assert code == 2 and "horizon must be a finite number > 1, got 0.5" in err
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
    assert json.loads(out_json.read_text())["case"] == "ok"


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
    assert set(v) >= {"output", "verdict", "reason", "thresholds", "replicates", "looks", "k", "errors", "tail"}
    assert len(v["k"]["values"]) == v["replicates"] == len(v["errors"]["prod"])
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

    from kcert.cli import _Rate

    assert _Rate().render(SimpleNamespace(speed=None)).plain == ""
    assert _Rate().render(SimpleNamespace(speed=12.34)).plain == "12.3 rep/s"


def test_no_algebra_proof_flag_reaches_certify_and_the_reproduce_command():
    from kcert.cli import _command, build_parser
    args = build_parser().parse_args(["certify", "cases.py", "--no-algebra-proof"])
    assert args.algebra_proof is False
    assert _command(args, "cases.py", "rms").endswith("--no-algebra-proof")
    assert build_parser().parse_args(["certify", "cases.py"]).algebra_proof is True
