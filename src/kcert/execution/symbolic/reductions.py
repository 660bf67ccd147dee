"""Reductions (sums, means, variances, max/min, norms, softmax, cumulative sums) and products (matmul,
linear, einsum): every one a sum or product over the reduced axes of object arrays."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy
import torch

from .elementwise import _exp, _smax, _smin
from .limits import SymbolicUnsupported
from .numbers import _total, exact
from .tensor import _data, _is_complex, _new, _sym


def _dims(dim, ndim: int) -> list[int]:
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % ndim for d in dim}) if ndim else []


def _reduce(x: np.ndarray, dim, keepdim: bool, combine: Callable[[list], sympy.Expr]) -> np.ndarray:
    nd = x.ndim
    dims = _dims(dim, nd)
    rest = [d for d in range(nd) if d not in dims]
    moved = np.transpose(x, rest + dims)
    flat = moved.reshape(moved.shape[: len(rest)] + (-1,))
    out = np.empty(flat.shape[:-1], object)
    for idx in np.ndindex(*out.shape):
        out[idx] = combine(list(flat[idx]))
    if keepdim:
        out = out.reshape([1 if d in dims else x.shape[d] for d in range(nd)])
    return out


def _count(x: np.ndarray, dim) -> int:
    return int(np.prod([x.shape[d] for d in _dims(dim, x.ndim)], dtype=np.int64))


def _sum(input, dim=None, keepdim=False, *, dtype=None):
    x = _sym(input)
    return _new(_reduce(x.sym, dim, keepdim, _total), x.is_complex_valued)


def _mean(input, dim=None, keepdim=False, *, dtype=None):
    x = _sym(input)
    n = _count(x.sym, dim)
    return _new(_reduce(x.sym, dim, keepdim, lambda v: _total(v) / n), x.is_complex_valued)


def _prod(input, dim=None, keepdim=False, *, dtype=None):
    x = _sym(input)
    return _new(_reduce(x.sym, dim, keepdim, lambda v: sympy.Mul(*v)), x.is_complex_valued)


def _var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # var(input, unbiased)
        dim, unbiased = None, dim
    x = _data(input)
    n = _count(x, dim)
    c = correction if correction is not None else (0 if unbiased is False else 1)
    mean = _reduce(x, dim, True, lambda v: _total(v) / n)
    sq = (x - mean) ** 2
    return _new(_reduce(sq, dim, keepdim, lambda v: _total(v) / (n - c)))


def _std(*args, **kwargs):
    return _new(np.frompyfunc(sympy.sqrt, 1, 1)(_var(*args, **kwargs).sym))


def _amax(input, dim=(), keepdim=False):
    return _new(_reduce(_data(input), dim, keepdim, lambda v: _smax(*v)))


def _amin(input, dim=(), keepdim=False):
    return _new(_reduce(_data(input), dim, keepdim, lambda v: _smin(*v)))


def _max(input, dim=None, keepdim=False, *, other=None):
    if isinstance(dim, torch.Tensor):  # torch.max(a, b)
        return _new(np.frompyfunc(_smax, 2, 1)(_data(input), _data(dim)))
    if dim is None:
        return _amax(input)
    raise SymbolicUnsupported("max(dim)", "it returns the index of the largest value (data-dependent)")


def _min(input, dim=None, keepdim=False, *, other=None):
    if isinstance(dim, torch.Tensor):
        return _new(np.frompyfunc(_smin, 2, 1)(_data(input), _data(dim)))
    if dim is None:
        return _amin(input)
    raise SymbolicUnsupported("min(dim)", "it returns the index of the smallest value (data-dependent)")


def _norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    if p not in ("fro", 2, 2.0, None):
        raise SymbolicUnsupported(f"norm(p={p!r})", "only the 2-norm is followed")
    sq = _reduce(_data(input) ** 2, dim, keepdim, _total)
    return _new(np.frompyfunc(sympy.sqrt, 1, 1)(sq))


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    return _norm(x, ord, dim, keepdim)


def _logsumexp(input, dim, keepdim=False):
    x = _data(input)
    return _new(_reduce(x, dim, keepdim, lambda v: sympy.log(sympy.Add(*[_exp(e) for e in v]))))


def _softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = _data(input)
    e = np.frompyfunc(_exp, 1, 1)(x)
    return _new(e / _reduce(e, dim, True, _total))


def _log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = _data(input)
    return _new(x - _logsumexp(x, dim, True).sym)


def _cumsum(input, dim, *, dtype=None):
    x = _data(input)
    moved = np.moveaxis(x, dim, -1)
    out = np.empty(moved.shape, object)
    for idx in np.ndindex(*moved.shape[:-1]):
        acc = sympy.Integer(0)
        for k in range(moved.shape[-1]):
            acc = acc + moved[idx + (k,)]
            out[idx + (k,)] = acc
    return _new(np.moveaxis(out, -1, dim))


# --- products ---------------------------------------------------------------------------------------


def _matmul(input, other, *, out=None):
    a, b = _sym(input), _sym(other)
    x, y = a.sym, b.sym
    if x.ndim == 0 or y.ndim == 0:
        raise SymbolicUnsupported("matmul", "both arguments must have at least one dimension")
    squeeze = []
    if x.ndim == 1:
        x = x[None, :]
        squeeze.append(-2)
    if y.ndim == 1:
        y = y[:, None]
        squeeze.append(-1)
    if x.shape[-1] != y.shape[-2]:
        raise RuntimeError(f"matmul: shapes {a.sym.shape} and {b.sym.shape} cannot be multiplied")
    terms = x[..., :, :, None] * y[..., None, :, :]
    res = _reduce(terms, -2, False, _total)
    for d in sorted(squeeze):
        res = np.squeeze(res, axis=d if d == -1 else res.ndim - 2)
    return _new(res, _is_complex(a, b))


def _addmm(input, mat1, mat2, *, beta=1, alpha=1):
    return _new(_data(input) * exact(beta) + _matmul(mat1, mat2).sym * exact(alpha))


def _outer(input, vec2):
    return _new(_data(input)[:, None] * _data(vec2)[None, :])


def _linear(input, weight, bias=None):
    y = _matmul(input, _new(_data(weight).T))
    return y if bias is None else _new(y.sym + _data(bias))


def _einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    if "..." in eq:
        raise SymbolicUnsupported("torch.einsum", "ellipsis equations are not followed")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not rhs and "->" not in eq:
        rhs = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    letters = list(dict.fromkeys(rhs + "".join(terms)))
    product = None
    for term, op in zip(terms, operands):
        x = _data(op)
        for i, c in enumerate(term):  # a repeated letter (diagonal) is not followed
            if term.count(c) > 1:
                raise SymbolicUnsupported("torch.einsum", "repeated indices in one operand are not followed")
        order = [term.index(c) for c in letters if c in term]
        x = np.transpose(x, order)
        shape = [x.shape[[c for c in letters if c in term].index(c)] if c in term else 1 for c in letters]
        x = x.reshape(shape)
        product = x if product is None else product * x
    summed = [i for i, c in enumerate(letters) if c not in rhs]
    res = _reduce(product, summed, False, _total) if summed else product
    return _new(res)
