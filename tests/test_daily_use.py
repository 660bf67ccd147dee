"""Daily use in CI (issue 26): every failure that is not a verdict exits 2 with one message, runs are
bounded and visible, SIGTERM saves, and no two lines of a report contradict each other."""

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import kcert
from kcert.cli import main
from sample_kernels import stable_report

OUTPUTS = '''
import torch, kcert
def ref(x):
    return x * 2
def on_meta(x):
    return torch.empty(x.shape, device="meta", dtype=x.dtype)
def as_int(x):
    return (x * 2).to(torch.int32)
def as_complex(x):
    return (x * 2).to(torch.complex64)
def as_bool(x):
    return x > 0
def sparse(x):
    return (x * 2).to_sparse()
CALLS = [0]
def changes_dtype(x):
    CALLS[0] += 1
    return (x * 2).float() if CALLS[0] > 3 else x * 2
P = {"x": kcert.Gaussian((4, 8))}
meta = kcert.Case(name="meta", ref=ref, prod=on_meta, inputs=P)
ref_meta = kcert.Case(name="ref_meta", ref=on_meta, prod=ref, inputs=P)
integer = kcert.Case(name="integer", ref=ref, prod=as_int, inputs=P)
complex_ = kcert.Case(name="complex", ref=ref, prod=as_complex, inputs=P)
boolean = kcert.Case(name="boolean", ref=ref, prod=as_bool, inputs=P)
sparse_ = kcert.Case(name="sparse", ref=ref, prod=sparse, inputs=P)
drift = kcert.Case(name="drift", ref=ref, prod=changes_dtype, inputs=P)
'''


def write(tmp_path, text, name="cases.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.mark.parametrize("case, message", [
    ("meta", "replicate 0 (seed 3, replicate seed {rs}): output of prod is on device meta, but the run's inputs are "
             "on cpu; prod must return its result on the device of its inputs (a meta tensor has a shape but no "
             "values"),
    ("ref_meta", "replicate 0 (seed 3, replicate seed {rs}): output of ref is on device meta"),
    ("integer", "output of prod has dtype int32 where ref's is bfloat16: an interface mismatch (prod returns an "
                "integer tensor), not a numerical difference, so it is not judged; make prod return a floating tensor"),
    ("complex", "output of prod has dtype complex64 where ref's is bfloat16: an interface mismatch"),
    ("boolean", "output of prod has dtype bool where ref's is bfloat16: an interface mismatch (prod returns a boolean"),
    ("sparse", "output of prod is a torch.sparse_coo tensor; return a dense (strided) tensor"),
    ("drift", "replicate 3 (seed 3, replicate seed {rs3}): output of prod has dtype float32, at replicate 0 bfloat16"),
])
def test_bad_outputs_exit_two_naming_case_output_replicate_and_the_fix(tmp_path, capsys, case, message):
    from kcert.execution import seeding

    code = main(["certify", write(tmp_path, OUTPUTS), "--case", case.rstrip("_"), "-R", "8", "-s", "3",
                 "--no-peer-rules"])
    err = " ".join(capsys.readouterr().err.split())
    name = {"complex": "complex", "sparse": "sparse"}.get(case, case)
    assert code == 2 and f"kcert: error: case '{name}'" in err and "Traceback" not in err
    assert message.format(rs=seeding.derived_seed(3, seeding.INPUTS, 0),
                          rs3=seeding.derived_seed(3, seeding.INPUTS, 3)) in err


def test_an_unexpected_exception_is_exit_two_never_one(tmp_path, capsys, monkeypatch):
    """A bug (or an input kcert does not check yet) must not read as a FAIL in CI."""
    import kcert.certification

    def broken(*args, **kwargs):
        raise TypeError("something kcert did not expect")

    monkeypatch.setattr(kcert.certification, "certify", broken)
    path = write(tmp_path, OUTPUTS)
    code = main(["certify", path, "--case", "meta", "-R", "8"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert ("case 'meta': kcert stopped on an unexpected TypeError: something kcert did not expect (an input kcert "
            "does not check yet, or a bug in kcert: please report it with the traceback); --traceback prints") in err


def test_options_are_checked_before_torch_and_the_case_file_are_imported(tmp_path):
    marker = tmp_path / "imported"
    path = write(tmp_path, f"open({str(marker)!r}, 'w').close()\n" + OUTPUTS)
    code = f'''
import sys
from kcert.cli import main
for argv, message in (
        (["certify", {path!r}, "-R", "0"], "--replicates must be an integer >= 2, got 0"),
        (["certify", {path!r}, "--max-replicates", "3", "-R", "4"], "--max-replicates must be an integer >= 4, got 3"),
        (["certify", {path!r}, "--threads", "0"], "--threads must be an integer >= 1, got 0"),
        (["certify", {path!r}, "--seed", "-1"], "--seed must be an integer >= 0, got -1"),
        (["certify", {path!r}, "--ulp-floor", "-1"], "--ulp-floor must be a finite number >= 0, got -1.0"),
        (["certify", {path!r}, "--max-time", "0"], "--max-time: must be a duration > 0, got '0'"),
        (["certify", {path!r}, "--max-time", "soon"], "must be a duration such as 600, 90s, 30m or 1h30m"),
        (["certify", {path!r}, "--progress-every", "-1"], "--progress-every must be a finite number of seconds >= 0"),
        (["certify", {path!r}, "--checkpoint-seconds", "0"], "--checkpoint-seconds must be a finite number of seconds > 0"),
        (["kernelbench", "p.py", "c.py", "--ulp-floor", "nan"], "--ulp-floor must be a finite number >= 0"),
        (["demo", "-R", "1"], "--replicates must be an integer >= 2, got 1"),
        (["train-compare", {path!r}, "--threads", "0"], "--threads must be an integer >= 1, got 0")):
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code == 2, (argv, exc.code)
    else:
        raise AssertionError(argv)
heavy = sorted(m for m in ("torch", "numpy", "scipy", "sympy", "matplotlib") if m in sys.modules)
assert not heavy, heavy
'''
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()  # the case file was never imported
    for message in ("--replicates must be an integer >= 2, got 0", "--threads must be an integer >= 1, got 0",
                    "--ulp-floor must be a finite number >= 0, got -1.0", "must be a duration such as 600, 90s"):
        assert message in proc.stderr
    assert proc.stderr.count("usage: kcert certify") == 9 and "usage: kcert train-compare" in proc.stderr


def test_an_unknown_option_prints_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["certify", "cases.py", "--replicatez", "5"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("usage: kcert certify ") and "unrecognized arguments: --replicatez 5" in err
    with pytest.raises(SystemExit):
        main(["kernelbench", "p.py", "c.py", "--bogus"])
    assert capsys.readouterr().err.startswith("usage: kcert kernelbench ")


def test_the_options_are_consistent_across_commands_and_grouped():
    from kcert.cli import build_parser

    parser = build_parser()
    certify, kernelbench = parser.subcommands["certify"], parser.subcommands["kernelbench"]
    shared = ("--replicates", "--horizon", "--seed", "--device", "--threads", "--max-time", "--json", "--html",
              "--quiet", "--checkpoint", "--resume", "--algebra-proof", "--no-algebra-proof", "--shapes",
              "--no-shapes", "--ulp-floor", "--peer-rules", "--no-peer-rules", "--accept-untested-algebra")
    for p in (certify, kernelbench, parser.subcommands["demo"]):
        options = {o for a in p._actions for o in a.option_strings}
        assert set(shared) <= options
        advanced = next(g for g in p._action_groups if g.title == "advanced")
        moved = {o for a in advanced._group_actions for o in a.option_strings}
        assert {"--checkpoint-every", "--checkpoint-seconds", "--batch-memory", "--traceback", "--max-replicates",
                "--progress-every"} <= moved
    assert "--no-shrink" in {o for g in kernelbench._action_groups if g.title == "advanced"
                             for a in g._group_actions for o in a.option_strings}
    text = " ".join((certify.format_help() + kernelbench.format_help()).split())
    assert "(default on; the" in text and "(default off here:" in text  # each command states its proof default
    assert "default: only for cases that declare Case.shapes" in text and "(default on; --no-shapes" in text
    args = parser.parse_args(["kernelbench", "p.py", "c.py"])
    assert (args.algebra_proof, args.shapes, args.ulp_floor) == (False, True, 1.0)
    args = parser.parse_args(["certify", "c.py", "--shapes", "--ulp-floor", "0.5", "--no-algebra-proof"])
    assert (args.algebra_proof, args.shapes, args.ulp_floor) == (False, True, 0.5)
    from kcert.commands.certify import reproduce_command

    line = reproduce_command(args, "c.py", "x")
    assert "--no-algebra-proof" in line and "--shapes" in line and "--ulp-floor 0.5" in line


SLOW = '''
import pathlib, time, torch, kcert
PAUSE = pathlib.Path(__file__).with_name("pause")  # present: every prod call takes 20 ms (not fingerprinted)
def ref(x, w):
    return (x.float() * w.float()).to(x.dtype)
def prod(x, w):
    if PAUSE.exists():
        time.sleep(0.02)
    return x * w
case = kcert.Case(name="slow", ref=ref, prod=prod, inputs={"x": kcert.Gaussian((4, 16), shift=0.1)},
                  weights={"w": kcert.Gaussian((16,), shift=1.0, std=0.1)})
'''


def test_max_time_bounds_the_run_saves_it_and_resume_reports_what_it_reused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SLOW)
    (tmp_path / "pause").touch()
    base = ["certify", path, "-R", "400", "--max-replicates", "400", "--no-peer-rules", "--no-algebra-proof"]
    code = main(base + ["--max-time", "4", "--progress-every", "0.3"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 124, err
    saved = "cases.kcert-checkpoint.npz"  # no --checkpoint: named after the case file, in the working folder
    assert f"--max-time without --checkpoint: the state is saved to {saved}" in err
    assert "stderr is not a terminal: a progress line every 0.3 s" in err
    assert "kcert: case 'slow': " in err and " in all" in err  # the periodic line (its text: the test below)
    assert "kcert: --max-time 4 s reached in case 'slow' after " in err
    assert f"the state is saved in {saved}; continue with: kcert certify {path} -R 400" in err and "--resume" in err
    assert (tmp_path / saved).exists()
    (tmp_path / "pause").unlink()  # the rest runs at full speed
    code = main(base + ["--checkpoint", saved, "--resume", "--json", "r.json"])
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert code == 0, err
    assert f"kcert: case 'slow': resumed from {saved}: " in err and " replicates reused" in err
    report = json.loads((tmp_path / "r.json").read_text())
    reused = report["provenance"]["resumed"]["replicates"]
    assert 0 <= reused < 400 and f"{reused} replicates reused (looks: none finished)" in err
    timings = report["provenance"]["timings"]
    assert {"replicates", "algebra", "bias", "variance", "l0"} <= set(timings)
    assert all(v >= 0 for v in timings.values()) and sum(timings.values()) <= report["provenance"]["wall_time_s"] + 1e-6
    # inside the report's panel: its borders fall where the provenance line wraps (which moves with its length)
    assert f"resumed from {saved} with {reused} replicates" in " ".join(captured.out.replace("│", " ").split())
    assert "(replicates " in captured.out  # the time per stage, in the report's last line


def test_a_time_limit_resumes_to_the_uninterrupted_certificate(tmp_path):
    from kcert.errors import TimeLimitReached
    from sample_kernels import rms_bf16_case

    calls = itertools.count(1)  # an iterator's position is state, not definition: not fingerprinted

    def stalls(x, w):  # one slow call after the first 40: the limit passes there
        if next(calls) == 40:
            import time
            time.sleep(1.2)
        from sample_kernels import bf16_rmsnorm
        return bf16_rmsnorm(x, w)

    path = tmp_path / "run.npz"
    with pytest.raises(TimeLimitReached) as stop:
        kcert.certify(rms_bf16_case(stalls), 100, seed=1, checkpoint=path, max_time=1.0, peer_rules=False)
    assert 1 <= stop.value.done <= 40 and stop.value.checkpoint == str(path) and "resume to continue" in str(stop.value)
    assert isinstance(stop.value, TimeoutError) and isinstance(stop.value, kcert.KcertError)
    events = []
    resumed = kcert.certify(rms_bf16_case(stalls), 100, seed=1, checkpoint=path, resume=True, peer_rules=False,
                            on_event=lambda kind, detail: events.append((kind, detail)))
    assert events[0] == ("resumed", {"checkpoint": str(path), "replicates": stop.value.done, "looks": []})
    assert [d["stage"] for k, d in events if k == "stage"] == ["replicates", "algebra", "checks"]
    whole = kcert.certify(rms_bf16_case(), 100, seed=1, peer_rules=False)
    assert stable_report(resumed) == stable_report(whole)
    assert resumed.provenance.resumed["replicates"] == stop.value.done and whole.provenance.resumed is None


def test_sigterm_saves_the_checkpoint_says_so_and_exits_143(tmp_path, capsys):
    path = write(tmp_path, SLOW + '''
import os, signal
import itertools, pathlib
CALLS = itertools.count(1)
SENT = pathlib.Path(__file__).with_name("sent")
def prod(x, w):
    if next(CALLS) == 20 and not SENT.exists():
        SENT.touch()
        os.kill(os.getpid(), signal.SIGTERM)  # what a CI runner sends at its own time limit
    return x * w
case = kcert.Case(name="slow", ref=ref, prod=prod, inputs={"x": kcert.Gaussian((4, 16), shift=0.1)},
                  weights={"w": kcert.Gaussian((16,), shift=1.0, std=0.1)})
''')
    ck = str(tmp_path / "ck.npz")
    before = signal.getsignal(signal.SIGTERM)
    code = main(["certify", path, "-R", "64", "--checkpoint", ck, "--no-peer-rules"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 143, err
    assert f"kcert: terminated (SIGTERM) in case 'slow'; the state is saved in {ck}; continue with: kcert certify" in err
    assert os.path.exists(ck) and signal.getsignal(signal.SIGTERM) == before  # the handler is the caller's again
    assert main(["certify", path, "-R", "64", "--checkpoint", ck, "--resume", "--no-peer-rules", "-q"]) in (0, 3)
    assert "replicates reused" not in capsys.readouterr().err  # quiet: notes are left out


def test_quiet_prints_verdict_lines_and_threads_reach_the_run(tmp_path, capsys, one_thread):
    threads = torch.get_num_threads()  # 1 here; the run asks for 2
    path = write(tmp_path, SLOW + "\nsame = kcert.Case(name='same', ref=ref, prod=ref, "
                                                  "inputs=case.inputs, weights=case.weights)\n")
    code = main(["certify", path, "-R", "8", "--max-replicates", "8", "-q", "--threads", "2", "--no-peer-rules",
                 "--no-algebra-proof", "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 3 and lines[0].split()[:2] in (["PASS", "slow"], ["WARN", "slow"], ["FAIL", "slow"])
    assert lines[1].startswith("WARN  same  (algebra PASS · bias WARN · variance WARN; ")  # R = 8: below both minimums
    assert lines[2].startswith(f"kcert: 2 cases, exit {code} (")
    assert "JSON report" not in err and "HTML report" not in err  # notes are left out
    report = json.loads((tmp_path / "r.json").read_text())
    assert [c["case"] for c in report] == ["slow", "same"]
    assert report[0]["provenance"]["environment"]["torch_threads"] == 2
    assert torch.get_num_threads() == threads  # main() from Python gives the caller's threads back
    assert "--threads 2" in report[0]["provenance"]["command"]
    page = (tmp_path / "r.html").read_text()
    assert page.index("<h2>summary</h2>") < page.index("<h2 id='case-1'>") < page.index("<h2 id='case-2'>")
    assert "href='#case-2'>same</a>" in page


SHIFTED = '''
import torch, kcert
def hf(x, w):   # HF's Llama RMSNorm: rounds to bf16 before the gain, a coherent bias that is ref's own
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def fused(x, w):
    return torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), w.float(), eps=1e-6).to(x.dtype)
case = kcert.Case(name="llama", ref=hf, prod=fused, inputs={"x": kcert.Gaussian((2, 64, 32), shift=0.1)},
                  weights={"w": kcert.Gaussian((32,), shift=1.0, std=0.05)})
'''


def test_the_bias_block_and_l0_quote_the_same_significant_buckets(tmp_path, capsys):
    """A PASS whose significant buckets are ref's own bias: L0 calls the difference coherent, the bias
    gate PASSes it, and both say how many buckets and why (never "no significant bucket")."""
    from kcert.report.blocks import significance

    html = tmp_path / "r.html"
    code = main(["certify", write(tmp_path, SHIFTED), "-R", "256", "--max-replicates", "256", "--no-peer-rules",
                 "--no-algebra-proof", "--html", str(html), "--json", str(tmp_path / "r.json")])
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    l0 = report["bitwise"][0]
    assert l0["classification"].startswith("coherent") and l0["growth"]["significant_buckets"] > 0
    n = l0["growth"]["significant_buckets"]
    assert "no significant bucket" not in out
    # z* = 5 is the Student t(255) quantile 5.13 at R = 256 (kcert.stats.power.critical_z), for both
    assert f"no bucket WARN or FAIL; {n} buckets significant (|z| > 5.13 on mean(prod - ref), raw or sign-aligned; " \
           f"z* = 5 at this R): 0 FAIL, 0 WARN, {n} PASS as ref's own bias" in out
    assert f"growth: {n} buckets significant at R = 256 (|z| > 5.13 on mean(prod - ref), raw or sign-aligned: the " \
           f"bias gate's statistics and critical value)" in out
    assert f"the bias gate PASSes them: L0 sees a coherent difference between prod and ref; the bias gate also asks " \
           f"whose it is, and {n} of the {n} buckets are ref's own bias" in out
    page = html.read_text()
    assert "the bias gate PASSes them" in page and f"{n} PASS as ref&#x27;s own bias" in page
    cert = kcert.certify(kcert.Case(name="x", ref=lambda x: x * 2, prod=lambda x: x + x,
                                    inputs={"x": kcert.Gaussian((4,))}), 40, peer_rules=False, algebra_proof=False)
    assert significance(cert.bias[0]).text() == ("0 buckets significant (|z| > 5.97 on mean(prod - ref), raw or "
                                                 "sign-aligned; z* = 5 at this R)")


def test_algebra_messages_print_constants_as_numbers():
    import math

    from kcert.execution import probes
    from kcert.execution.algebra import evaluate_algebra
    from kcert.gates.algebra import judge_algebra

    case = kcert.Case(name="gelu", ref=lambda x: x * 0.5 * (1.0 + torch.erf(x * math.sqrt(0.5))),
                      prod=lambda x: x * 0.5 * (1.0 + torch.erf(x * 0.7071067811)),
                      inputs={"x": kcert.Gaussian((4, 8))}, dtype=torch.float32)
    weights = probes.draw_weights(case, 0, torch.device("cpu"))
    reason = judge_algebra(evaluate_algebra(case, weights, 0, "cpu", 8, 8, proof=True), False, 0.25).reason
    assert "erf(0.707107*x[0,0])" in reason and "/10000000000" not in reason


def test_train_compare_says_whether_training_confirms_the_certificate():
    from types import SimpleNamespace

    from kcert.report.training import certificate_agreement
    from kcert.results.training import TrainingVerdict

    def result(cert, verdict):
        return SimpleNamespace(certificate=SimpleNamespace(verdict=cert), verdict=verdict, exit_code=verdict.exit_code,
                               seeds=(0, 1, 2, 3), config={"steps": 120})

    text = certificate_agreement(result("FAIL", TrainingVerdict.INDISTINGUISHABLE))
    assert text.startswith("a FAIL expects training to differ; measured: indistinguishable at this horizon (the "
                           "verdict, exit 0): not confirmed at 4 seeds x 120 steps")
    assert certificate_agreement(result("FAIL", TrainingVerdict.DIFFERS)).endswith("(the verdict, exit 1): confirmed")
    assert "training shows what the certificate did not detect" in certificate_agreement(
        result("PASS", TrainingVerdict.DIFFERS))


def test_the_estimate_leaves_out_the_first_replicate_and_warns_before_a_long_or_bounded_run(monkeypatch):
    import kcert.commands.progress as progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])

    def run(remaining, rate):
        notes, warnings = [], []
        p = progress.RunProgress("case 'x'", 4096, remaining, notes.append, warnings.append)
        now[0] += 30.0  # the first replicate: warm-up, left out of the rate
        p.tick(1, 1024)
        for done in range(2, 6):
            now[0] += 1.0 / rate
            p.tick(done, 1024)
        return p, notes, warnings

    p, notes, warnings = run(None, 0.1)  # 10 s per replicate: the look needs ~2h 50m
    assert notes == ["kcert: case 'x': 0.1 replicates/s; the look of 1024 replicates needs ~2h 50m more, up to 4096 "
                     "replicates if the variance gate needs every look (~11h 22m); the algebra gate and the checks "
                     "come on top"]
    assert warnings == ["case 'x': at 0.1 replicates/s the look of 1024 replicates needs ~2h 50m; --max-time bounds a "
                        "run (it saves the state to continue with --resume)"]
    assert p.describe() == "kcert: case 'x': replicates 5 of 1024 (0.1/s, ~2h 49m left in this look); 1m 10s in all"
    p.event("stage", {"stage": "algebra"})
    now[0] += 42
    assert p.describe().startswith("kcert: case 'x': the algebra gate (identity test, symbolic proof or precision "
                                   "ladder) (42 s in it)")
    _, _, warnings = run(600.0, 2.0)  # 1024 replicates at 2/s: 8.5 min, more than the 10 min limit minus 32 s?
    assert warnings == []
    _, notes, warnings = run(120.0, 2.0)
    assert len(warnings) == 1 and "more than the ~1m 28s left of --max-time: the run will stop near replicate " \
                                  "181" in warnings[0]
    _, notes, warnings = run(1200.0, 2.0)  # the first look fits, the cap does not
    assert warnings == [] and "further looks of the variance gate (up to 4096 replicates) would not all fit" in notes[-1]
