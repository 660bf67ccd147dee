"""Padding: positions of a batch that hold no token (``attention_mask == 0``), whose outputs no training step
uses (docs/model.md, "Padded batches").

A padded position's output is whatever the implementation makes of a query that may attend to nothing: HF's
eager attention averages every value there, its sdpa path another arrangement, and their backward passes
differ through those rows. Training never sees it: the loss masks those positions, so their cotangent is zero.
kcert's rows draw a cotangent for every position, so without this a padded batch made eager against sdpa FAIL
on differences no training step can meet. With a padding input, every certified output whose leading axes are
the mask's (batch, positions) is set to zero at the padded positions on both sides (ref, prod, the oracle):
nothing is compared there, and no gradient flows back from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..case import Custom
from ..errors import CaseError

DEFAULT = "attention_mask"  # Hugging Face's name: used when the inputs have it, else no padding
VALID = "kcert_padding"  # the recorded argument that carries the replicate's mask into a module's kernels


def resolve(inputs: Mapping, padding: str | None, drawn: Mapping, where: str) -> str | None:
    """The input that marks padding (None: none), checked on one draw: a (batch, positions) tensor of 0 and 1."""
    if padding is None or (padding == DEFAULT and padding not in inputs):
        return None
    if padding not in inputs:
        raise CaseError(f"{where}: padding={padding!r} names no input; the inputs are {sorted(inputs)} (give "
                        "padding=None when no input marks padded positions)")
    mask = drawn[padding]
    values_ok = isinstance(mask, torch.Tensor) and not mask.is_floating_point() and not mask.is_complex() \
        and bool(((mask == 0) | (mask == 1)).all())
    if not values_ok or mask.dim() != 2:
        described = f"a {tuple(mask.shape)} {mask.dtype} tensor" if isinstance(mask, torch.Tensor) else \
            type(mask).__name__
        raise CaseError(f"{where}: the padding input {padding!r} must draw a (batch, positions) tensor of 0 and 1 "
                        f"(1 a token, 0 padding), got {described}; give padding=None to compare every position")
    return padding


def masked(outputs: tuple, valid: torch.Tensor | None) -> tuple:
    """``outputs`` with zeros at the padded positions of each one whose leading axes are ``valid``'s shape."""
    if valid is None:
        return outputs
    pad = valid == 0
    if not bool(pad.any()):
        return outputs
    out = []
    for o in outputs:
        if isinstance(o, torch.Tensor) and o.dim() >= 2 and tuple(o.shape[:2]) == tuple(pad.shape):
            o = o.masked_fill(pad.reshape(*pad.shape, *([1] * (o.dim() - 2))).to(o.device), 0)
        out.append(o)
    return tuple(out)


@dataclass(frozen=True)
class _PaddedRows:
    batch: int
    positions: int
    min_tokens: int
    left: bool

    def __call__(self, generator: torch.Generator, device) -> torch.Tensor:
        tokens = torch.randint(self.min_tokens, self.positions + 1, (self.batch,), generator=generator)
        keep = torch.arange(self.positions).expand(self.batch, -1)
        if self.left:  # each row's tokens at its end, padding before them
            keep = keep.flip(-1)
        return (keep < tokens[:, None]).to(torch.long).to(device)


def padded_mask(batch: int, positions: int, min_tokens: int = 1, side: str = "left") -> Custom:
    """A probe of ``attention_mask`` for a padded batch: each row holds a number of tokens drawn uniformly from
    ``min_tokens..positions`` per replicate, padded on ``side`` ("left" as generation batches, "right" as
    training ones).

    >>> import torch
    >>> probe = padded_mask(2, 6, min_tokens=3)
    >>> probe.sample(torch.Generator().manual_seed(0), torch.device("cpu"), torch.float32)
    tensor([[0, 0, 0, 1, 1, 1],
            [1, 1, 1, 1, 1, 1]])
    """
    if side not in ("left", "right"):
        raise CaseError(f"padded_mask: side must be 'left' or 'right', got {side!r}")
    if not 1 <= min_tokens <= positions:
        raise CaseError(f"padded_mask: min_tokens must be in 1..positions ({positions}), got {min_tokens}")
    return Custom(_PaddedRows(batch, positions, min_tokens, side == "left"), f"{side} padding, {min_tokens}+ tokens",
                  (batch, positions))
