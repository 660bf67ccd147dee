"""Scale-out over ``torch.distributed`` (``torchrun --nproc-per-node N -m kcert certify ...``).

Only the execution layer knows about process groups: ``kcert.certify`` asks :func:`current` for a
communicator (a single-process one unless a process group of more than one rank is initialized)
and shards the accumulation blocks of :mod:`kcert.execution.runner` over its ranks. The command
line initializes and destroys the group with :func:`process_group` when torchrun launched it.
"""

from __future__ import annotations

import contextlib
import os
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


def current() -> SingleProcess | TorchDistributed:
    """The communicator of this process: torch.distributed when a group of > 1 rank is up."""
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
