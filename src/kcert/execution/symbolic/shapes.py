"""Shape and layout operations, concatenation and splitting, and indexing with constant indices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
import torch

from .limits import SymbolicUnsupported
from .tensor import SymTensor, _constant_values, _is_complex, _native_values, _new, _obj, _sym, _values_to_obj


def _sizes(args) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


def _like(x: SymTensor, data: np.ndarray) -> SymTensor:
    return SymTensor(data, x.is_complex_valued)


def _reshape(input, *shape):
    x = _sym(input)
    return _like(x, x.sym.reshape(_sizes(shape)))


def _view(input, *shape, dtype=None):
    if dtype is not None or (len(shape) == 1 and isinstance(shape[0], torch.dtype)):
        raise SymbolicUnsupported("Tensor.view(dtype)", "reinterpreting bits has no real-number meaning")
    return _reshape(input, *shape)


def _flatten(input, start_dim=0, end_dim=-1):
    x = _sym(input)
    d = x.sym
    if d.ndim == 0:
        return _like(x, d.reshape(1))
    s, e = start_dim % d.ndim, end_dim % d.ndim
    return _like(x, d.reshape(d.shape[:s] + (-1,) + d.shape[e + 1:]))


def _unflatten(input, dim, sizes):
    x = _sym(input)
    d = x.sym
    dim = dim % d.ndim
    return _like(x, d.reshape(d.shape[:dim] + tuple(sizes) + d.shape[dim + 1:]))


def _transpose(input, dim0, dim1):
    x = _sym(input)
    return _like(x, np.swapaxes(x.sym, dim0, dim1))


def _t(input):
    x = _sym(input)
    return _like(x, x.sym.T)


def _permute(input, *dims):
    x = _sym(input)
    return _like(x, np.transpose(x.sym, _sizes(dims)))


def _movedim(input, source, destination):
    x = _sym(input)
    return _like(x, np.moveaxis(x.sym, source, destination))


def _unsqueeze(input, dim):
    x = _sym(input)
    return _like(x, np.expand_dims(x.sym, dim % (x.sym.ndim + 1)))


def _squeeze(input, dim=None):
    x = _sym(input)
    d = x.sym
    if dim is None:
        return _like(x, d.reshape([s for s in d.shape if s != 1]))
    dims = {k % d.ndim for k in ([dim] if isinstance(dim, int) else dim)} if d.ndim else set()
    return _like(x, d.reshape([s for i, s in enumerate(d.shape) if not (i in dims and s == 1)]))


def _expand(input, *sizes, implicit=False):
    x = _sym(input)
    sizes = _sizes(sizes)
    d = x.sym
    lead = len(sizes) - d.ndim
    target = tuple(d.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return _like(x, np.broadcast_to(d, target))


def _expand_as(input, other):
    return _expand(input, tuple(other.shape))


def _broadcast_to(input, size):
    return _expand(input, tuple(size))


def _repeat(input, *sizes):
    x = _sym(input)
    sizes = _sizes(sizes)
    d = x.sym.reshape((1,) * (len(sizes) - x.sym.ndim) + x.sym.shape)
    return _like(x, np.tile(d, sizes))


def _repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    x = _sym(input)
    reps = repeats if isinstance(repeats, int) else np.asarray(_constant_values(repeats, "repeat_interleave"))
    d = x.sym.reshape(-1) if dim is None else x.sym
    return _like(x, np.repeat(d, reps, axis=0 if dim is None else dim))


def _contiguous(input, memory_format=None):
    x = _sym(input)
    return _like(x, np.ascontiguousarray(x.sym))


def _copy_of(input, *args, **kwargs):
    x = _sym(input)
    return _like(x, x.sym.copy())


def _flip(input, dims):
    x = _sym(input)
    return _like(x, np.flip(x.sym, axis=tuple(_sizes((dims,)) if not isinstance(dims, int) else (dims,))))


def _roll(input, shifts, dims=None):
    x = _sym(input)
    return _like(x, np.roll(x.sym, shifts, axis=dims))


def _narrow(input, dim, start, length):
    x = _sym(input)
    idx = [slice(None)] * x.sym.ndim
    idx[dim] = slice(int(start), int(start) + int(length))
    return _like(x, x.sym[tuple(idx)])


def _select(input, dim, index):
    x = _sym(input)
    return _like(x, np.take(x.sym, int(index), axis=dim))


def _cat(tensors, dim=0, *, out=None, axis=None):
    dim = axis if axis is not None else dim
    parts = [_sym(t) for t in tensors]
    parts = [p for p in parts if not (p.sym.ndim == 1 and p.sym.shape[0] == 0)] or parts
    return _new(np.concatenate([p.sym for p in parts], axis=dim), _is_complex(*parts))


def _stack(tensors, dim=0, *, out=None):
    parts = [_sym(t) for t in tensors]
    return _new(np.stack([p.sym for p in parts], axis=dim), _is_complex(*parts))


def _chunk(input, chunks, dim=0):
    x = _sym(input)
    n = x.sym.shape[dim]
    size = -(-n // chunks)
    return _split(x, size, dim)


def _split(input, split_size_or_sections, dim=0):
    x = _sym(input)
    n = x.sym.shape[dim]
    if isinstance(split_size_or_sections, int):
        edges = list(range(split_size_or_sections, n, split_size_or_sections))
    else:
        edges = list(np.cumsum(list(split_size_or_sections))[:-1])
    return tuple(_like(x, p) for p in np.split(x.sym, edges, axis=dim))


def _unbind(input, dim=0):
    x = _sym(input)
    return tuple(_like(x, np.take(x.sym, i, axis=dim)) for i in range(x.sym.shape[dim]))


def _tril(input, diagonal=0):
    x = _sym(input)
    keep = np.tril(np.ones(x.sym.shape[-2:], bool), diagonal)
    return _like(x, np.where(keep, x.sym, sympy.Integer(0)))


def _triu(input, diagonal=0):
    x = _sym(input)
    keep = np.triu(np.ones(x.sym.shape[-2:], bool), diagonal)
    return _like(x, np.where(keep, x.sym, sympy.Integer(0)))


def _index(idx: Any, op: str) -> Any:
    if isinstance(idx, tuple):
        return tuple(_index(i, op) for i in idx)
    if isinstance(idx, torch.Tensor):
        values = np.asarray(_constant_values(idx, op))
        return values.astype(bool) if idx.dtype == torch.bool else values.astype(np.int64)
    if isinstance(idx, list):
        return np.asarray([_index(i, op) for i in idx])
    return idx


def _select_from(input, pick: Callable[[np.ndarray], np.ndarray]) -> SymTensor:
    """``pick`` applied to ``input``'s elements. A native tensor (a frequency table, a cos/sin cache
    made outside the kernel) is indexed natively first, so only the elements picked become SymPy
    numbers (a 4096-position cache would otherwise cost seconds)."""
    if isinstance(input, torch.Tensor) and not isinstance(input, SymTensor):
        values, conv = _native_values(input)
        return _new(_values_to_obj(pick(values), conv))
    x = _sym(input)
    return _like(x, _obj(pick(x.sym)))


def _getitem(input, idx):
    index = _index(idx, "indexing")
    return _select_from(input, lambda a: a[index])


def _gather(input, dim, index, *, sparse_grad=False):
    idx = np.asarray(_constant_values(index, "gather"), dtype=np.int64)
    return _select_from(input, lambda a: np.take_along_axis(a, idx, axis=dim))


def _index_select(input, dim, index):
    idx = np.asarray(_constant_values(index, "index_select"), dtype=np.int64).reshape(-1)
    return _select_from(input, lambda a: np.take(a, idx, axis=dim))
