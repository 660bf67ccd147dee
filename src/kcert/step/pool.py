"""A pool of persistent rank processes: prod's ranks, started once per configuration.

:class:`RankPool` starts ``world`` processes (``fork`` where the platform has it: the step's
functions need not be importable; ``spawn`` otherwise, which pickles them), each joining one gloo
process group (:mod:`kcert.step.worker`). :meth:`RankPool.run` sends every rank its job and waits for
all answers; a replicate costs one message round, not a process launch. Failures become a
:class:`~kcert.errors.KernelError` naming the rank: a rank that raises (its exception, the line of
the user's code), a rank that dies (its exit code), a rank that does not answer within
``timeout_s`` (a collective waiting for a rank that never joins). After a failure the other ranks may
be stuck in a collective: the pool stops every process and refuses further jobs.
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
import weakref
from multiprocessing.connection import wait
from pathlib import Path

from ..errors import KernelError, ParameterError, RealModeUnsupported
from .worker import RankSpec, dumps, loads, main

START_METHODS = ("fork", "spawn", "forkserver")
GRACE_S = 5.0  # how long the other ranks may take to answer after one failed, before they are stopped


def default_start_method() -> str:
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _stop(processes, conns, folder) -> None:
    """Stop every process still alive, close the pipes, remove the store (also the finalizer)."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    for c in conns:
        c.close()
    shutil.rmtree(folder, ignore_errors=True)


class RankPool:
    """``world`` persistent rank processes for one configuration (a context manager)."""

    def __init__(self, spec_fields: dict, world: int, where: str, start_method: str | None = None,
                 timeout_s: float = 300.0):
        method = start_method or default_start_method()
        if method not in multiprocessing.get_all_start_methods():
            raise ParameterError(f"start_method must be one of {multiprocessing.get_all_start_methods()}, "
                                 f"got {start_method!r}")
        self.fields, self.world, self.where, self.method, self.timeout_s = spec_fields, world, where, method, timeout_s
        self.processes: list = []
        self.conns: list = []
        self.folder: str | None = None
        self.broken: str | None = None
        self.stale = False  # a real-mode job failed: the ranks are restarted before the next job
        self.restarts = 0
        self.seconds = 0.0  # wall time spent waiting for the ranks' answers
        self.jobs = 0
        self._finalizer = None

    # -- life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> RankPool:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        ctx = multiprocessing.get_context(self.method)
        self.folder = tempfile.mkdtemp(prefix="kcert-ranks-")
        spec = RankSpec(store=str(Path(self.folder) / "store"), timeout_s=self.timeout_s, **self.fields)
        for rank in range(self.world):
            parent, child = ctx.Pipe(duplex=True)
            # a forked rank inherits the parent's ends of its pipe and of the earlier ranks': it closes
            # them, so that it reads end-of-file when the parent dies instead of waiting forever
            inherited = [*self.conns, parent] if self.method == "fork" else []
            process = ctx.Process(target=main, args=(rank, self.world, spec, child, inherited), daemon=True,
                                  name=f"kcert-rank-{rank}")
            try:
                process.start()
            except Exception as exc:  # pickling a step for spawn: functions defined in a case file
                _stop(self.processes, self.conns, self.folder)
                raise KernelError(f"{self.where}: rank {rank} could not be started with the {self.method!r} start "
                                  f"method: {type(exc).__name__}: {exc} (with 'spawn' the step's functions must be "
                                  f"importable; the default 'fork' has no such need)") from exc
            child.close()
            self.processes.append(process)
            self.conns.append(parent)
        self._finalizer = weakref.finalize(self, _stop, self.processes, self.conns, self.folder)
        answers = self._collect(self.timeout_s, "starting")
        for rank, answer in enumerate(answers):
            if answer[0] != "ready":
                self.close()
                raise KernelError(f"{self.where}: rank {rank} could not start: {_error_text(answer)} (if gloo cannot "
                                  f"reach this machine's own address, set GLOO_SOCKET_IFNAME=lo)")

    def restart(self) -> None:
        """Stop every rank and start a fresh pool (the same spec)."""
        self._finalizer()
        self.processes, self.conns, self.broken, self.stale = [], [], None, False
        self.restarts += 1
        self.start()

    def close(self) -> None:
        if self._finalizer is None or not self._finalizer.alive:
            return
        for c in self.conns:
            try:
                c.send(("stop",))
            except (OSError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 10
        for p in self.processes:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        self._finalizer()  # stops what is left, closes the pipes, removes the store

    # -- jobs -----------------------------------------------------------------------------------
    def run(self, jobs: list[list[dict]]) -> list[list[dict]]:
        """Send rank ``r`` the jobs ``jobs[r]`` (one per replicate); every rank's answers, in rank order."""
        if self.broken is not None:
            raise KernelError(f"{self.where}: the ranks were stopped after an earlier failure: {self.broken}")
        if self.stale:
            self.restart()
        started = time.perf_counter()
        for conn, job in zip(self.conns, jobs):
            conn.send(("job", dumps(job)))
        answers = self._collect(self.timeout_s, "running the step")
        self.seconds += time.perf_counter() - started
        self.jobs += 1
        failed = [rank for rank, (kind, _) in enumerate(answers) if kind != "ok"]
        if failed:
            rank = min(failed, key=lambda r: _blame(answers[r], r))
            stuck = [r for r in failed if answers[r][0] == "silent" and r != rank]
            also = f"; ranks {stuck} were still waiting (in a collective?) and were stopped" if stuck else ""
            kind, payload = answers[rank]
            real = payload.get("real") if kind == "error" else None
            if real is not None:  # the step cannot run in real mode: the algebra gate decides without it
                self.stale = True  # the other ranks may wait in a collective: fresh ones for the next job
                raise RealModeUnsupported(f"{self.where}: prod's step raised on rank {rank} when run in real mode "
                                          f"({real}): {_error_text(answers[rank])}")
            self.broken = f"rank {rank}: {_error_text(answers[rank])}{also}"
            self._finalizer()
            raise KernelError(f"{self.where}: prod's step failed on rank {rank} of {self.world}: "
                              f"{_error_text(answers[rank])}{also}")
        return [loads(payload) for _, payload in answers]

    def _collect(self, timeout_s: float, doing: str) -> list[tuple[str, object]]:
        """One answer per rank: ("ok"/"ready", payload), ("error", details), ("dead", exit code) or
        ("silent", None) for a rank that had not answered when the wait ended."""
        answers: dict[int, tuple[str, object]] = {}
        pending = {conn: rank for rank, conn in enumerate(self.conns)}
        deadline = time.monotonic() + timeout_s
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for conn in wait(list(pending), timeout=left):
                rank = pending.pop(conn)
                try:
                    answers[rank] = conn.recv()
                except (EOFError, OSError):
                    process = self.processes[rank]
                    process.join(timeout=1)
                    answers[rank] = ("dead", process.exitcode)
                if answers[rank][0] in ("error", "dead"):
                    deadline = min(deadline, time.monotonic() + GRACE_S)
        for conn, rank in pending.items():
            answers[rank] = ("silent", None)
        if len(pending) == len(self.conns):  # nobody answered: a timeout, not a failure of one rank
            self.broken = f"no rank answered within {timeout_s:g} s while {doing}"
            self._finalizer()
            raise KernelError(f"{self.where}: {self.broken} (a deadlock in the step's collectives, or a step slower "
                              f"than the rank timeout)")
        return [answers[r] for r in range(len(self.conns))]


def _blame(answer: tuple[str, object], rank: int) -> tuple:
    """Which failed rank is the cause: a rank that died, then one that raised on its own (not a
    collective that lost its peer), then one that stayed silent (waiting for the others)."""
    kind, payload = answer
    lost_peer = kind == "error" and "peer" in str(payload.get("message", "")).lower()
    return ({"dead": 0, "error": 1, "silent": 3}.get(kind, 2) + lost_peer, rank)


def _error_text(answer: tuple[str, object]) -> str:
    kind, payload = answer
    if kind == "error":
        at = f" (at {payload['frame']})" if payload.get("frame") else ""
        return f"{payload['type']}: {payload['message']}{at}"
    if kind == "dead":
        return f"the process died (exit code {payload})"
    if kind == "silent":
        return "it did not answer (stuck in a collective, or slower than the rank timeout)"
    return f"unexpected answer {kind!r}"
