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

import torch

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
