"""The mode: :class:`SymbolicMode` answers every torch call made while it is active, and
:func:`run_symbolic` evaluates a callable under it."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from .. import realmode
from . import registry  # noqa: F401  (fills the dispatch table)
from .limits import Deadline, SymbolicUnsupported, _active
from .tensor import _dispatch, _sym


@contextlib.contextmanager
def compilation_disabled():
    """``torch.compile``d callables run their original Python code: dynamo neither traces the symbolic
    evaluator (whose SymPy calls it would bake into a graph) nor recompiles for the proof's shapes."""
    stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if stance is not None:  # torch >= 2.6
        with stance("force_eager"):
            yield
        return
    dynamo = importlib.import_module("torch._dynamo")  # pragma: no cover - older torch
    with dynamo.config.patch(disable=True):  # pragma: no cover
        yield


class SymbolicMode(TorchFunctionMode):
    """Answer every torch call with the symbolic evaluator (see the docstring of
    :mod:`kcert.execution.symbolic`)."""

    def __init__(self, deadline: Deadline | None = None):
        super().__init__()
        self.deadline = deadline

    def __enter__(self):
        self._saved = (getattr(_active, "deadline", None), getattr(realmode._tls, "dtypes", None))
        _active.deadline = self.deadline
        # semantic_round takes its real-mode route (a rounding under a bypass flag), which _check_active refuses
        realmode._tls.dtypes = [*(self._saved[1] or []), torch.float64]
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb):
        try:
            return super().__exit__(exc_type, exc, tb)
        finally:
            _active.deadline, realmode._tls.dtypes = self._saved

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


def run_symbolic(fn: Callable[..., Any], kwargs: dict[str, Any], deadline: Deadline | None = None
                 ) -> tuple[np.ndarray, ...]:
    """Call ``fn(**kwargs)`` under :class:`SymbolicMode`; return its outputs (a tensor or a tuple of
    tensors) as object arrays of SymPy expressions. Raises :class:`SymbolicUnsupported`."""
    with compilation_disabled(), SymbolicMode(deadline), torch.no_grad():
        out = fn(**kwargs)
    items = out if isinstance(out, (tuple, list)) else (out,)
    result = []
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise SymbolicUnsupported(f"output {i}", f"the kernel returned a {type(item).__name__}, not a tensor")
        x = _sym(item)
        if x.is_complex_valued:
            raise SymbolicUnsupported(f"output {i}", "complex outputs are not compared")
        result.append(x.sym)
    return tuple(result)
