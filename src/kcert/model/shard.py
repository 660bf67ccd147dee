"""A ``certify_model`` run's rows shared out whole among torchrun's ranks (``shard="rows"``, docs/model.md,
"Checkpoints, time and ranks").

The other way shares each row's replicates among the ranks, as ``kcert certify`` shares a case's: every
rank runs every row, and the ranks meet at each block of replicates and each look of the variance gate. Here
each rank takes whole rows from one queue and runs them alone; the ranks meet once, at the end, to gather the
rows. A row's certificate does not depend on the rank that ran it (its replicates are seeded by index), so
the gathered certificate is the one-process certificate, times aside.

The queue hands the costliest rows out first (longest-processing-time order: a large row taken last would
leave the other ranks idle), by a cost the caller estimates before any row runs. Pure scheduling: the rows
are run by a callable, and collectives go through :mod:`kcert.execution.distributed`'s communicator.
"""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..errors import KcertError

Job = TypeVar("Job")

SHARDS = ("replicates", "rows")  # what the ranks share: each row's replicates (the default), or whole rows (here)
POLL_SECONDS = 0.2  # how often a rank that has run out of rows looks whether the others have too


def longest_first(costs: Sequence[float]) -> list[int]:
    """Job positions by decreasing cost (ties: the earlier job first)."""
    return sorted(range(len(costs)), key=lambda i: (-costs[i], i))


def deal(costs: Sequence[float], world: int) -> list[list[int]]:
    """A static split, used when the ranks share no counter: each job, costliest first, to the rank with the
    least cost so far (ties: the lower rank)."""
    hands: list[list[int]] = [[] for _ in range(world)]
    loads = [0.0] * world
    for i in longest_first(costs):
        rank = min(range(world), key=lambda r: (loads[r], r))
        hands[rank].append(i)
        loads[rank] += costs[i]
    return hands


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling (it is sent to the other ranks), else a KcertError with its message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception that does not pickle is sent as its message
        return KcertError(f"{type(exc).__name__}: {exc}")


def run_shared(jobs: Sequence[Job], costs: Sequence[float], run: Callable[[Job], Any], comm,
               failure: Callable[[Exception, int], BaseException] = lambda exc, finished: exc) -> list[Any]:
    """Run every job once over the ranks of ``comm`` and return every job's result, in job order, on every rank.

    Each rank takes the next job of the shared queue (costliest first) until the queue is empty. A job that
    raises stops the queue (the other ranks finish the job they are running, take no other); after the
    gather every rank raises ``failure(exc, finished)`` for the lowest-positioned failed job's exception and
    the number of jobs finished on all ranks, so all ranks stop with one message and none waits for another."""
    if len(costs) != len(jobs):
        raise ValueError(f"run_shared: {len(jobs)} jobs but {len(costs)} costs")
    order = longest_first(costs)
    key = comm.broadcast(uuid.uuid4().hex)  # one queue per call, named alike on every rank
    queue, stop = comm.counter(f"kcert/rows/{key}/next"), comm.counter(f"kcert/rows/{key}/stop")
    arrived = comm.counter(f"kcert/rows/{key}/arrived")
    if queue is None or stop is None:  # no shared counter: the same static split on every rank
        mine = iter(deal(costs, comm.world)[comm.rank])

        def take() -> int | None:
            return next(mine, None)

        def stopped() -> bool:
            return False
    else:
        def take() -> int | None:
            k = queue(1) - 1
            return order[k] if k < len(order) else None

        def stopped() -> bool:
            return stop(0) > 0

    done: dict[int, Any] = {}
    failed: tuple[int, Exception] | None = None
    while not stopped():
        i = take()
        if i is None:
            break
        try:
            done[i] = run(jobs[i])
        except Exception as exc:  # noqa: BLE001 - re-raised on every rank after the gather
            failed = (i, _portable(exc))
            if stop is not None:
                stop(1)
            break
    if arrived is not None:  # wait for the others on the store, not in a collective: a rank done early may wait
        arrived(1)           # longer than the group's collective timeout (30 minutes by default) for a long row
        while arrived(0) < comm.world:
            time.sleep(POLL_SECONDS)
    gathered = comm.all_gather((done, failed))
    failures = sorted((f for _, f in gathered if f is not None), key=lambda f: f[0])
    results: dict[int, Any] = {}
    for part, _ in gathered:
        results.update(part)
    if failures:
        raise failure(failures[0][1], len(results))
    missing = [i for i in range(len(jobs)) if i not in results]
    if missing:  # cannot happen unless a rank left the queue early without a failure
        raise KcertError(f"rows shared among ranks: jobs {missing} ran on no rank")
    return [results[i] for i in range(len(jobs))]

