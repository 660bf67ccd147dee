"""The two sides of a step case, as the kernels a :class:`kcert.Case` calls.

- :class:`RefStep`: ref's step in this process on the whole batch: ``Step.loss``, then the
  gradients of every certified parameter by autograd (through autograd's engine entry, as
  :func:`kcert.gradients` does, so a custom ``autograd.Function``'s backward stays in real mode). The
  parameters are fresh leaves made from the case's weights at every call, bound into the model, so
  the oracle (ref in real mode) differentiates float64 leaves and gets float64 gradients.
- :class:`RankStep`: prod's step on the rank pool (:mod:`kcert.step.pool`): the batch is cut into
  cells (:func:`kcert.step.batch.plan`), every rank gets its micro-batches, and the answers are
  assembled into the same outputs as ref's: rank 0's loss (and grad norm), rank 0's gradient of a
  replicated parameter, the ranks' chunks of a sharded one put back together. Called inside real
  mode (the algebra gate), it asks the ranks for a real-mode step at that dtype.

Both return ``(loss, grad, [grad_norm])`` (``grad``: every certified parameter's gradient in one vector,
:mod:`kcert.step.gradients`), for one batch or for a stack of batches (the runner's batched
evaluation: each replicate of the stack is still its own step); both time their calls (:class:`Timing`), which is
what the step certificate's cost split reports.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch

from ..backward import _backward as engine_backward  # autograd's engine entry (see kcert.backward)
from ..errors import KernelError, RealModeUnsupported
from .. import rounding
from .batch import plan, rank_cells, unpack
from .config import StepConfig
from .gradients import GradientLayout
from .model import Parameters, bound
from .pool import RankPool
from .spec import Step


def real_dtype() -> torch.dtype | None:
    """The dtype of the innermost real mode active in this thread, or None."""
    active = getattr(rounding.real_mode_state, "dtypes", None)
    return active[-1] if active else None


@dataclass
class Timing:
    """Seconds and calls per role: ``ref`` (working precision), ``oracle`` (ref in real mode, the
    algebra gate's real-mode ref included), ``prod`` (the ranks, as the parent waits for them)."""

    seconds: dict = field(default_factory=lambda: {"ref": 0.0, "oracle": 0.0, "prod": 0.0, "prod_real": 0.0})
    calls: dict = field(default_factory=lambda: {"ref": 0, "oracle": 0, "prod": 0, "prod_real": 0})

    @contextlib.contextmanager
    def time(self, role: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[role] += time.perf_counter() - started
            self.calls[role] += 1


def output_names(grad_norm: bool) -> tuple[str, ...]:
    return ("loss", "grad") + (("grad_norm",) if grad_norm else ())


def _global_norm(grads) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def _stacked(batch: torch.Tensor, one) -> tuple[torch.Tensor, ...]:
    """``one(packed batch)`` for a batch ``(3, B, L)``, or for each batch of a stack ``(R, 3, B, L)``
    with every output stacked (the runner evaluates several replicates per call:
    ``Case.independent_leading_axis``)."""
    if batch.dim() == 3:
        return one(batch)
    outs = [one(b) for b in batch]
    return tuple(torch.stack(list(parts)) for parts in zip(*outs))


class RefStep:
    """ref: the whole batch in one process (module docstring)."""

    def __init__(self, step: Step, module: torch.nn.Module, params: Parameters, layout: GradientLayout,
                 timing: Timing):
        self.step, self.module, self.params, self.layout, self.timing = step, module, params, layout, timing
        self.__name__ = f"ref step of {step.name!r}"

    def __call__(self, batch: torch.Tensor, **weights) -> tuple[torch.Tensor, ...]:
        real = real_dtype()
        with self.timing.time("oracle" if real is not None else "ref"):
            ignore = self.step.batch.ignore_index
            return _stacked(batch, lambda b: self._step(unpack(b, ignore), weights, real))

    def _step(self, batch: dict, weights: dict, real) -> tuple[torch.Tensor, ...]:
        step, names = self.step, self.params.names
        leaves = [weights[w].detach().clone().requires_grad_() for w in self.params.weights]
        autocast = (torch.autocast("cpu", dtype=step.autocast_dtype) if step.autocast_dtype is not None and real is None
                    else contextlib.nullcontext())
        with torch.enable_grad(), bound(self.module, dict(zip(names, leaves))), autocast:
            loss = step.loss(self.module, batch)
            if not (isinstance(loss, torch.Tensor) and loss.is_floating_point() and loss.numel() == 1):
                got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
                raise KernelError(f"step {step.name!r}: loss(model, batch) must return a one-element floating tensor, "
                                  f"got {got}")
            if not loss.requires_grad:
                raise KernelError(f"step {step.name!r}: the loss does not require grad (computed under no_grad, or "
                                  f"detached): it has no gradient with respect to the parameters")
            grads = engine_backward([loss], leaves, [torch.ones_like(loss)])
        flat = self.layout.flatten(grads) if real is None else torch.cat([g.reshape(-1) for g in grads])
        out = (loss.detach().reshape(()), flat)
        return out + ((_global_norm(grads),) if step.grad_norm else ())


class RankStep:
    """prod: the step on the rank pool (module docstring). ``disagreement[name]`` is the largest
    relative difference ``|g_r - g_0| / |g_0|`` seen between a rank's and rank 0's gradient of a
    replicated parameter (0 when every rank holds the same gradient)."""

    def __init__(self, step: Step, config: StepConfig, params: Parameters, layout: GradientLayout, pool: RankPool,
                 timing: Timing):
        self.step, self.config, self.params, self.layout = step, config, params, layout
        self.pool, self.timing = pool, timing
        self.disagreement: dict[str, float] = {}
        self.real_refused: dict[str, str] = {}  # real-mode dtype -> why the step could not run there
        self.__name__ = f"prod step of {step.name!r} at {config.label}"

    def __call__(self, batch: torch.Tensor, **weights) -> tuple[torch.Tensor, ...]:
        real = real_dtype()
        real_name = None if real is None else str(real).removeprefix("torch.")
        if real_name in self.real_refused:  # it failed there once: the same step fails again
            raise RealModeUnsupported(self.real_refused[real_name])
        # the messages are kcert's own bookkeeping: an enclosing real mode stands aside
        with self.timing.time("prod_real" if real is not None else "prod"), rounding.bypass():
            self._check_weights(weights, real)
            stack = batch if batch.dim() == 4 else batch.unsqueeze(0)
            ignore = self.step.batch.ignore_index
            batches = [unpack(b, ignore) for b in stack]
            per_rank = [[] for _ in range(self.config.world)]
            for b in batches:
                for rank, job in enumerate(self.jobs(b, real_name)):
                    per_rank[rank].append(job)
            try:
                answers = self.pool.run(per_rank)  # one message round for the whole stack
            except RealModeUnsupported as exc:
                self.real_refused[real_name] = str(exc)
                raise
            outs = [self._assemble([a[i] for a in answers], real is not None) for i in range(len(batches))]
        if batch.dim() == 3:
            return outs[0]
        return tuple(torch.stack(list(parts)) for parts in zip(*outs))

    def _check_weights(self, weights: dict, real) -> None:
        """The ranks hold the run's parameters: a call with other values (a precision ladder's rung
        rounds them) cannot be evaluated there; in real mode the values must be the run's exactly."""
        for name, w in zip(self.params.names, self.params.weights):
            own, given = self.params.values[name], weights[w]
            same = torch.equal(given, own.to(given.dtype)) if real is not None else (
                given.dtype == own.dtype and torch.equal(given, own))
            if not same:
                raise KernelError(f"step {self.step.name!r}: prod's ranks hold the run's parameters; this call passes "
                                  f"{name!r} as {given.dtype} with other values (a precision ladder's rung): the "
                                  f"step runs at its own precision only")

    def jobs(self, batch: dict, real: str | None) -> list[dict]:
        """Rank ``r``'s job for one batch: its micro-batches."""
        ignore = self.step.batch.ignore_index
        cells = plan(batch, self.config, ignore, f"step {self.step.name!r}")
        return [{"real": real, "ignore_index": ignore,
                 "micro_batches": [c.take(batch) for c in rank_cells(cells, r)]} for r in range(self.config.world)]

    def _assemble(self, answers: list[dict], real: bool) -> tuple[torch.Tensor, ...]:
        first = answers[0]
        grads = []
        for name in self.params.names:
            if self.config.split == "tensor" and name in self.step.shards:
                grads.append(torch.cat([a["grads"][name] for a in answers], dim=self.step.shards[name]))
                continue
            g0 = first["grads"][name]
            grads.append(g0)
            scale = float(torch.linalg.vector_norm(g0.double()))
            for a in answers[1:]:
                diff = float(torch.linalg.vector_norm(a["grads"][name].double() - g0.double()))
                worst = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
                self.disagreement[name] = max(self.disagreement.get(name, 0.0), worst)
        flat = self.layout.flatten(grads) if not real else torch.cat([g.reshape(-1) for g in grads])
        out = (first["loss"], flat)
        return out + ((first["grad_norm"],) if self.step.grad_norm else ())
