"""Running replicates: draw probes, evaluate ref, prod and the oracle, fold each replicate into
mergeable accumulators. Memory is O(buckets + replicates) whatever R is.

Accumulation is block-structured so that any split of the work gives the same numbers bit for
bit: replicates are grouped in fixed blocks of :data:`BLOCK` (block ``b`` is replicates
``[BLOCK*b, BLOCK*b + BLOCK)``), each block is accumulated from empty in replicate order, and
blocks are merged (Chan) into the running total in block order. One process, several processes
(``torch.distributed``) and a run resumed from a checkpoint all perform exactly the same floating
point operations in the same order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..case import Case, Labels
from .. import parameters
from ..errors import KernelError, RealModeUnsupported
from ..stats.moments import MomentAccumulator
from . import probes, seeding
from .accumulator import BLOCK, EARLY_ROWS, Block, OutputAccumulator, ReplicateSummary
from .frames import kernel_frame
from .outputs import OutputLayout, Workspace, bucket_labels, check_consistent, make_layout, summarize
from .realmode import run_real


def as_outputs(value, role: str, where: str) -> tuple[torch.Tensor, ...]:
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    raise KernelError(f"{where}: {role} must return a tensor or a non-empty tuple of tensors, got {type(value).__name__}")


# Bytes of stacked probes and outputs per batched kernel call. On the CPU, stacks above glibc's
# 32 MB mmap threshold are page-faulted afresh at every call: 16 MiB measured no slower than
# unbatched, 256 MiB 2.3x slower (benchmarks/batched.py). The accelerator default is not measured.
DEFAULT_BATCH_MEMORY = {"cpu": 16 * 2**20}
DEFAULT_BATCH_MEMORY_ACCELERATOR = 256 * 2**20


def _batch_memory(value: int | None, device: torch.device) -> int:
    """Bytes per batched call: ``value`` (the settings' rule, applied again for a Runner built directly) or
    the device's default."""
    value = parameters.byte_count("batch_memory", value)
    return DEFAULT_BATCH_MEMORY.get(device.type, DEFAULT_BATCH_MEMORY_ACCELERATOR) if value is None else value


@dataclass
class RunState:
    """A runner's consistent state: what a checkpoint saves and a resumed runner loads
    (:meth:`Runner.state`, :meth:`Runner.load_state`)."""

    oracle_unavailable: str | None
    oracle_checked: bool
    layouts: list[OutputLayout] | None
    folded: int = 0
    prefix: list[OutputAccumulator] | None = None
    early: dict[int, list[dict[str, MomentAccumulator]]] | None = None
    pending: dict[int, Block] | None = None  # blocks not merged yet, none of them mid-update

    @property
    def done(self) -> int:
        """Replicates the state holds."""
        return BLOCK * self.folded + sum(b.filled for b in (self.pending or {}).values())


class Runner:
    """Evaluates a case replicate by replicate. Replicate r depends on (seed, r) alone.

    State: ``layouts`` (fixed by the first replicate), the merge of the complete blocks
    ``0 .. folded-1`` (``prefix``) and the blocks after them that are partly or wholly computed
    but not yet merged (``pending``, at most one in a single process). ``accumulators`` is the
    merge of all of them in block order. ``early`` keeps copies of the prefix's bias moments
    (:data:`EARLY_ROWS`) each time the folded block count reaches a power of two: the first
    replicates' z for L0's growth test, O(buckets log R) memory, the same on every rank and
    after a resume because blocks are folded in order.
    """

    def __init__(self, case: Case, seed: int, device: torch.device | str = "cpu", batch_memory: int | None = None):
        self.case = case
        self.batch_memory = _batch_memory(batch_memory, torch.device(device))
        # replicates per kernel call: 1 unless the case declares independent_leading_axis; then
        # set from the first replicate's bytes (see _batch_size)
        self.batch_size: int | None = None if case.independent_leading_axis else 1
        self.seed = int(seed)
        self.device = torch.device(device)
        self.weights = probes.draw_weights(case, self.seed, self.device)
        self.layouts: list[OutputLayout] | None = None
        self.prefix: list[OutputAccumulator] | None = None
        self.folded = 0
        self.pending: dict[int, Block] = {}
        self.early: dict[int, list[dict[str, MomentAccumulator]]] = {}  # folded blocks -> per output
        self._view: list[OutputAccumulator] | None = None
        self._writing: int | None = None  # block being written to (unsafe to save if interrupted)
        self.oracle_source = "given" if case.oracle is not None else "ref in real mode"
        self.oracle_unavailable: str | None = None
        self.oracle_checked = False  # whether oracle_unavailable is settled
        self.workspace = Workspace()  # scratch of the per-replicate reduction, reused

    # -- merged view ----------------------------------------------------------------------------
    @property
    def accumulators(self) -> list[OutputAccumulator] | None:
        """Every computed replicate, merged in block order (cached until the next replicate)."""
        if self._view is None and self.layouts is not None:
            view = [a.copy() for a in self.prefix] if self.prefix is not None else [OutputAccumulator.empty(l) for l in self.layouts]
            for b in sorted(self.pending):
                for acc, part in zip(view, self.pending[b].outputs):
                    acc.merge(part)
            self._view = view
        return self._view

    @property
    def done(self) -> int:
        """Replicates computed so far."""
        return BLOCK * self.folded + sum(b.filled for b in self.pending.values())

    def filled(self, b: int) -> int:
        if b < self.folded:
            return BLOCK
        return self.pending[b].filled if b in self.pending else 0

    def _fold(self) -> None:
        while self.folded in self.pending and self.pending[self.folded].complete:
            block = self.pending.pop(self.folded)
            if self.prefix is None:
                self.prefix = [OutputAccumulator.empty(l) for l in self.layouts]
            for acc, part in zip(self.prefix, block.outputs):
                acc.merge(part)
            self.folded += 1
            if self.folded & (self.folded - 1) == 0:
                self.early[self.folded] = [{row: copy.deepcopy(acc.moments[row]) for row in EARLY_ROWS}
                                           for acc in self.prefix]

    # -- state: the only way in and out of a runner ---------------------------------------------
    def state(self) -> RunState:
        """The consistent state (a block interrupted mid-update is left out); shares the arrays."""
        return RunState(self.oracle_unavailable, self.oracle_checked, self.layouts, self.folded, self.prefix,
                        self.early, self.safe_pending() if self.layouts is not None else {})

    def load_state(self, state: RunState) -> None:
        """Continue from ``state`` (a checkpoint's); only a runner that has computed nothing can."""
        if self.done or self.layouts is not None:
            raise RuntimeError("load_state needs a fresh runner: this one has computed replicates")
        self.oracle_unavailable = state.oracle_unavailable
        self.oracle_checked = state.oracle_checked
        if state.layouts is None:
            return
        self.layouts = state.layouts
        self.prefix = state.prefix
        self.folded = state.folded
        self.early = dict(state.early or {})
        for block in (state.pending or {}).values():
            self.add_block(block)

    def merge(self, layouts: list[OutputLayout] | None, blocks: list[Block]) -> None:
        """Take in blocks computed elsewhere (another rank) and the output layouts they were computed
        with, when this runner has not described its outputs yet."""
        if self.layouts is None and layouts is not None:
            self.layouts = layouts
        for block in blocks:
            self.add_block(block)

    def early_moments(self, output: int, replicates: int) -> tuple[int, dict[str, MomentAccumulator]] | None:
        """The snapshot of output ``output`` on the most replicates that are at most a quarter of
        ``replicates``: (its replicate count, its moments); None when R < 4 blocks."""
        fits = [k for k in self.early if 4 * BLOCK * k <= replicates]
        if not fits:
            return None
        k = max(fits)
        return BLOCK * k, self.early[k][output]

    # -- error context ------------------------------------------------------------------------
    def where(self, r: int | None = None) -> str:
        text = f"case {self.case.name!r}"
        if r is not None:
            text += f", replicate {r} (seed {self.seed}, replicate seed {seeding.derived_seed(self.seed, seeding.INPUTS, r)})"
        return text

    def where_batch(self, first: int, count: int) -> str:
        return (f"case {self.case.name!r}, replicates {first}-{first + count - 1} evaluated as one batch "
                f"(seed {self.seed}; independent_leading_axis=True)")

    def _call(self, role: str, fn: Callable, kwargs: dict, r: int, where: str | None = None):
        try:
            with torch.no_grad():
                return fn(**kwargs)
        except Exception as exc:
            frame = kernel_frame(exc)  # the kernel's own line, not torch's
            at = f" (at {frame})" if frame else ""
            raise KernelError(f"{where or self.where(r)}: {role} raised {type(exc).__name__}: {exc}{at}") from exc

    def _oracle(self, exact: dict, r: int, where: str | None = None):
        if self.oracle_unavailable is not None:
            return None
        if self.case.oracle is not None:
            return self._call("oracle", self.case.oracle, exact, r, where)
        try:
            with torch.no_grad():
                out = run_real(lambda: self.case.ref(**exact), dtype=torch.float64, name="ref")
            self.oracle_checked = True
            return out
        except RealModeUnsupported as exc:
            if r == 0 or not self.oracle_checked:
                self.oracle_unavailable = str(exc)
                self.oracle_checked = True
                return None
            raise KernelError(f"{self.where(r)}: ref stopped running in real mode: {exc}") from exc

    def settle_oracle(self) -> None:
        """Decide oracle availability as replicate 0 would (for a process that does not run it)."""
        if self.oracle_checked or self.case.oracle is not None:
            return
        draw = probes.draw_inputs(self.case, self.seed, 0, self.device)
        self._oracle({**draw.exact, **self.weights.exact}, 0)

    # -- one replicate ------------------------------------------------------------------------
    def step(self, r: int) -> Block:
        """Evaluate replicate ``r`` and add it to its block (which must have reached ``r``)."""
        return self._add(r, self.evaluate(r))

    def _add(self, r: int, summaries: list[ReplicateSummary]) -> Block:
        b = r // BLOCK
        block = self.pending.get(b)
        if block is None:
            if b < self.folded:
                raise RuntimeError(f"replicate {r} was already computed (block {b} is merged)")
            block = self.pending[b] = Block(b, r, 0, [OutputAccumulator.empty(l) for l in self.layouts])
        if block.next_replicate != r:
            raise RuntimeError(f"replicate {r} is out of order: block {b} is at replicate {block.next_replicate}")
        self._writing = b
        self._view = None
        for acc, summary in zip(block.outputs, summaries):
            acc.add(r, summary)
        block.filled += 1
        self._writing = None
        if block.complete:
            self._fold()
        return block

    def evaluate(self, r: int) -> list[ReplicateSummary]:
        """Run the kernels on replicate ``r`` and reduce every output; changes no accumulator."""
        draw = probes.draw_inputs(self.case, self.seed, r, self.device)
        working = {**draw.working, **self.weights.working}
        exact = {**draw.exact, **self.weights.exact}
        ref_out, prod_out, oracle_out = self._kernels(working, exact, r, self.where(r))
        if self.batch_size is None:
            self.batch_size = self._batch_size(draw, ref_out, prod_out, oracle_out)
        return self._summaries(r, draw, ref_out, prod_out, oracle_out)

    def evaluate_batch(self, first: int, count: int) -> list[list[ReplicateSummary]]:
        """Evaluate replicates ``[first, first + count)`` with one call of each kernel on their
        probes stacked along a new leading axis (``Case.independent_leading_axis``); every
        replicate draws exactly as alone, and its slice of the outputs is reduced on its own."""
        if count == 1 or not self.case.independent_leading_axis:
            return [self.evaluate(r) for r in range(first, first + count)]
        where = self.where_batch(first, count)
        draws = [probes.draw_inputs(self.case, self.seed, r, self.device) for r in range(first, first + count)]
        working = {k: torch.stack([d.working[k] for d in draws]) for k in self.case.inputs}
        exact = {k: torch.stack([d.exact[k] for d in draws]) for k in self.case.inputs}
        outs = self._kernels({**working, **self.weights.working}, {**exact, **self.weights.exact}, first, where)
        for role, tensors in zip(("ref", "prod", "the oracle"), outs):
            for i, t in enumerate(tensors or ()):
                if t.dim() == 0 or t.shape[0] != count:
                    raise KernelError(
                        f"{where}: output {i} of {role} has shape {tuple(t.shape)}, but a batch of {count} replicates "
                        f"needs a leading axis of {count}; does the case really treat a leading axis independently?"
                    )
        return [
            self._summaries(first + i, d, *(None if o is None else tuple(t[i] for t in o) for o in outs))
            for i, d in enumerate(draws)
        ]

    def _batch_size(self, draw: probes.Draw, *outputs) -> int:
        """Replicates per kernel call: ``batch_memory`` over one replicate's bytes (its probes in
        working precision and float64, and every output), at most a block."""
        tensors = list(draw.working.values()) + [t for t in draw.exact.values() if t.is_floating_point()]
        tensors += [t for out in outputs if out is not None for t in out]
        one = sum(t.numel() * t.element_size() for t in tensors)
        return max(1, min(BLOCK, self.batch_memory // max(one, 1)))

    def _kernels(self, working: dict, exact: dict, r: int, where: str):
        ref_out = as_outputs(self._call("ref", self.case.ref, working, r, where), "ref", where)
        prod_out = as_outputs(self._call("prod", self.case.prod, working, r, where), "prod", where)
        if len(ref_out) != len(prod_out):
            raise KernelError(f"{where}: ref returns {len(ref_out)} outputs but prod returns {len(prod_out)}")
        raw_oracle = self._oracle(exact, r, where)
        oracle_out = None
        if raw_oracle is not None:
            oracle_out = as_outputs(raw_oracle, "oracle", where)
            if len(oracle_out) != len(ref_out):
                raise KernelError(f"{where}: the oracle returns {len(oracle_out)} outputs but ref returns {len(ref_out)}")
        return ref_out, prod_out, oracle_out

    def _summaries(self, r: int, draw: probes.Draw, ref_out, prod_out, oracle_out) -> list[ReplicateSummary]:
        """Check replicate ``r``'s outputs against the layouts and reduce them."""
        where = self.where(r)
        n = len(ref_out)
        if self.layouts is None:
            layouts = []
            for i, (a, b) in enumerate(zip(ref_out, prod_out)):
                name = self.case.output_name(i, n)
                layouts.append(make_layout(i, name, a, b, self.case.bucket_spec(i, n), where, self.device))
            self.layouts = layouts
        elif n != len(self.layouts):
            raise KernelError(f"{where}: the kernels now return {n} outputs, {len(self.layouts)} before")

        summaries = []
        for layout, a, b, i in zip(self.layouts, ref_out, prod_out, range(n)):
            # every replicate: attribute comparisons only, so no reduction path ever sees a tensor it
            # cannot read (another device, another dtype than the layout's)
            for role, t in (("ref", a), ("prod", b)):
                check_consistent(layout, role, t, self.device, where)
            o = None
            if oracle_out is not None:
                o = oracle_out[i]
                if tuple(o.shape) != layout.shape:
                    raise KernelError(f"{where}: {layout.name} of the oracle has shape {tuple(o.shape)}, expected {layout.shape}")
                if not o.is_floating_point() or o.device.type != self.device.type:
                    kind = str(o.dtype).removeprefix("torch.")
                    raise KernelError(f"{where}: {layout.name} of the oracle is a {kind} tensor on {o.device}; the "
                                      f"oracle must return floating values on {self.device}")
            labels = None
            if isinstance(layout.spec, Labels):
                labels = bucket_labels(layout.spec, draw.working, self.weights.working, a, f"{where}, {layout.name}")
            summaries.append(summarize(layout, a, b, o, labels, self.workspace))
        return summaries

    def _run_range(self, start: int, stop: int, progress: Callable[[int], None] | None) -> Block | None:
        """Replicates ``[start, stop)`` of one block, in batches of ``batch_size``, added in order."""
        block = None
        r = start
        while r < stop:
            count = 1 if self.batch_size is None else min(self.batch_size, stop - r)
            for i, summaries in enumerate(self.evaluate_batch(r, count)):
                block = self._add(r + i, summaries)
                if progress is not None:
                    progress(1)
            r += count
        return block

    def run_block(self, b: int, stop: int, progress: Callable[[int], None] | None = None) -> Block | None:
        """Continue block ``b`` up to replicate ``stop`` (exclusive) or its end; returns the block
        (also when it is complete and already merged), None if nothing was computed."""
        block = self.pending.get(b)
        start = block.next_replicate if block is not None else BLOCK * b
        return self._run_range(start, min(stop, BLOCK * (b + 1)), progress) or block

    def run(self, start: int, stop: int, progress: Callable[[int], None] | None = None) -> None:
        """Compute replicates ``[start, stop)`` in order, continuing the blocks they fall in.

        ``certify`` runs contiguous ranges from 0, which makes every block canonical; a bare
        range (a shard) is accumulated the same way and merges with the others via
        ``accumulators[i].merge``."""
        r = start
        while r < stop:  # batches never cross a block boundary
            end = min(stop, BLOCK * (r // BLOCK + 1))
            self._run_range(r, end, progress)
            r = end

    def blocks_to_run(self, stop: int) -> list[int]:
        """Blocks that still miss replicates below ``stop``, in order."""
        return [b for b in range(self.folded, -(-stop // BLOCK)) if self.filled(b) < min(BLOCK, stop - BLOCK * b)]

    def safe_pending(self) -> dict[int, Block]:
        """Pending blocks in a consistent state (a block interrupted mid-update is left out)."""
        return {b: blk for b, blk in self.pending.items() if b != self._writing}

    def add_block(self, block: Block) -> None:
        """Install a block computed elsewhere (another rank, a checkpoint) and fold what can be."""
        if block.index < self.folded:
            return
        self.pending[block.index] = block
        self._view = None
        self._fold()
