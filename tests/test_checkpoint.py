"""Checkpoints: a run interrupted (Ctrl-C, a kernel that raises) and resumed gives the certificate
of an uninterrupted run; a checkpoint of another run is refused, naming what differs."""

import json

import numpy as np
import pytest

import kcert
from kcert.cli import main
from kcert.errors import KcertError, KernelError, ParameterError
from kcert.execution.checkpoint import FORMAT, CheckpointError
from kernels import rms_bf16_casefile, bf16_rmsnorm, rms_bf16_case, rmsnorm_ref, stable_report

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


def test_kernel_error_keeps_what_was_computed(tmp_path, uninterrupted):
    count = {"n": 0}

    def flaky(x, w):
        count["n"] += 1
        if count["n"] == 150:
            raise RuntimeError("device lost")
        return bf16_rmsnorm(x, w)

    path = tmp_path / "run.npz"
    with pytest.raises(KernelError, match="replicate 149.*device lost"):
        kcert.certify(make_case(flaky), R, seed=SEED, max_replicates=M, checkpoint=path)
    with np.load(path, allow_pickle=False) as data:
        assert json.loads(str(data["meta"]))["done"] == 149
    resumed = kcert.certify(make_case(), R, seed=SEED, max_replicates=M, checkpoint=path, resume=True)
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
    with pytest.raises(CheckpointError, match="cannot be read"):
        kcert.certify(make_case(), R, seed=SEED, checkpoint=tmp_path / "junk.npz", resume=True)


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
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    for d in (a, b):
        d = d[0] if isinstance(d, list) else d
        d["provenance"].pop("date"), d["provenance"].pop("wall_time_s")
    assert a == b
    capsys.readouterr()
    assert main(base[:-1] + ["5", "--checkpoint", ck, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and "seed: checkpoint 2, this run 5" in err
    with pytest.raises(SystemExit) as exit_info:
        main(base + ["--resume"])
    assert exit_info.value.code == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err
