"""``certify_model(shard="rows")`` (docs/model.md, "Checkpoints, time and ranks"): whole rows shared out among
ranks from one queue. The queue's logic runs on in-process ranks (threads with a pickling all-gather and a
shared counter); one test launches real torchrun with two CPU ranks and compares the JSON with one process."""

import copy
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kcert
from kcert.errors import KernelError, ModelTimeLimitReached, TimeLimitReached
from kcert.model.shard import deal, longest_first, run_shared
from kcert.report.stable import stable_model_dict
from sample_kernels import ThreadRanks
from model_fixtures import write_defect_pair_file


class Ranks(ThreadRanks):
    """In-process ranks running at once, with the store's shared counters (or without: ``counters=False``, as
    when the group's store is not reachable)."""

    def __init__(self, world, counters=True):
        super().__init__(world, serial=False, counters=counters)

    def run(self, jobs, costs, work, **kw):
        """run_shared on every rank; per rank: (its result or the exception it raised, the jobs it ran)."""
        out = [None] * self.world

        def go(rank):
            ran = []

            def job(j):
                ran.append(j)
                return work(j, rank)

            try:
                out[rank] = (run_shared(jobs, costs, job, self.comm(rank), **kw), ran)
            except BaseException as exc:  # noqa: BLE001 - inspected by the test
                out[rank] = (exc, ran)

        threads = [threading.Thread(target=go, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out


def test_longest_first_and_the_static_deal_balance_the_costs():
    assert longest_first([1, 5, 3, 5]) == [1, 3, 2, 0]
    hands = deal([8, 1, 1, 4, 4, 2], 2)
    assert sorted(i for h in hands for i in h) == list(range(6))
    assert [sum([8, 1, 1, 4, 4, 2][i] for i in h) for h in hands] == [10, 10]


@pytest.mark.parametrize("world,counters", [(2, True), (3, True), (3, False)])
def test_every_job_runs_once_and_every_rank_gets_all_results_in_job_order(world, counters):
    jobs = [f"row{i}" for i in range(7)]
    costs = [1, 9, 2, 8, 3, 7, 0]

    def work(j, rank):
        time.sleep(0.02)  # a row takes time: the other ranks take rows meanwhile
        return j.upper()

    out = Ranks(world, counters).run(jobs, costs, work)
    ran = [j for _, r in out for j in r]
    assert sorted(ran) == sorted(jobs)  # each job on exactly one rank
    for result, _ in out:
        assert result == [j.upper() for j in jobs]
    assert sum(bool(r) for _, r in out) > 1  # shared, not all on one rank


def test_a_failing_row_stops_every_rank_with_the_lowest_failure():
    jobs = list(range(6))

    def work(j, rank):
        if j in (2, 4):
            raise KernelError(f"row {j} raised")
        return j

    for counters in (True, False):
        out = Ranks(2, counters).run(jobs, [1] * 6, work)
        for result, _ in out:
            assert isinstance(result, KernelError), result
        # the lowest-positioned failure that ran is named on every rank (with the queue, row 4 may not run)
        assert len({str(r) for r, _ in out}) == 1
        assert str(out[0][0]) in ("row 2 raised", "row 4 raised")


def test_an_exception_that_does_not_pickle_reaches_every_rank_as_its_message():
    class Odd(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a}/{b}")

    def work(j, rank):
        if j == 0:
            raise Odd(1, 2)
        return j

    out = Ranks(2).run([0, 1, 2], [3, 2, 1], work)
    for result, _ in out:
        assert isinstance(result, kcert.errors.KcertError) and "Odd: 1/2" in str(result)


def test_a_time_limit_counts_the_rows_finished_on_every_rank():
    stopped = TimeLimitReached("row b", 3, 8, 5.0, None)

    def work(j, rank):
        if j == "b":
            raise ModelTimeLimitReached("m", "row b", 0, 4, 5.0, None, stopped)
        return j

    out = Ranks(2, counters=False).run(["a", "b", "c", "d"], [4, 3, 2, 1], work,
                                       failure=lambda exc, finished: exc.with_finished(finished))
    for result, _ in out:
        assert isinstance(result, ModelTimeLimitReached)
        # the static deal: rank 0 takes a and d, rank 1 b and c; b stops rank 1 before c, so a and d finished
        assert result.done == 3 and result.finished == 2 and result.row == "row b"


def test_the_costs_must_match_the_jobs():
    with pytest.raises(ValueError, match="2 jobs but 1 costs"):
        run_shared([1, 2], [1], lambda j: j, Ranks(1).comm(0))


def test_certify_model_rejects_an_unknown_shard():
    from model_fixtures import SEQ, VOCAB, tiny

    ref = tiny()
    with pytest.raises(kcert.CaseError, match="shard must be one of 'replicates', 'rows'"):
        kcert.certify_model(ref, copy.deepcopy(ref), {"input_ids": kcert.Integers((2, SEQ), 0, VOCAB)},
                            shard="auto")


def _file(tmp_path):
    return write_defect_pair_file(tmp_path / "pairs.py", ("layers.1.norm*", "layers.1.mlp"))


def _comparable(path):
    return stable_model_dict(json.loads(Path(path).read_text()), "torch_threads")


def test_torchrun_two_ranks_sharing_rows_give_the_one_process_report(tmp_path, capsys):
    """torchrun --nproc-per-node 2 (gloo) --shard rows: the JSON of a one-process run, times aside; its
    provenance says 2 ranks shared rows; its checkpoint files (each written by the rank that ran the row)
    resume in one process to the same report."""
    from kcert.cli import main

    pairs = _file(tmp_path)
    args = ["model", str(pairs), "-R", "16", "--no-peer-rules"]
    one = main([*args, "--json", str(tmp_path / "one.json")])
    assert one == 1, capsys.readouterr().err  # the norm's defect FAILs
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "kcert", *args, "--shard", "rows", "--json", str(tmp_path / "two.json"),
                          "--checkpoint", str(tmp_path / "two.npz")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode != 0, two.stderr  # rank 0 exits 1 (FAIL); torchrun reports it as its own failure
    assert two.stdout.count("localized: layers.1.norm2") == 1, two.stdout  # only rank 0 renders
    assert _comparable(tmp_path / "two.json") == _comparable(tmp_path / "one.json")
    provenance = json.loads((tmp_path / "two.json").read_text())["provenance"]
    assert (provenance["ranks"], provenance["shard"]) == (2, "rows")
    again = main([*args, "--json", str(tmp_path / "again.json"), "--checkpoint", str(tmp_path / "two.npz"),
                  "--resume"])
    assert again == one, capsys.readouterr().err
    assert _comparable(tmp_path / "again.json") == _comparable(tmp_path / "one.json")


def test_torchrun_rows_out_of_time_stop_every_rank_with_one_message(tmp_path):
    """--shard rows --max-time spent at once: each rank stops at its first row, the ranks gather the failures,
    rank 0 reports --max-time with the rows finished over both ranks (none) and exits; no rank hangs."""
    pairs = _file(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "kcert", "model", str(pairs), "-R", "16", "--shard", "rows", "--max-time", "0.001",
                          "--checkpoint", str(tmp_path / "m.npz")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "--max-time" in run.stderr and "reached in pair 'defect' before row" in run.stderr, run.stderr[-3000:]
    assert "(0 of 7 rows finished)" in run.stderr, run.stderr[-3000:]
