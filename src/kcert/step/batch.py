"""The batch probe of a training step, and how a configuration splits a batch.

:class:`TokenBatch` draws a language-model batch per replicate: sequences of variable length, right
padding, labels ignored on the padding and on a prompt prefix. A draw is one int64 tensor ``(3, B,
L)`` (token ids, attention mask, labels), so the runner's probe machinery draws it from ``(seed,
replicate)`` like any probe; :func:`unpack` turns it into the dict the step's code receives.

:func:`plan` cuts a batch into *cells* for a :class:`~kcert.step.config.StepConfig`: rank ``r``'s
micro-batch ``i``. Sizes follow ``numpy.array_split`` (the first shares get one more row or position
when the sizes do not divide), so uneven tails are part of the configuration, not an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..case import Probe
from ..errors import CaseError
from .config import StepConfig

IGNORE_INDEX = -100  # the label that no loss counts (torch's and Hugging Face's default)


def _int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CaseError(f"TokenBatch: {name} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class TokenBatch(Probe):
    """A language-model batch redrawn per replicate: variable lengths, padding and ignored labels.

    Each of the ``sequences`` rows gets a length drawn uniformly in ``[min_length, length]`` (right
    padding with ``pad_id`` after it) and a prompt of ``0`` to ``prompt`` tokens whose labels are
    ignored, as in supervised fine-tuning. Token ids are uniform in ``[1, vocab)`` (0 is left to the
    padding). The step's code receives a dict (:func:`kcert.step.batch.unpack`): ``input_ids``,
    ``attention_mask``, ``labels`` (Hugging Face convention: unshifted, ``ignore_index`` where no
    loss is taken), ``shift_labels`` (shifted once, for losses computed on a share of the positions),
    ``position_ids``.

    Parameters
    ----------
    sequences : int
        Rows of the batch ``B`` (>= 1); a configuration needs at least one row per rank and
        micro-batch (``split="data"``).
    length : int
        Positions per row ``L`` (>= 2).
    vocab : int
        Vocabulary size (>= 2).
    min_length : int or None, default None
        Shortest drawn length (2 to ``length``); default ``max(2, length // 4)``. ``min_length ==
        length`` draws full rows (every micro-batch then holds the same number of tokens).
    prompt : int, default 0
        Longest prompt whose labels are ignored (``0 <= prompt < min_length``, so every row keeps a
        label).
    pad_id : int, default 0
        The padding token.
    ignore_index : int, default -100
        The label of positions no loss counts.

    Attributes
    ----------
    shape : tuple of int
        ``(3, sequences, length)``: the packed draw.

    Raises
    ------
    kcert.CaseError
        If a size is out of range.

    Examples
    --------
    >>> import torch, kcert
    >>> probe = kcert.TokenBatch(sequences=4, length=16, vocab=32, prompt=2)
    >>> draw = probe.sample(torch.Generator().manual_seed(0), torch.device("cpu"), torch.float32)
    >>> draw.shape, draw.dtype
    (torch.Size([3, 4, 16]), torch.int64)
    >>> sorted(kcert.step.batch.unpack(draw))
    ['attention_mask', 'input_ids', 'labels', 'position_ids', 'shift_labels']
    """

    sequences: int
    length: int
    vocab: int
    min_length: int | None = None
    prompt: int = 0
    pad_id: int = 0
    ignore_index: int = IGNORE_INDEX

    rounds_to_case_dtype = False

    def __post_init__(self):
        _int(self.sequences, "sequences", 1)
        _int(self.length, "length", 2)
        _int(self.vocab, "vocab", 2)
        shortest = max(2, self.length // 4) if self.min_length is None else _int(self.min_length, "min_length", 2)
        if shortest > self.length:
            raise CaseError(f"TokenBatch: min_length ({shortest}) cannot exceed length ({self.length})")
        object.__setattr__(self, "min_length", shortest)
        _int(self.prompt, "prompt", 0)
        if self.prompt >= shortest:
            raise CaseError(f"TokenBatch: prompt ({self.prompt}) must be below min_length ({shortest}), so that every "
                            "row keeps a label")
        for name in ("pad_id", "ignore_index"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise CaseError(f"TokenBatch: {name} must be an integer, got {getattr(self, name)!r}")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (3, self.sequences, self.length)

    def sample(self, generator, device, precision):
        b, n = self.sequences, self.length
        lengths = torch.randint(self.min_length, n + 1, (b, 1), generator=generator, device=device)
        prompts = torch.randint(0, self.prompt + 1, (b, 1), generator=generator, device=device)
        ids = torch.randint(1, self.vocab, (b, n), generator=generator, device=device)
        positions = torch.arange(n, device=device).expand(b, n)
        mask = positions < lengths
        ids = torch.where(mask, ids, torch.full_like(ids, self.pad_id))
        labels = torch.where(mask & (positions >= prompts), ids, torch.full_like(ids, self.ignore_index))
        return torch.stack([ids, mask.long(), labels])

    def describe(self):
        return {"kind": "TokenBatch", "sequences": self.sequences, "length": self.length, "vocab": self.vocab,
                "min_length": self.min_length, "prompt": self.prompt, "pad_id": self.pad_id,
                "ignore_index": self.ignore_index}


def unpack(packed: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> dict[str, torch.Tensor]:
    """The dict a step's code receives from a packed :class:`TokenBatch` draw ``(3, B, L)``."""
    ids, mask, labels = packed[0], packed[1], packed[2]
    shift = torch.full_like(labels, ignore_index)
    shift[:, :-1] = labels[:, 1:]
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids).contiguous()
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "shift_labels": shift,
            "position_ids": positions}


def valid_tokens(batch: dict[str, torch.Tensor], ignore_index: int = IGNORE_INDEX) -> int:
    """Positions of ``batch`` that a token loss counts: ``shift_labels != ignore_index``."""
    return int((batch["shift_labels"] != ignore_index).sum())


# --- cells: how a configuration cuts a batch ------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """Rank ``rank``'s micro-batch ``micro``: rows ``rows`` and positions ``columns`` of the batch,
    holding ``tokens`` valid labels. ``rank`` is None under ``split="tensor"`` (every rank holds it)."""

    rank: int | None
    micro: int
    rows: tuple[int, int]  # [start, stop)
    columns: tuple[int, int]
    tokens: int

    def take(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        (r0, r1), (c0, c1) = self.rows, self.columns
        return {k: v[r0:r1, c0:c1].contiguous() for k, v in batch.items()}

    def only(self, batch: dict[str, torch.Tensor], ignore_index: int) -> dict[str, torch.Tensor]:
        """``batch`` with every label outside this cell ignored: the whole batch's forward, this cell's loss."""
        (r0, r1), (c0, c1) = self.rows, self.columns
        keep = torch.zeros_like(batch["shift_labels"], dtype=torch.bool)
        keep[r0:r1, c0:c1] = True
        out = dict(batch)
        out["shift_labels"] = torch.where(keep, batch["shift_labels"], ignore_index)
        # labels are unshifted: position t's shifted label is labels[t + 1]
        keep_labels = torch.zeros_like(keep)
        keep_labels[:, 1:] = keep[:, :-1]
        out["labels"] = torch.where(keep_labels, batch["labels"], ignore_index)
        return out


def _ranges(size: int, parts: int) -> list[tuple[int, int]]:
    bounds = np.cumsum([0] + [len(a) for a in np.array_split(np.arange(size), parts)])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def plan(batch: dict[str, torch.Tensor], config: StepConfig, ignore_index: int = IGNORE_INDEX,
         where: str = "step") -> list[Cell]:
    """The cells of ``batch`` under ``config``, rank-major (rank 0's micro-batches first)."""
    rows, length = batch["input_ids"].shape
    n, m = config.world, config.micro_batches
    tokens = batch["shift_labels"] != ignore_index

    def cell(rank, micro, r, c):
        return Cell(rank, micro, r, c, int(tokens[r[0]:r[1], c[0]:c[1]].sum()))

    if config.split == "data":
        if rows < n * m:
            raise CaseError(f"{where}: the batch has {rows} sequences but configuration {config.label!r} needs at "
                            f"least one per rank and micro-batch ({n} x {m}); draw more sequences")
        out = []
        for r, (a, b) in enumerate(_ranges(rows, n)):
            out += [cell(r, i, (a + s, a + t), (0, length)) for i, (s, t) in enumerate(_ranges(b - a, m))]
        return out
    if rows < m:
        raise CaseError(f"{where}: the batch has {rows} sequences but configuration {config.label!r} needs at least "
                        f"one per micro-batch ({m}); draw more sequences")
    micro = _ranges(rows, m)
    if config.split == "context":
        if length < n:
            raise CaseError(f"{where}: the batch has {length} positions but configuration {config.label!r} splits "
                            f"them among {n} ranks")
        return [cell(r, i, rr, cc) for r, cc in enumerate(_ranges(length, n)) for i, rr in enumerate(micro)]
    return [cell(None, i, rr, (0, length)) for i, rr in enumerate(micro)]  # tensor: every rank runs them


def rank_cells(cells: list[Cell], rank: int) -> list[Cell]:
    """The cells rank ``rank`` runs, in micro-batch order."""
    return [c for c in cells if c.rank is None or c.rank == rank]


def diagnosis_cells(batch: dict[str, torch.Tensor], config: StepConfig, ignore_index: int = IGNORE_INDEX,
                    where: str = "step") -> list[Cell]:
    """The cells the diagnosis recombines: :func:`plan`'s, except under ``split="tensor"``, where every
    rank runs the whole batch and the cells are each micro-batch's contiguous position chunks, one per
    rank (the positions a rank owns under sequence parallelism)."""
    if config.split != "tensor" or config.world == 1:
        return plan(batch, config, ignore_index, where)
    return plan(batch, StepConfig(config.accumulation, config.world, "context", config.window), ignore_index, where)
