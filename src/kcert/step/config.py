"""How prod executes a training step: :class:`StepConfig`, one configuration as data
(docs/training-graph.md, "Configurations").

A configuration names the accumulation steps ``k``, the micro-batches actually present in this
optimizer step (``window``: fewer than ``k`` in the last, partial window of an epoch), the number of
ranks ``n`` and how the batch is split among them. Its :meth:`StepConfig.quantities` are the
numbers a configuration-dependent defect is usually a function of; the diagnosis matches a constant
ratio prod/ref against them (docs/training-graph.md, "Diagnosis").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CaseError

SPLITS = ("data", "context", "tensor")
_SPLIT_TEXT = {
    "data": "each rank holds a contiguous share of the sequences",
    "context": "each rank holds a contiguous share of every sequence's positions",
    "tensor": "every rank holds the whole batch; declared parameters are split among the ranks",
}


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CaseError(f"StepConfig: {name} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class StepConfig:
    """One way prod executes the step: accumulation steps, micro-batches present, ranks, split.

    ref always runs the whole batch in one process, in one forward and backward. prod runs it on
    ``world`` ranks (``torch.distributed``, gloo, launched by kcert), each rank holding its share of
    the batch (``split``) cut into ``window`` micro-batches, with ``accumulation`` the number of
    micro-batches the training is *configured* to accumulate (the last window of an epoch may hold
    fewer: ``window < accumulation``).

    Parameters
    ----------
    accumulation : int, default 1
        The configured gradient accumulation steps ``k`` (>= 1).
    world : int, default 1
        The number of ranks ``n`` (>= 1).
    split : {"data", "context", "tensor"}, default "data"
        How the batch is split among the ranks: ``"data"``, contiguous shares of the sequences;
        ``"context"``, contiguous shares of every sequence's positions (the micro-batch carries its
        ``position_ids``); ``"tensor"``, the whole batch on every rank, with the step's declared
        parameter shards (:class:`kcert.Step` ``shards``) split among the ranks.
    window : int or None, default None
        Micro-batches present in this optimizer step (1 to ``accumulation``); default ``accumulation``.

    Attributes
    ----------
    micro_batches : int
        The micro-batches each rank runs: ``window``.
    label : str
        A short name, e.g. ``"k=4 (window 3), n=2 data"``.

    Raises
    ------
    kcert.CaseError
        If a count is not an integer >= 1, ``window`` exceeds ``accumulation`` or the split is unknown.

    Examples
    --------
    >>> import kcert
    >>> kcert.StepConfig(accumulation=4, window=3).label
    'k=4 (window 3)'
    >>> kcert.StepConfig(world=2, split="context").label
    'n=2 context'
    >>> kcert.StepConfig(accumulation=2, world=2).quantities()["accumulation steps"]
    2.0
    """

    accumulation: int = 1
    world: int = 1
    split: str = "data"
    window: int | None = None

    def __post_init__(self):
        _positive_int(self.accumulation, "accumulation")
        _positive_int(self.world, "world")
        window = self.accumulation if self.window is None else _positive_int(self.window, "window")
        if window > self.accumulation:
            raise CaseError(f"StepConfig: window ({window}) cannot exceed accumulation ({self.accumulation}): it "
                            "counts the micro-batches present in a window of that many")
        object.__setattr__(self, "window", window)
        if self.split not in SPLITS:
            raise CaseError(f"StepConfig: split must be one of {SPLITS}, got {self.split!r}")

    @property
    def micro_batches(self) -> int:
        return self.window

    @property
    def label(self) -> str:
        parts = []
        if self.accumulation > 1 or self.window < self.accumulation:
            window = f" (window {self.window})" if self.window < self.accumulation else ""
            parts.append(f"k={self.accumulation}{window}")
        if self.world > 1:
            parts.append(f"n={self.world} {self.split}")
        return ", ".join(parts) or "k=1, n=1"

    def quantities(self) -> dict[str, float]:
        """Named constants of this configuration, simplest first: a constant ratio prod/ref is matched
        against them (and their reciprocals) by the diagnosis."""
        k, n, m = float(self.accumulation), float(self.world), float(self.window)
        out = {"accumulation steps": k, "world size": n}
        if m != k:
            out["micro-batches in the window / accumulation steps"] = m / k
            out["micro-batches in the window"] = m
        if k > 1 and n > 1:
            out["accumulation steps x world size"] = k * n
        return out

    def describe(self) -> dict:
        return {"accumulation": self.accumulation, "world": self.world, "split": self.split, "window": self.window,
                "label": self.label, "split_meaning": _SPLIT_TEXT[self.split]}


# A sweep for a step that declares none: accumulation with a full and a partial window, data
# parallel over two ranks, and both together (a 2-core machine runs two ranks at a time).
DEFAULT_CONFIGS = (
    StepConfig(accumulation=2),
    StepConfig(accumulation=4, window=3),
    StepConfig(world=2),
    StepConfig(accumulation=2, world=2),
)
