"""Scale-out: the accumulation blocks shared among ranks give the one-process certificate bit for bit.

In-process ranks (threads with a pickling all-gather) cover several world sizes quickly; one test
launches real torchrun with two CPU ranks on gloo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kcert
from sample_kernels import bf16_rmsnorm, rms_bf16_case, rms_bf16_casefile, run_ranks, stable_report


def fragile_rmsnorm(x, w):
    if x.float().abs().max() > 3.6:  # some replicates draw such an x: a deterministic kernel error
        raise RuntimeError("overflow guard tripped")
    return bf16_rmsnorm(x, w)


make_case = rms_bf16_case


def report(cert) -> dict:
    return stable_report(cert, "torch_threads")


@pytest.mark.parametrize("world", [2, 3, 5])
def test_any_sharding_gives_the_one_process_certificate(monkeypatch, world):
    kwargs = dict(replicates=50, max_replicates=200, seed=3, algebra_points=1)
    single = report(kcert.certify(make_case(), **kwargs))
    results = run_ranks(monkeypatch, world, **kwargs)
    for cert in results:
        assert not isinstance(cert, BaseException), cert
        assert report(cert) == single
    assert results[0].variance[0].looks == (50, 100, 200)


def test_distributed_checkpoint_resumes_in_one_process(monkeypatch, tmp_path):
    kwargs = dict(replicates=50, max_replicates=200, seed=3, algebra_points=1)
    single = report(kcert.certify(make_case(), **kwargs))
    path = tmp_path / "run.npz"
    results = run_ranks(monkeypatch, 3, checkpoint=path, **kwargs)
    assert not any(isinstance(r, BaseException) for r in results)
    monkeypatch.undo()
    assert report(kcert.certify(make_case(), checkpoint=path, resume=True, **kwargs)) == single


def test_ranks_resume_a_checkpoint_with_a_raised_cap(monkeypatch, tmp_path):
    """Rank 0 reads a one-process checkpoint written under a lower cap; the ranks take the further looks
    together, to the one-process certificate of the larger plan (its note on the level aside)."""
    kwargs = dict(replicates=50, seed=3, algebra_points=1)
    single = report(kcert.certify(make_case(), max_replicates=200, **kwargs))
    path = tmp_path / "run.npz"
    kcert.certify(make_case(), max_replicates=100, checkpoint=path, **kwargs)
    results = run_ranks(monkeypatch, 3, checkpoint=path, resume=True, max_replicates=200, **kwargs)
    for cert in results:
        assert not isinstance(cert, BaseException), cert
        mine = report(cert)
        assert any(n.startswith("looks extended on resume") for n in mine["notes"])
        mine["notes"] = [n for n in mine["notes"] if not n.startswith("looks extended on resume")]
        assert mine == single


def test_a_kernel_error_on_one_rank_stops_every_rank_with_the_one_process_message(monkeypatch):
    kwargs = dict(replicates=200, max_replicates=200, seed=3, algebra_points=1)
    with pytest.raises(kcert.errors.KernelError) as single:
        kcert.certify(make_case(fragile_rmsnorm), **kwargs)
    assert "overflow guard tripped" in str(single.value)
    results = run_ranks(monkeypatch, 3, prod=fragile_rmsnorm, **kwargs)
    for error in results:
        assert isinstance(error, kcert.errors.KernelError) and str(error) == str(single.value)


CASEFILE = rms_bf16_casefile(64)


def test_torchrun_two_cpu_ranks_match_one_process(tmp_path, capsys):
    """torchrun --nproc-per-node 2 (gloo) writes the JSON of a one-process run, date and wall time aside.
    The one-process runs go through the command line in this process (a process start each is most of
    their cost); the two ranks are real torchrun processes."""
    from kcert.cli import main

    cases = tmp_path / "cases.py"
    cases.write_text(CASEFILE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}
    args = ["certify", str(cases), "-R", "100", "--max-replicates", "400", "-s", "3"]
    one = main([*args, "--json", str(tmp_path / "one.json")])
    assert one in (0, 1, 3), capsys.readouterr().err
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "kcert", *args, "--json", str(tmp_path / "two.json"),
                          "--checkpoint", str(tmp_path / "two.npz")],
                         env=env, capture_output=True, text=True, timeout=120)
    # rank 0 carries the exit code; torchrun turns any non-zero one into its own failure
    assert (two.returncode == 0) == (one == 0), two.stderr
    assert two.stdout.count("reproduce: kcert certify") == 1  # only rank 0 renders

    def load(name):
        data = json.loads((tmp_path / name).read_text())
        return stable_report(data[0] if isinstance(data, list) else data)

    assert load("two.json") == load("one.json")
    # the checkpoint written by the two ranks resumes in one process to the same certificate
    again = main([*args, "--json", str(tmp_path / "again.json"), "--checkpoint", str(tmp_path / "two.npz"), "--resume"])
    assert again == one, capsys.readouterr().err
    assert load("again.json") == load("one.json")
