"""One rank of prod's step: the loop a pool process runs (:mod:`kcert.step.pool` starts it).

The rank joins a gloo process group (a file store in a private folder), builds the model and loads
the run's parameters, says it is ready, then answers jobs until told to stop: clear the gradients,
run ``Step.prod(model, ctx)`` on the micro-batches of each job of the message (one job per
replicate of the runner's stack), and send back the returned loss (and
grad norm) and every certified parameter's gradient (a sharded parameter's chunk only). Messages are
pickled tuples whose tensors travel as ``torch.save`` bytes (no shared-memory file descriptors).

A job in real mode (the algebra gate evaluating prod at float64 or float32) runs on a copy of the
model converted to that dtype under :class:`~kcert.execution.realmode.RealMode`, so that gradients
accumulate in the real dtype too (a float32 parameter would round a float64 gradient when it lands).
"""

from __future__ import annotations

import copy
import datetime
import io
import os
import signal
import traceback
from dataclasses import dataclass

import torch

from .batch import IGNORE_INDEX
from .config import StepConfig
from .context import StepContext
from .model import build_model, load
from .spec import Step

REAL_DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass(frozen=True)
class RankSpec:
    """What every rank of one configuration needs (inherited by fork, pickled by spawn)."""

    step: Step
    config: StepConfig
    seed: int
    state: dict  # every parameter's value, as the parent drew it
    certified: tuple[str, ...]  # the parameters whose gradients are sent back
    store: str  # the gloo file store
    timeout_s: float
    threads: int = 1


def dumps(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def loads(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=True)


def describe_error(exc: BaseException) -> dict:
    from ..execution.frames import kernel_frame

    frame = kernel_frame(exc)
    return {"type": type(exc).__name__, "message": str(exc), "frame": frame or "",
            "traceback": "".join(traceback.format_exception(exc))}


class _Rank:
    def __init__(self, rank: int, world: int, spec: RankSpec):
        self.rank, self.world, self.spec = rank, world, spec
        self.models: dict[str | None, torch.nn.Module] = {}

    def start(self) -> None:
        import torch.distributed as dist

        torch.set_num_threads(self.spec.threads)
        dist.init_process_group("gloo", init_method=f"file://{self.spec.store}", rank=self.rank,
                                world_size=self.world, timeout=datetime.timedelta(seconds=self.spec.timeout_s))
        model = build_model(self.spec.step, self.spec.seed)
        load(model, self.spec.state)
        self.models[None] = model

    def model(self, real: str | None) -> torch.nn.Module:
        if real not in self.models:
            self.models[real] = copy.deepcopy(self.models[None]).to(REAL_DTYPES[real])
        model = self.models[real]
        for p in model.parameters():
            p.grad = None
        return model

    def run(self, job: dict) -> dict:
        from ..execution.realmode import RealMode

        step, config, real = self.spec.step, self.spec.config, job["real"]
        model = self.model(real)
        ctx = StepContext(self.rank, self.world, config.accumulation, job["micro_batches"], config.split,
                          job.get("ignore_index", IGNORE_INDEX), real)
        with torch.enable_grad():
            if real is not None:
                with RealMode(REAL_DTYPES[real]):
                    out = step.prod(model, ctx)
            elif step.autocast_dtype is not None:
                with torch.autocast("cpu", dtype=step.autocast_dtype):
                    out = step.prod(model, ctx)
            else:
                out = step.prod(model, ctx)
        loss, grad_norm = _returned(out, step.grad_norm, self.rank)
        params = dict(model.named_parameters())
        grads = {}
        for name in self.spec.certified:
            g = params[name].grad
            g = torch.zeros_like(params[name]) if g is None else g.detach()
            if config.split == "tensor" and name in step.shards:
                g = torch.tensor_split(g, self.world, step.shards[name])[self.rank]
            grads[name] = g.clone()
        return {"loss": loss, "grad_norm": grad_norm, "grads": grads}


def _returned(out, want_norm: bool, rank: int):
    """(loss, grad_norm) from what prod returned; a bad return raises on rank 0 only (the others'
    values are not certified)."""
    if isinstance(out, dict):
        loss, norm = out.get("loss"), out.get("grad_norm")
    else:
        loss, norm = out, None
    for name, value, needed in (("loss", loss, True), ("grad_norm", norm, want_norm)):
        if rank == 0 and needed and not (isinstance(value, torch.Tensor) and value.is_floating_point()
                                         and value.numel() == 1):
            got = type(value).__name__ if not isinstance(value, torch.Tensor) else f"a tensor of shape {tuple(value.shape)}"
            shape = "the loss tensor, or {'loss': ..., 'grad_norm': ...}" if want_norm or name == "grad_norm" \
                else "the step's loss as a one-element floating tensor (or {'loss': ...})"
            raise TypeError(f"prod must return {shape}; on rank 0 its {name} is {got}")
    take = lambda v: v.detach().reshape(()).clone() if isinstance(v, torch.Tensor) and v.numel() == 1 else None  # noqa: E731
    return take(loss), take(norm) if want_norm else None


def _fresh_state() -> None:
    """Undo what a fork copies of the parent's thread: a torch-function mode on the stack (the pool may
    restart while the parent evaluates the step in real mode), real mode's bookkeeping (a bypass count
    would make the rank's own real mode stand aside), the default dtype, the grad mode."""
    from .. import rounding

    while torch._C._len_torch_function_stack() > 0:
        torch._C._pop_torch_function_stack()
    rounding.real_mode_state.bypass = 0
    rounding.real_mode_state.dtypes = []
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)


def main(rank: int, world: int, spec: RankSpec, conn, inherited=()) -> None:
    """The process of one rank (the target of the pool's processes); ``inherited``: the parent's pipe
    ends a fork copied, closed here."""
    import torch.distributed as dist

    for other in inherited:
        other.close()
    _fresh_state()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the pool
    os.environ.setdefault("OMP_NUM_THREADS", str(spec.threads))
    worker = _Rank(rank, world, spec)
    try:
        worker.start()
        conn.send(("ready", None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", describe_error(exc)))
        return
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:  # the parent went away
                break
            if message[0] == "stop":
                break
            jobs = loads(message[1])
            try:
                answer = ("ok", dumps([worker.run(job) for job in jobs]))
            except Exception as exc:  # noqa: BLE001 - the user's step raised: the parent names it
                answer = ("error", {**describe_error(exc), "real": jobs[0]["real"] if jobs else None})
            try:
                conn.send(answer)
            except OSError:  # the parent went away
                break
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        conn.close()
