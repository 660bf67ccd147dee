"""Checkpoints: a run interrupted (Ctrl-C, a kernel that raises) and resumed gives the certificate
of an uninterrupted run; a checkpoint of another run is refused, naming what differs."""

import itertools
import json

import numpy as np
import pytest
import torch

import kcert
from kcert.cli import main
from kcert.errors import KcertError, KernelError, ParameterError
from kcert.execution.checkpoint import FORMAT, CheckpointError
from sample_kernels import rms_bf16_casefile, bf16_rmsnorm, rms_bf16_case, rmsnorm_ref, stable_report

R, M, SEED = 50, 200, 3  # three looks: 50, 100, 200 (blocks of 64: partial blocks at every look)


make_case = rms_bf16_case
report = stable_report


@pytest.fixture(scope="module")
def uninterrupted():
    cert = kcert.certify(make_case(), R, seed=SEED, max_replicates=M)
    assert cert.variance[0].looks == (50, 100, 200)
    return report(cert)


def interrupt_at(n):
    def progress(done, planned):
        if done == n:
            raise KeyboardInterrupt

    return progress


@pytest.mark.parametrize("stop_at", [30, 64, 130])
def test_interrupted_run_resumes_to_the_same_certificate(tmp_path, uninterrupted, stop_at):
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, progress=interrupt_at(stop_at))
    with np.load(path, allow_pickle=False) as data:  # no pickled objects in the file
        meta = json.loads(str(data["meta"]))
    assert meta["format"] == FORMAT and meta["done"] == stop_at
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]  # the temporary file was moved into place
    resumed = kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True)
    assert report(resumed) == uninterrupted
    # the finished checkpoint resumes to the same certificate again, computing nothing
    calls = []
    again = kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True,
                          progress=lambda d, p: calls.append(d))
    assert report(again) == uninterrupted and calls == []


def test_a_run_resumed_on_other_arithmetic_says_which_replicates_ran_where(tmp_path, uninterrupted, monkeypatch):
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, progress=interrupt_at(64))
    with np.load(path, allow_pickle=False) as data:
        first, = json.loads(str(data["meta"]))["hosts"]
    assert first["from"] == 0 and first["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    # the same run resumed where ATen dispatches to another instruction set (another node of a cluster)
    other = {**{k: v for k, v in first.items() if k != "from"}, "cpu_capability": "OTHER"}
    monkeypatch.setattr("kcert.core.arithmetic", lambda device: other)
    resumed = kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True)
    assert resumed.provenance.resumed["hosts"] == [first, {"from": 64, **other}]
    note, = [n for n in resumed.notes if n.startswith("resumed on other arithmetic")]
    assert "replicates 0-63 on " in note and "replicates 64-199 on " in note and "cpu_capability OTHER" in note
    assert report(resumed) != uninterrupted  # the note: this certificate is not one host's
    without = [n for n in resumed.notes if n != note]
    assert {**report(resumed), "notes": without} == {**uninterrupted, "notes": without}  # the numbers are
    with np.load(path, allow_pickle=False) as data:  # the file keeps both, for a third resume
        assert json.loads(str(data["meta"]))["hosts"] == [first, {"from": 64, **other}]


def test_a_checkpoint_without_hosts_resumes_as_from_a_host_not_recorded():
    from kcert.execution.checkpoint import continue_hosts, hosts_note
    now = {"cpu": "x", "cpu_capability": "AVX2"}
    assert continue_hosts(None, 0, now) == [{"from": 0, **now}]
    assert continue_hosts([{"from": 0, **now}], 64, now) == [{"from": 0, **now}]
    hosts = continue_hosts(None, 64, now)
    assert hosts == [{"from": 0, "host": "not recorded"}, {"from": 64, **now}]
    assert hosts_note(hosts, 100).startswith("resumed on other arithmetic: replicates 0-63 on host not recorded; "
                                             "replicates 64-99 on cpu x, cpu_capability AVX2.")
    assert hosts_note(hosts[1:], 100) is None


def test_ranks_on_other_arithmetic_are_named_in_a_note(monkeypatch):
    from kcert.execution import distributed
    from kcert.execution.environment import ranks_note

    here = {"torch": "2.13.0", "cpu": "x", "cpu_capability": "AVX512"}
    assert ranks_note([here]) is None and ranks_note([here, dict(here)]) is None
    note = ranks_note([here, {**here, "cpu_capability": "AVX2"}])
    assert note.startswith("ranks on other arithmetic: rank 0 on torch 2.13.0, cpu x, cpu_capability AVX512; rank 1 "
                           "on torch 2.13.0, cpu x, cpu_capability AVX2.")

    class UnlikeSecondRank(distributed.SingleProcess):
        """One process that answers the gather of every rank's arithmetic as if a second rank ran elsewhere."""

        def all_gather(self, obj):
            if isinstance(obj, dict) and "cpu_capability" in obj:
                return [obj, {**obj, "cpu_capability": "OTHER"}]
            return super().all_gather(obj)

    monkeypatch.setattr("kcert.core.distributed.current", lambda: UnlikeSecondRank())
    cert = kcert.certify(make_case(), 64, seed=SEED)
    note, = [n for n in cert.notes if n.startswith("ranks on other arithmetic")]
    assert "rank 1 on " in note and "cpu_capability OTHER" in note


def test_kernel_error_keeps_what_was_computed(tmp_path, uninterrupted):
    # the same kernel, which loses its device once (the call counter is state, not definition: an
    # itertools.count is not part of the fingerprint, so the resumed run is accepted)
    calls = itertools.count(1)

    def flaky(x, w):
        # counts the replicates' calls only (bf16; the algebra gate calls it in float64 and float32)
        if x.dtype == torch.bfloat16 and next(calls) == 150:
            raise RuntimeError("device lost")
        return bf16_rmsnorm(x, w)

    path = tmp_path / "run.npz"
    with pytest.raises(KernelError, match="replicate 149.*device lost"):
        kcert.certify(make_case(flaky), R, seed=SEED, max_replicates=M, checkpoint=path)
    with np.load(path, allow_pickle=False) as data:
        assert json.loads(str(data["meta"]))["done"] == 149
    resumed = kcert.certify(make_case(flaky), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True)
    assert report(resumed) == uninterrupted


def test_periodic_saves(tmp_path):
    path = tmp_path / "run.npz"
    seen = []

    def progress(done, planned):
        if done in (70, 140) and path.exists():
            with np.load(path, allow_pickle=False) as data:
                seen.append(json.loads(str(data["meta"]))["done"])

    kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, checkpoint_every=64,
                  checkpoint_seconds=1e9, progress=progress)
    assert seen == [64, 128]  # at the block boundary after every 64 replicates


def test_mismatching_checkpoint_is_refused_naming_what_differs(tmp_path):
    path = tmp_path / "run.npz"
    kcert.certify(make_case(), R, seed=SEED, max_replicates=R, checkpoint=path)
    with pytest.raises(CheckpointError) as info:
        kcert.certify(make_case(), R, seed=SEED + 1, max_replicates=2 * R, checkpoint=path, resume=True)
    assert isinstance(info.value, KcertError) and isinstance(info.value, ValueError)
    message = str(info.value)
    assert "seed: checkpoint 3, this run 4" in message and "max_replicates: checkpoint 50, this run 100" in message
    other = kcert.Case(name="other", ref=rmsnorm_ref, prod=bf16_rmsnorm, inputs={"x": kcert.Gaussian((4, 32))})
    with pytest.raises(CheckpointError, match="case: checkpoint 'rms_bf16', this run 'other'"):
        kcert.certify(other, R, seed=SEED, max_replicates=R, checkpoint=path, resume=True)
    with pytest.raises(CheckpointError, match="does not exist"):
        kcert.certify(make_case(), R, seed=SEED, checkpoint=tmp_path / "none.npz", resume=True)
    (tmp_path / "junk.npz").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="is corrupt or not a kcert checkpoint") as info:
        kcert.certify(make_case(), R, seed=SEED, checkpoint=tmp_path / "junk.npz", resume=True)
    assert "pickle" not in str(info.value)
    (tmp_path / "zip.npz").write_bytes(b"PK\x03\x04 truncated zip")
    with pytest.raises(CheckpointError, match="is corrupt or not a kcert checkpoint"):
        kcert.certify(make_case(), R, seed=SEED, checkpoint=tmp_path / "zip.npz", resume=True)


def test_a_raised_cap_lets_the_looks_go_on_to_the_larger_plans_certificate(tmp_path, uninterrupted):
    """A finished run resumed with a larger max_replicates computes only the further looks' replicates and gives
    the certificate of a run planned with that cap from the start, plus a note bounding the level over both
    plans (docs/method.md, "Stopping")."""
    path = tmp_path / "run.npz"
    first = kcert.certify(make_case(), R, seed=SEED, max_replicates=2 * R, checkpoint=path)
    assert first.variance[0].looks == (50, 100)  # undecided at its last look: the larger plan goes on
    computed = []
    extended = kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True,
                             progress=lambda d, p: computed.append(d))
    assert min(computed) == 101 and max(computed) == 200  # only the third look's replicates
    note = [n for n in extended.notes if n.startswith("looks extended on resume")]
    assert len(note) == 1 and "ended at 100 replicates (2 of its 2 looks judged)" in note[0]
    assert "at most 1.33 x alpha" in note[0]  # 2 looks at alpha/2, then 1 at alpha/3
    without = report(extended)
    without["notes"] = [n for n in without["notes"] if not n.startswith("looks extended")]
    assert without == uninterrupted
    assert extended.provenance.resumed["plans"] == [{"max_replicates": 100, "planned_looks": 2, "looks": 2}]
    # the extended checkpoint resumes to the same certificate, its note kept, computing nothing
    again = kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True,
                          progress=lambda d, p: computed.append(-d))
    assert report(again) == report(extended) and min(computed) > 0


def test_a_rerun_naming_the_earlier_cap_states_the_level_a_resume_would(tmp_path, uninterrupted):
    """Started over on the same seed with a larger cap, the run judges the earlier run's draws again: with
    prior_max_replicates it is the larger plan's certificate plus the note a resume gives; a checkpoint it writes
    keeps that plan, so a later resume with a raised cap counts both (docs/method.md, "Stopping")."""
    path = tmp_path / "run.npz"
    rerun = kcert.certify(make_case(), R, seed=SEED, max_replicates=M, prior_max_replicates=2 * R, checkpoint=path)
    note = [n for n in rerun.notes if n.startswith("looks extended past an earlier plan")]
    assert len(note) == 1 and "the earlier run's plan (prior_max_replicates) ended at 100 replicates" in note[0]
    assert "at most 1.33 x alpha" in note[0]
    without = report(rerun)
    without["notes"] = [n for n in without["notes"] if not n.startswith("looks extended")]
    assert without["provenance"].pop("command").endswith("seed=3, prior_max_replicates=100)")  # reproduced
    assert without == {**uninterrupted, "provenance": {k: v for k, v in uninterrupted["provenance"].items()
                                                       if k != "command"}}
    further = kcert.certify(make_case(), R, seed=SEED, max_replicates=4 * M, checkpoint=path, resume=True)
    assert further.variance[0].looks[-1] > M  # a look past the rerun's plan: both earlier plans counted
    note = next(n for n in further.notes if n.startswith("looks extended on resume"))
    assert "at most 1.73 x alpha" in note  # 2 looks at alpha/2, then 1 at alpha/3, then 2 at alpha/5
    assert further.provenance.resumed["plans"][0] == {"max_replicates": 100, "planned_looks": 2, "looks": 2}
    # a verdict at a look the earlier plan judged is that plan's certificate: no note
    from kcert.execution.checkpoint import extension_note

    assert extension_note([{"max_replicates": 100, "planned_looks": 2, "looks": 2}], [50, 100, 200], [50, 100]) is None


def test_a_cap_raised_off_the_plan_or_lowered_is_refused(tmp_path):
    path = tmp_path / "run.npz"
    kcert.certify(make_case(), R, seed=SEED, max_replicates=80, checkpoint=path)  # looks 50, 80
    with pytest.raises(CheckpointError, match=r"planned its looks at \[50, 80\] replicates; this run's max_replicates "
                                              r"200 plans \[50, 100, 200\], .*80, is not R times a power of 2"):
        kcert.certify(make_case(), R, seed=SEED, max_replicates=200, checkpoint=path, resume=True)
    with pytest.raises(CheckpointError, match="max_replicates: checkpoint 80, this run 50"):
        kcert.certify(make_case(), R, seed=SEED, max_replicates=50, checkpoint=path, resume=True)


def test_the_level_over_plans_counts_each_look_at_its_first_share():
    from kcert.execution.checkpoint import extension_level

    four_r = {"max_replicates": 4096, "planned_looks": 3, "looks": 3}
    assert extension_level([four_r], 5) == pytest.approx(1 + 2 / 5)  # 4R then 16R: 1.4 alpha
    assert extension_level([{**four_r, "looks": 1}], 5) == pytest.approx(1 / 3 + 4 / 5)  # stopped after one look
    sixteen_r = {"max_replicates": 16384, "planned_looks": 5, "looks": 1}  # 8R judged under 16R's plan, then 64R
    assert extension_level([four_r, sixteen_r], 7) == pytest.approx(1 + 1 / 5 + 3 / 7)
    assert extension_level([], 3) == pytest.approx(1)


def test_parameter_errors():
    with pytest.raises(ParameterError, match="resume=True needs checkpoint"):
        kcert.certify(make_case(), R, resume=True)
    with pytest.raises(ParameterError, match="checkpoint_every must be an integer >= 1, got 0"):
        kcert.certify(make_case(), R, checkpoint="x.npz", checkpoint_every=0)
    with pytest.raises(ParameterError, match="does not exist"):
        kcert.certify(make_case(), R, checkpoint="/no/such/folder/x.npz")


CASEFILE = rms_bf16_casefile(32)


def test_cli_checkpoint_resume_and_refusal(tmp_path, capsys):
    cases = tmp_path / "cases.py"
    cases.write_text(CASEFILE)
    ck = str(tmp_path / "ck.npz")
    base = ["certify", str(cases), "-R", "40", "--max-replicates", "80", "-s", "2"]
    assert main(base + ["--json", str(tmp_path / "a.json")]) in (0, 1, 3)  # a verdict, not an input error
    main(base + ["--checkpoint", ck])
    assert main(base + ["--checkpoint", ck, "--resume", "--json", str(tmp_path / "b.json")]) in (0, 3)
    a, b = (stable_report(json.loads((tmp_path / f).read_text())) for f in ("a.json", "b.json"))
    assert a == b
    capsys.readouterr()
    assert main(base[:-1] + ["5", "--checkpoint", ck, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and "seed: checkpoint 2, this run 5" in err
    with pytest.raises(SystemExit) as exit_info:
        main(base + ["--resume"])
    assert exit_info.value.code == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err


GAIN = 1.5


def scaled(x, w):
    return bf16_rmsnorm(x, w) * GAIN


def test_a_changed_kernel_is_refused_naming_what_changed(tmp_path):
    """Resuming after an edit of prod (a global it reads, its code, a weight of a module) is refused."""
    global GAIN
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        kcert.certify(make_case(scaled), R, seed=SEED, max_replicates=M, checkpoint=path, progress=interrupt_at(30))
    GAIN = 1.51
    try:
        with pytest.raises(CheckpointError) as info:
            kcert.certify(make_case(scaled), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True)
    finally:
        GAIN = 1.5
    assert "prod.globals.GAIN (was 1.5, now 1.51)" in str(info.value)

    def edited(x, w):  # same name, other code
        return bf16_rmsnorm(x, w) * 1.5 + 0

    with pytest.raises(CheckpointError, match=r"prod.code \(was sha256:"):
        kcert.certify(make_case(edited), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True)
    # unchanged: accepted
    kcert.certify(make_case(scaled), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True)


def test_module_parameters_closures_and_probes_are_fingerprinted():
    import torch

    from kcert.execution.fingerprint import case_fingerprint, differences

    lin = torch.nn.Linear(64, 64)

    def build(scale, module, fixed):
        def prod(x, w):
            return module(bf16_rmsnorm(x, w).float()).to(x.dtype) * scale

        case = make_case(prod)
        return kcert.Case(name=case.name, ref=case.ref, prod=prod, inputs={**case.inputs, "m": kcert.Fixed(fixed)},
                          weights=case.weights)

    base = case_fingerprint(build(2.0, lin, torch.zeros(3)))
    assert base == case_fingerprint(build(2.0, lin, torch.zeros(3)))  # equal inputs, equal fingerprint
    assert any("closure.scale" in d for d in differences(base, case_fingerprint(build(3.0, lin, torch.zeros(3)))))
    with torch.no_grad():
        other = torch.nn.Linear(64, 64)
        other.load_state_dict(lin.state_dict())
        other.weight[0, 0] += 1e-3
    changed = differences(base, case_fingerprint(build(2.0, other, torch.zeros(3))))
    assert len(changed) == 1 and changed[0].startswith("prod.closure.module.parameter.weight (was float32[64, 64] sha256:")
    assert any(d.startswith("inputs.m") for d in differences(base, case_fingerprint(build(2.0, lin, torch.ones(3)))))
    compiled = case_fingerprint(build(2.0, torch.compile(lin), torch.zeros(3)))  # the same module, compiled
    assert differences(base, compiled) == ["prod.closure.module.compiled (new)"]


FINGERPRINT_CHILD = """
import json, sys, torch, kcert
from kcert.execution.fingerprint import case_fingerprint
NAMES = {"alpha", "beta", "gamma"}
SCALE = {"alpha": 1.0, "beta": 2.0}
def prod(x, w):
    if "beta" in {"alpha", "beta", "gamma"} and "alpha" in NAMES:
        return x * w * SCALE["beta"]
    return x
torch.manual_seed(0)
lin = torch.nn.Linear(4, 4)
case = kcert.Case(name="c", ref=lambda x, w: x * w * 2, prod=prod, inputs={"x": kcert.Gaussian((2, 4))},
                  weights={"w": kcert.Gaussian((4,))}, oracle=lambda x, w: lin(x) * 0 + x * w * 2)
print(json.dumps(case_fingerprint(case), sort_keys=True))
"""


def test_the_fingerprint_is_the_same_in_another_process():
    """A checkpoint is resumed by a new process: string hashing (set order) must not change it."""
    import os
    import subprocess
    import sys

    other = subprocess.run([sys.executable, "-c", FINGERPRINT_CHILD], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=str(hash("salt") % 1000 + 1))).stdout.strip()
    here: list = []
    exec(compile(FINGERPRINT_CHILD, "<string>", "exec"), {"__name__": "__main__", "print": here.append})
    assert here[0] == other and "prod.globals.NAMES" in other  # this process's hash seed is another one
