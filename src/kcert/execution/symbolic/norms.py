"""The norms of the catalogue: ``F.layer_norm`` and ``F.rms_norm`` in exact arithmetic."""

from __future__ import annotations

import numpy as np
import sympy
import torch

from .numbers import _total, exact
from .reductions import _count, _reduce
from .tensor import _data, _new


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = _data(input)
    k = len(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) else 1
    dims = list(range(x.ndim - k, x.ndim))
    n = _count(x, dims)
    mean = _reduce(x, dims, True, lambda v: _total(v) / n)
    var = _reduce((x - mean) ** 2, dims, True, lambda v: _total(v) / n)
    y = (x - mean) * np.frompyfunc(lambda v: 1 / sympy.sqrt(v), 1, 1)(var + exact(eps))
    if weight is not None:
        y = y * _data(weight)
    if bias is not None:
        y = y + _data(bias)
    return _new(y)


def _rms_norm(input, normalized_shape, weight=None, eps=None):
    x = _data(input)
    k = len(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) else 1
    dims = list(range(x.ndim - k, x.ndim))
    n = _count(x, dims)
    # eps=None: torch uses finfo(input.dtype).eps; in real mode the input is float64
    e = exact(torch.finfo(torch.float64).eps if eps is None else eps)
    ms = _reduce(x * x, dims, True, lambda v: _total(v) / n)
    y = x * np.frompyfunc(lambda v: 1 / sympy.sqrt(v), 1, 1)(ms + e)
    return _new(y if weight is None else y * _data(weight))
