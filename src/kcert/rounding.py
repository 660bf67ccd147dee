"""Real mode's thread-local state and :func:`semantic_round`, the one rounding that steps around it.

Kept apart from :mod:`kcert.execution.realmode` so that the public rounding and its docstring have a
module of their own; realmode re-exports ``semantic_round``.
"""

from __future__ import annotations

import contextlib
import threading

import torch

__all__ = ["bypass", "real_mode_state", "semantic_round"]

# Thread-local because torch's mode stack is thread-local too.  bypass: >0 while
# semantic_round (or kcert's bookkeeping) runs with RealMode standing aside;
# dtypes: the target dtypes of the RealModes entered, innermost last.
real_mode_state = threading.local()


@contextlib.contextmanager
def bypass():
    """Let an enclosing RealMode stand aside while the block runs."""
    real_mode_state.bypass = getattr(real_mode_state, "bypass", 0) + 1
    try:
        yield
    finally:
        real_mode_state.bypass -= 1


class _RoundKeepGrad(torch.autograd.Function):
    """Round to ``dtype`` and back; the gradient passes through unrounded."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        with bypass():
            r = t.to(dtype).to(t.dtype)
            return r.clone() if r is t else r

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


# Opaque to torch.compile: dynamo would trace the bypass flag as a constant and let the
# mode rewrite the rounding away; a graph break runs it eagerly, where the flag works.
@torch.compiler.disable
def semantic_round(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round ``tensor`` to ``dtype`` and back, *also inside real mode*.

    For roundings that belong to the reference definition (Gemma's embedding normaliser
    ``sqrt(hidden)`` rounded to bf16: 55.4256 -> 55.5).  Outside real mode it is exactly
    ``tensor.to(dtype).to(tensor.dtype)``.  Inside real mode the rounding runs with the
    mode bypassed and, being part of the definition rather than of its evaluation, is
    treated as the identity by autograd (the gradient is not rounded to ``dtype``).
    Real mode is how the algebra gate and the default oracle evaluate ref (docs/method.md,
    "Gate 1: algebra"); a plain ``.to(dtype)`` there is redirected to the mode's precision and
    keeps no rounding.

    Parameters
    ----------
    tensor : torch.Tensor
        The floating values to round.
    dtype : torch.dtype
        The format to round them to.

    Returns
    -------
    torch.Tensor
        ``tensor``'s values rounded to ``dtype``, in ``tensor``'s dtype.

    Examples
    --------
    >>> import math, torch, kcert
    >>> normaliser = torch.tensor(math.sqrt(3072), dtype=torch.float64)  # sqrt(hidden), Gemma
    >>> normaliser
    tensor(55.4256, dtype=torch.float64)
    >>> kcert.semantic_round(normaliser, torch.bfloat16)
    tensor(55.5000, dtype=torch.float64)
    """
    if not getattr(real_mode_state, "dtypes", None):
        return tensor.to(dtype).to(tensor.dtype)
    return _RoundKeepGrad.apply(tensor, dtype)
