"""Symbolic real mode: evaluate a PyTorch callable on tensors of SymPy expressions.

The algebra gate's proof level (docs/method.md, "Gate 1") evaluates ref and prod
on tensors whose elements are distinct real symbols and asks SymPy whether ``ref - prod`` is zero.
This package is the evaluator: :class:`SymTensor` is a ``torch.Tensor`` wrapper subclass (no storage)
holding a NumPy object array of SymPy expressions, and :class:`SymbolicMode` is a
``TorchFunctionMode`` that answers every torch call made while it is active.

Semantics are real mode's: every floating dtype is the reals, so casts (``.float()``,
``.to(bf16)``, ``.type_as``) are copies, and a SymTensor reports ``torch.float64``. Python float
literals are read as the simplest exact number that rounds to them (:func:`exact`): ``1e-6`` is
``1/10**6``, ``d ** -0.5`` is ``1/sqrt(d)``; values stored in tensors made outside the kernel are
taken exactly (their binary value), as real mode takes them.

What is followed: elementwise arithmetic and the usual transcendental functions, reductions, matrix
products and einsum, shape and layout operations, indexing with constant indices, concatenation
and splitting, factories, softmax-like functions, ``F.silu/gelu/relu/linear/layer_norm/rms_norm``,
complex views (``view_as_complex``, ``polar``) and comparisons between *constants* (frequency
tables). Integer tensors that never meet a floating value (positions, indices) run natively.
Anything else raises :class:`SymbolicUnsupported` naming the operation: an unlisted function, a
comparison, ``where`` or mask driven by symbolic values (data-dependent control flow), ``topk`` or
``argmax``, random numbers, raw memory, ``kcert.semantic_round`` (a rounding that belongs to the
definition has no exact form). The algebra gate then falls back to the identity test and says why.

The package, one module per part of the evaluator (no module imports one listed after it):

- :mod:`.limits`: :class:`SymbolicUnsupported`, :class:`SymbolicTimeout`, :class:`Deadline` (the
  proof's budgets) and the budget of the evaluation now running;
- :mod:`.numbers`: exact numbers (:func:`exact`) and complex elements;
- :mod:`.tensor`: :class:`SymTensor`, conversions, and the dispatch table every torch call goes through;
- :mod:`.elementwise`, :mod:`.reductions`, :mod:`.norms`, :mod:`.shapes`, :mod:`.conversions`: the
  operations;
- :mod:`.registry`: which handler answers which torch function, method and property;
- :mod:`.mode`: :class:`SymbolicMode` and :func:`run_symbolic`.
"""

from __future__ import annotations

from .limits import Deadline, SymbolicTimeout, SymbolicUnsupported, expression_size
from .mode import SymbolicMode, compilation_disabled, run_symbolic
from .numbers import exact
from .tensor import SymTensor, symbols_like

__all__ = ["Deadline", "SymTensor", "SymbolicMode", "SymbolicTimeout", "SymbolicUnsupported", "compilation_disabled",
           "exact", "expression_size", "run_symbolic", "symbols_like"]
