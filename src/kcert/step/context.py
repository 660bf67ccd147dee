"""What prod's step code receives on each rank: :class:`StepContext`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .batch import IGNORE_INDEX


@dataclass(frozen=True)
class StepContext:
    """One rank's view of the step, given to prod's step function with the model.

    prod runs its micro-batches (forward, backward, gradient accumulation into ``param.grad``), its
    own loss aggregation and gradient reduction across ranks (``torch.distributed``: the default
    process group is initialized, gloo), and returns the step's loss (``{"loss": ..., "grad_norm":
    ...}`` when the step certifies a grad norm). kcert reads the gradients from ``param.grad``
    afterwards: rank 0's for a replicated parameter, each rank's chunk for a sharded one.

    Attributes
    ----------
    rank, world : int
        This rank and the number of ranks (``torch.distributed.get_rank()`` and ``get_world_size()``).
    accumulation_steps : int
        The configured accumulation steps ``k``.
    micro_batches : list of dict
        This rank's micro-batches (``window`` of them; fewer than ``k`` in a partial window), each a
        dict of tensors as :func:`kcert.step.batch.unpack` makes (``split="context"``: the rank's
        positions, with their ``position_ids``).
    split : str
        ``"data"``, ``"context"`` or ``"tensor"``.
    ignore_index : int
        The label no loss counts.
    real : str or None
        ``"float64"`` or ``"float32"`` when the step runs in real mode (the algebra gate), else None.

    Examples
    --------
    A correct data-parallel step with token-weighted accumulation is ``token_weighted`` in
    ``examples/training_steps.py``: the valid tokens of every micro-batch, all-reduced over the ranks,
    divide each micro-batch's summed token loss; the gradients are all-reduced with a sum.

    >>> import kcert
    >>> ctx = kcert.StepContext(rank=0, world=1, accumulation_steps=2, micro_batches=[], split="data")
    >>> ctx.world, ctx.accumulation_steps, ctx.real
    (1, 2, None)
    """

    rank: int
    world: int
    accumulation_steps: int
    micro_batches: list
    split: str
    ignore_index: int = IGNORE_INDEX
    real: str | None = None

    def valid_tokens(self, micro_batch: dict) -> int:
        """The labels of ``micro_batch`` a token loss counts (``shift_labels != ignore_index``)."""
        return int((micro_batch["shift_labels"] != self.ignore_index).sum())

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """``torch.distributed.all_reduce`` of ``tensor`` in place (``op``: "sum", "avg", "max"), returned."""
        import torch.distributed as dist

        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "avg": "avg"}
        if op not in ops:
            raise ValueError(f"StepContext.all_reduce: op must be one of {sorted(ops)}, got {op!r}")
        if op == "avg":  # gloo has no AVG: sum, then divide
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            return tensor.div_(self.world)
        dist.all_reduce(tensor, op=ops[op])
        return tensor
