"""Scale-out over ``torch.distributed`` (``torchrun --nproc-per-node N -m kcert certify ...``).

Only the execution layer knows about process groups: ``kcert.certify`` asks :func:`current` for a
communicator (a single-process one unless a process group of more than one rank is initialized)
and shards the accumulation blocks of :mod:`kcert.execution.runner` over its ranks. ``kcert model`` may
instead give each rank whole certifications (:func:`alone`, a queue on :meth:`TorchDistributed.counter`).
The command line initializes and destroys the group with :func:`process_group` when torchrun launched it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable
from typing import Any, Iterator

import torch


class SingleProcess:
    """The communicator of a plain, one-process run."""

    rank = 0
    world = 1
    backend = None

    def all_gather(self, obj: Any) -> list:
        return [obj]

    def broadcast(self, obj: Any) -> Any:
        return obj

    def barrier(self) -> None:
        pass

    def counter(self, key: str) -> Callable[[int], int]:
        """A counter of this process alone (see :meth:`TorchDistributed.counter`)."""
        total = [0]

        def add(n: int) -> int:
            total[0] += n
            return total[0]

        return add


class TorchDistributed:
    """Collectives over the default ``torch.distributed`` process group (objects are pickled by
    torch; they are kcert's own plain data: dicts, strings, numpy arrays)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.backend = str(dist.get_backend())

    def all_gather(self, obj: Any) -> list:
        out: list = [None] * self.world
        self._dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        box = [obj if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        self._dist.barrier()

    def counter(self, key: str) -> Callable[[int], int] | None:
        """A counter shared by the ranks: ``add(n)`` adds n and returns the total, atomically, so ranks can take
        work from one queue (``add(1) - 1`` is the next item for whichever rank asks first) and raise a flag
        (``add(0)`` reads it). Backed by the group's key-value store (``Store.add`` is atomic); None when that
        store is not reachable (the caller then deals the work out statically)."""
        try:
            from torch.distributed import distributed_c10d

            store = distributed_c10d._get_default_store()  # private accessor; public Store.add on what it returns
        except (AttributeError, RuntimeError, ValueError):
            return None
        return lambda n: int(store.add(key, n))


# Set inside :func:`alone`: this rank computes what it is given by itself (kcert model's rows shared out whole).
_ALONE: contextvars.ContextVar[bool] = contextvars.ContextVar("kcert_alone", default=False)


@contextlib.contextmanager
def alone() -> Iterator[SingleProcess]:
    """Within it, :func:`current` is the one-process communicator on every rank: a certification run here is
    this rank's own (``certify_model(shard="rows")`` gives each rank whole rows); the group stays up."""
    token = _ALONE.set(True)
    try:
        yield SingleProcess()
    finally:
        _ALONE.reset(token)


def current() -> SingleProcess | TorchDistributed:
    """The communicator of this process: torch.distributed when a group of > 1 rank is up (and not inside
    :func:`alone`)."""
    if _ALONE.get():
        return SingleProcess()
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch built without distributed
        return SingleProcess()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return TorchDistributed()
    return SingleProcess()


def launched_by_torchrun() -> bool:
    """Whether the environment names a process group of more than one rank (torchrun sets it)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def local_device(device: str) -> str:
    """``cuda`` becomes ``cuda:LOCAL_RANK`` so that the ranks of a node use one GPU each."""
    if device == "cuda" and launched_by_torchrun():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


@contextlib.contextmanager
def process_group(device: str) -> Iterator[SingleProcess | TorchDistributed]:
    """Initialize the default group from torchrun's environment (``env://``): nccl when the
    device is CUDA, gloo otherwise; destroyed on exit."""
    if not launched_by_torchrun():
        yield SingleProcess()
        return
    import torch.distributed as dist

    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    try:
        yield current()
    finally:
        dist.destroy_process_group()
