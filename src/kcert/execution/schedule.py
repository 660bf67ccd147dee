"""The run loop: compute replicates look by look, save checkpoints, resume, share blocks among ranks.

The looks are planned before any data is seen (:func:`look_schedule`: R, 2R, 4R, ... up to the cap),
so alpha can be spent evenly over them. After each look the caller decides whether to stop
(:func:`run_looks` takes that decision as a function: judging is the gates' job, not this module's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CheckpointError, KcertError, KernelError, TimeLimitReached
from . import checkpoint, codec
from .runner import Runner


def look_schedule(replicates: int, max_replicates: int) -> list[int]:
    """The planned looks of the variance gate: R, 2R, 4R, ... up to max_replicates. They are fixed
    before any data is seen, so alpha can be spent evenly over them."""
    looks = [replicates]
    while looks[-1] < max_replicates:
        looks.append(min(2 * looks[-1], max_replicates))
    return looks


@dataclass
class Saver:
    """Saves the run's state (on rank 0) every ``every`` replicates or ``seconds`` seconds;
    ``path`` None saves nothing."""

    path: str | None
    fingerprint: dict | None
    runner: Runner
    comm: object
    every: int = 1024
    seconds: float = 300.0
    looks: list[int] = field(default_factory=list)
    target: int = 0
    hosts: list[dict] | None = None  # checkpoint.continue_hosts's list, written with the state
    plans: list[dict] | None = None  # the earlier plans of a run whose cap was raised on resume (Resumed.plans)

    def __post_init__(self) -> None:
        self._last_done = self.runner.done
        self._last_time = time.monotonic()

    def save(self) -> None:
        if self.path is None or self.comm.rank != 0:
            return
        checkpoint.save(self.path, self.runner, self.fingerprint, self.looks, self.target, self.hosts, self.plans)
        self._last_done, self._last_time = self.runner.done, time.monotonic()

    def maybe(self) -> None:
        if self.path is None or self.comm.rank != 0:
            return
        if self.runner.done - self._last_done >= self.every or time.monotonic() - self._last_time >= self.seconds:
            self.save()


@dataclass(frozen=True)
class Resumed:
    """What a run takes from its checkpoint: the looks done, the target of the look in progress, the hosts its
    replicates ran on, and the plans its looks were judged under before this run's (empty unless a cap was raised
    on resume, now or before: :func:`kcert.execution.checkpoint.extended_plans`)."""

    looks: list[int]
    target: int
    hosts: list[dict] | None
    plans: list[dict]


def resume(path: str, fingerprint: dict, runner: Runner, comm, schedule: list[int]) -> Resumed:
    """Load the checkpoint (rank 0 reads it and sends it to the other ranks) into ``runner``. A checkpoint
    written under a lower cap (``max_replicates``) continues when its planned looks begin ``schedule``: the
    looks it judged are this run's first ones, on the same draws (each replicate is seeded by its index), so
    the run goes on to the certificate a run planned with this cap from the start gives (the looks it
    already judged did not stop it under the lower cap's larger alpha share, so neither would this one's)."""
    payload = None
    if comm.rank == 0:
        try:
            payload = checkpoint.load(path, fingerprint, extend=True)
            payload = (*payload, _plans(path, payload[0], fingerprint, schedule))
        except CheckpointError as exc:
            payload = str(exc)
    meta, arrays, plans = checkpoint.from_wire(comm.broadcast(payload))
    looks, target = checkpoint.restore(runner, meta, arrays)
    hosts = meta.get("hosts")
    return Resumed(looks, target, hosts if isinstance(hosts, list) else None, plans)


def _plans(path, meta: dict, fingerprint: dict, schedule: list[int]) -> list[dict]:
    """The plans the checkpoint's looks were judged under before this run's; refuses a raised cap whose plan
    does not begin with the checkpoint's."""
    saved = meta.get("fingerprint") or {}
    if not checkpoint.raises_cap(saved, fingerprint):
        return [dict(p) for p in meta.get("plans") or []]
    before = look_schedule(int(saved["replicates"]), int(saved["max_replicates"]))
    if schedule[:len(before)] != before:  # only when the checkpoint's cap cut its doubling short (3000 after 2048)
        raise CheckpointError(
            f"checkpoint {str(path)!r} planned its looks at {before} replicates; this run's max_replicates "
            f"{fingerprint['max_replicates']} plans {schedule}, which do not begin with them: its last look, "
            f"{before[-1]}, is not R times a power of 2, so no larger cap plans it and its looks cannot go on (start a "
            f"new run)")
    return checkpoint.extended_plans(meta, before)


@dataclass(frozen=True)
class TimeLimit:
    """The replicate phase's time limit: ``seconds`` from ``start`` (``time.monotonic()``)."""

    seconds: float
    start: float

    @property
    def passed(self) -> bool:
        return time.monotonic() - self.start >= self.seconds


def run_looks(runner: Runner, schedule: list[int], comm, saver: Saver,
              stop_after: Callable[[tuple[int, ...]], bool], progress: Callable[[int, int], None] | None = None,
              looks: list[int] | None = None, target: int | None = None,
              limit: TimeLimit | None = None) -> list[int]:
    """Run look after look of ``schedule`` until ``stop_after(looks done)`` says stop (rank 0's answer
    is sent to every rank) or the schedule ends. ``looks``/``target`` continue a resumed run;
    ``progress(done, planned)`` is called as replicates complete. On a kcert error or an interrupt
    the state computed so far is saved before the error goes on. ``limit``: past it the run stops at
    the next replicate (one process; at the next round of blocks under torch.distributed, decided by
    rank 0), saves its state and raises :class:`~kcert.errors.TimeLimitReached`. Returns the looks done."""
    looks = list(looks or [])
    target = schedule[0] if target is None else target
    done, planned = runner.done, target

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, planned)

    def out_of_time() -> None:
        if limit is not None and comm.broadcast(limit.passed if comm.world == 1 or comm.rank == 0 else None):
            raise TimeLimitReached(runner.case.name, runner.done, planned, limit.seconds, saver.path)

    try:
        while True:
            saver.looks, saver.target = looks, target
            if not (looks and looks[-1] == target):  # a resumed, finished run has nothing left to compute
                advance(runner, target, comm, tick, saver, out_of_time)
                looks.append(target)
            if comm.broadcast(stop_after(tuple(looks))) or target >= schedule[-1]:  # rank 0 decides for all
                break
            target = next(n for n in schedule if n > target)  # the next planned look
            planned = target
    except (KcertError, KeyboardInterrupt) as exc:
        try:
            saver.save()  # keep what was computed
        except OSError as save_error:
            exc.add_note(f"the checkpoint could not be saved: {save_error}")
        raise
    saver.save()
    return looks


def advance(runner: Runner, stop: int, comm, tick: Callable[[int], None], saver: Saver,
            check: Callable[[], None] = lambda: None) -> None:
    """Compute every replicate below ``stop``, block by block; under torch.distributed the blocks
    of each round go to the ranks in turn and the round's blocks are gathered by every rank.
    ``check()`` may raise to stop the run: after every replicate in one process, after every
    round under torch.distributed (every rank calls it, so all stop together)."""
    if comm.world == 1:
        def tick_and_check(n: int) -> None:
            tick(n)
            check()

        check()
        for b in runner.blocks_to_run(stop):
            runner.run_block(b, stop, tick_and_check)
            saver.maybe()
        return
    own_ticks = tick if comm.rank == 0 else None
    try:
        runner.settle_oracle()  # replicate 0 decides oracle availability, on every rank alike
        settle_error = None
    except KcertError as exc:
        settle_error = exc
    todo = runner.blocks_to_run(stop)
    for i in range(0, len(todo), comm.world):
        round_blocks = todo[i:i + comm.world]
        mine = round_blocks[comm.rank] if comm.rank < len(round_blocks) else None
        before = {b: runner.filled(b) for b in round_blocks}
        error, block = settle_error, None
        if mine is not None and error is None:
            try:
                block = runner.run_block(mine, stop, own_ticks)
            except Exception as exc:  # noqa: BLE001 - every rank must reach the gather
                error = exc
                block = runner.safe_pending().get(mine)  # what was computed before the error
        payload = {
            "error": None if error is None else (mine, type(error).__name__, str(error), isinstance(error, KcertError)),
            "layouts": None if runner.layouts is None else [codec.encode_layout(l) for l in runner.layouts],
            "block": codec.encode_block(block) if block is not None else None,
        }
        gathered = comm.all_gather(payload)
        _take_in(runner, gathered, comm.rank)
        if comm.rank == 0:
            others = sum(runner.filled(b) - before[b] for b in round_blocks if b != mine)
            if others:
                tick(others)
        errors = sorted((p["error"] for p in gathered if p["error"] is not None), key=lambda e: (e[0] is not None, e[0] or 0))
        if errors:
            if error is not None and payload["error"] == errors[0]:
                raise error
            _block, kind, message, ours = errors[0]
            raise KernelError(message if ours else f"{kind}: {message}")
        saver.maybe()
        check()


def _take_in(runner: Runner, gathered: list[dict], rank: int) -> None:
    """Merge the other ranks' blocks of a round (and their output layouts, if this rank has none)."""
    layouts = runner.layouts
    if layouts is None:
        described = next((p["layouts"] for p in gathered if p["layouts"] is not None), None)
        layouts = None if described is None else codec.decode_layouts(runner.case, described)
    blocks = [codec.decode_block(p["block"], layouts) for r, p in enumerate(gathered)
              if r != rank and p["block"] is not None]
    runner.merge(layouts, blocks)
