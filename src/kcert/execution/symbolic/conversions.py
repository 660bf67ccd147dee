"""Casts and conversions (dtype casts, Python scalars), factories (zeros, arange, eye ...) and in-place
writes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
import torch

from .limits import SymbolicUnsupported
from .numbers import exact
from .shapes import _copy_of, _index, _sizes, _unbind
from .tensor import SymTensor, _constant_values, _data, _new, _sym


def _is_integral(dtype: Any) -> bool:
    return isinstance(dtype, torch.dtype) and not dtype.is_floating_point and not dtype.is_complex


def _to_integer(input, dtype: torch.dtype, op: str) -> torch.Tensor:
    values = np.asarray(_constant_values(input, op))
    if dtype == torch.bool:
        return torch.from_numpy(values.astype(bool))
    return torch.from_numpy(np.trunc(values.astype(np.float64)).astype(np.int64)).to(dtype)


def _to(input, *args, **kwargs):
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, torch.Tensor):
            dtype = a.dtype
    if _is_integral(dtype):
        return _to_integer(input, dtype, f"Tensor.to({dtype})")
    return _copy_of(input)


def _type(input, dtype=None, non_blocking=False, **kwargs):
    if dtype is None:
        return "torch.DoubleTensor"
    if _is_integral(dtype):
        return _to_integer(input, dtype, f"Tensor.type({dtype})")
    if isinstance(dtype, str) and not any(k in dtype for k in ("Float", "Double", "Half", "BFloat16")):
        raise SymbolicUnsupported(f"Tensor.type({dtype!r})", "a cast to an integer type of input-dependent values")
    return _copy_of(input)


def _integer_cast(dtype: torch.dtype, name: str) -> Callable:
    def apply(input, memory_format=None):
        return _to_integer(input, dtype, f"Tensor.{name}")

    return apply


def _scalar(kind: Callable, name: str) -> Callable:
    def apply(input):
        values = _constant_values(input, f"Tensor.{name}")
        if values.size != 1:
            raise RuntimeError(f"a Tensor with {values.size} elements cannot be converted to a scalar")
        return kind(values.reshape(-1)[0])

    return apply


def _tolist(input):
    return np.asarray(_constant_values(input, "Tensor.tolist")).tolist()


def _len(input):
    return _sym(input).sym.shape[0]


def _iter(input):
    return iter(_unbind(input, 0))


# --- factories ---------------------------------------------------------------------------------------------


def _full_of(shape, value) -> SymTensor:
    return _new(np.full(shape, exact(value), dtype=object))


def _zeros(*size, **kwargs):
    return _full_of(_sizes(size), 0)


def _ones(*size, **kwargs):
    return _full_of(_sizes(size), 1)


def _empty(*size, **kwargs):
    return _full_of(_sizes(size), sympy.nan)  # uninitialised: NaN until written


def _full(size, fill_value, **kwargs):
    return _full_of(_sizes((size,)), fill_value if not isinstance(fill_value, torch.Tensor) else
                    _data(fill_value)[()])


def _zeros_like(input, **kwargs):
    return _full_of(tuple(input.shape), 0)


def _ones_like(input, **kwargs):
    return _full_of(tuple(input.shape), 1)


def _empty_like(input, **kwargs):
    return _full_of(tuple(input.shape), sympy.nan)


def _full_like(input, fill_value, **kwargs):
    return _full_of(tuple(input.shape), fill_value)


def _new_zeros(input, *size, **kwargs):
    return _zeros(*size)


def _new_ones(input, *size, **kwargs):
    return _ones(*size)


def _new_empty(input, *size, **kwargs):
    return _empty(*size)


def _new_full(input, size, fill_value, **kwargs):
    return _full(size, fill_value)


def _tensor(data, **kwargs):
    if isinstance(data, torch.Tensor):
        return _copy_of(data)
    return _sym(data)


def _new_tensor(input, data, **kwargs):
    return _tensor(data)


def _arange(*args, **kwargs):
    start, step = 0, 1
    if len(args) == 1:
        end = args[0]
    elif len(args) == 2:
        start, end = args
    else:
        start, end, step = args[:3]
    start = kwargs.get("start", start)
    end = kwargs.get("end", end)
    step = kwargs.get("step", step)
    s, e, st = exact(start), exact(end), exact(step)
    n = math.ceil(float((e - s) / st))
    return _new(np.array([s + i * st for i in range(max(n, 0))] or [], dtype=object).reshape(-1))


def _linspace(start, end, steps, **kwargs):
    s, e = exact(start), exact(end)
    if steps == 1:
        return _new(np.array([s], dtype=object))
    return _new(np.array([s + (e - s) * sympy.Rational(i, steps - 1) for i in range(steps)], dtype=object))


def _eye(n, m=None, **kwargs):
    m = n if m is None else m
    return _new(np.array([[sympy.Integer(int(i == j)) for j in range(m)] for i in range(n)], dtype=object)
                .reshape(n, m))


# --- in place -------------------------------------------------------------------------------------------------


def _write(target: Any, value: SymTensor, op: str) -> SymTensor:
    if not isinstance(target, SymTensor):
        raise SymbolicUnsupported(op, "it writes in place into a tensor made outside the kernel")
    if target.sym.ndim == 0:
        target.sym[()] = value.sym.reshape(())[()]
    else:
        target.sym[...] = np.broadcast_to(value.sym, target.sym.shape)
    if value.is_complex_valued and not target.is_complex_valued:
        raise SymbolicUnsupported(op, "it writes complex values into a real tensor")
    return target


def _inplace(handler: Callable, name: str) -> Callable:
    def apply(input, *args, **kwargs):
        return _write(input, handler(input, *args, **kwargs), f"Tensor.{name}")

    return apply


def _setitem(input, idx, value):
    if not isinstance(input, SymTensor):
        raise SymbolicUnsupported("Tensor.__setitem__", "it writes in place into a tensor made outside the kernel")
    v = _data(value)
    input.sym[_index(idx, "indexing")] = v[()] if v.ndim == 0 else v  # a 0-d array would be stored whole


def _copy_(input, src, non_blocking=False):
    return _write(input, _sym(src), "Tensor.copy_")


def _fill_(input, value):
    return _write(input, _sym(value), "Tensor.fill_")


def _zero_(input):
    return _write(input, _sym(0), "Tensor.zero_")


def _autograd(*args, **kwargs):
    raise SymbolicUnsupported("autograd", "gradients (backward passes) are not followed")


def _repr(input, *args, **kwargs):
    return repr(input) if isinstance(input, SymTensor) else f"tensor(shape={tuple(input.shape)})"
