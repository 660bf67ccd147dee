"""The registry: which handler answers which torch function, method and property. Importing this module
fills the dispatch table of :mod:`.tensor`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy
import torch
import torch.nn.functional as F

from .conversions import (
    _arange, _autograd, _copy_, _empty, _empty_like, _eye, _fill_, _full, _full_like, _inplace, _integer_cast,
    _iter, _len, _linspace, _new_empty, _new_full, _new_ones, _new_tensor, _new_zeros, _ones, _ones_like, _repr,
    _scalar, _setitem, _tensor, _to, _tolist, _type, _zero_, _zeros, _zeros_like,
)
from .elementwise import (
    _add, _binary_op, _clamp, _compare, _complex, _conj, _div, _exp, _gelu, _imag, _masked_fill, _polar, _pow,
    _rdiv, _real, _rpow, _rsub, _sigmoid, _smax, _smin, _sub, _unary, _view_as_complex, _view_as_real, _where,
)
from .norms import _layer_norm, _rms_norm
from .numbers import exact
from .reductions import (
    _addmm, _amax, _amin, _cumsum, _einsum, _linear, _log_softmax, _logsumexp, _matmul, _max, _mean, _min, _norm,
    _outer, _prod, _softmax, _std, _sum, _var, _vector_norm,
)
from .shapes import (
    _broadcast_to, _cat, _chunk, _contiguous, _copy_of, _expand, _expand_as, _flatten, _flip, _gather, _getitem,
    _index_select, _movedim, _narrow, _permute, _repeat, _repeat_interleave, _reshape, _roll, _select, _split,
    _squeeze, _stack, _t, _transpose, _tril, _triu, _unbind, _unflatten, _unsqueeze, _view,
)
from .tensor import _PROPERTIES, _constant_values, _data, _new, _register, _sym


def _rounding(fn: Callable, name: str) -> Callable:
    """floor, round ...: a rounding of an input-dependent value is data-dependent; constants are fine."""

    def apply(input, *args, **kwargs):
        values = np.asarray(_constant_values(input, f"torch.{name}"), dtype=np.float64)
        return _sym(torch.from_numpy(np.asarray(fn(values), dtype=np.float64)))

    return apply


def _build_registry() -> None:
    un = {
        "neg": lambda e: -e, "negative": lambda e: -e, "__neg__": lambda e: -e, "positive": lambda e: e,
        "__pos__": lambda e: e, "abs": sympy.Abs, "absolute": sympy.Abs, "__abs__": sympy.Abs, "sign": sympy.sign,
        "sqrt": sympy.sqrt, "rsqrt": lambda e: 1 / sympy.sqrt(e), "exp": _exp, "exp2": lambda e: 2**e,
        "expm1": lambda e: _exp(e) - 1, "log": sympy.log, "log2": lambda e: sympy.log(e, 2),
        "log10": lambda e: sympy.log(e, 10), "log1p": lambda e: sympy.log(1 + e), "sin": sympy.sin,
        "cos": sympy.cos, "tan": sympy.tan, "tanh": sympy.tanh, "sinh": sympy.sinh, "cosh": sympy.cosh,
        "atan": sympy.atan, "sigmoid": _sigmoid, "expit": _sigmoid, "erf": sympy.erf, "erfc": sympy.erfc,
        "reciprocal": lambda e: 1 / e, "square": lambda e: e * e, "relu": lambda e: _smax(e, sympy.Integer(0)),
        "silu": lambda e: e * _sigmoid(e), "softplus": lambda e: sympy.log(1 + _exp(e)),
        "logsigmoid": lambda e: -sympy.log(1 + _exp(-e)), "mish": lambda e: e * sympy.tanh(sympy.log(1 + _exp(e))),
        "conj": _conj, "conj_physical": _conj,
    }
    for name, fn in un.items():
        _register([name], _unary(fn))
        _register([name + "_"], _inplace(_unary(fn), name + "_"), (torch, torch.Tensor, F))
    for name, fn in {"floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
                     "frac": lambda v: v - np.trunc(v)}.items():
        _register([name], _rounding(fn, name))
    _register(["mul", "multiply", "__mul__"], _binary_op(lambda a, b: a * b))
    _register(["__rmul__"], _binary_op(lambda a, b: b * a))
    _register(["true_divide", "__truediv__"], _binary_op(lambda a, b: a / b))
    _register(["add", "__add__", "__radd__"], _add)
    _register(["sub", "subtract", "__sub__"], _sub)
    _register(["rsub", "__rsub__"], _rsub)
    _register(["div", "divide"], _div)
    _register(["__rtruediv__", "__rdiv__"], _rdiv)
    _register(["pow", "__pow__", "float_power"], _pow)
    _register(["__rpow__"], _rpow)
    _register(["maximum", "fmax"], _binary_op(np.frompyfunc(_smax, 2, 1)))
    _register(["minimum", "fmin"], _binary_op(np.frompyfunc(_smin, 2, 1)))
    for name, h in {"add_": _add, "sub_": _sub, "mul_": _binary_op(lambda a, b: a * b), "div_": _div,
                    "pow_": _pow, "__iadd__": _add, "__isub__": _sub, "__imul__": _binary_op(lambda a, b: a * b),
                    "__itruediv__": _div, "__ipow__": _pow, "clamp_": _clamp, "clamp_min_": _clamp,
                    "masked_fill_": _masked_fill}.items():
        _register([name], _inplace(h, name), (torch.Tensor,))
    _register(["clamp_max_"], _inplace(lambda x, m: _clamp(x, max=m), "clamp_max_"), (torch.Tensor,))
    _register(["clamp", "clip"], _clamp)
    _register(["clamp_min"], lambda x, m: _clamp(x, min=m))
    _register(["clamp_max"], lambda x, m: _clamp(x, max=m))
    _register(["lerp"], lambda s, e, w: _new(_data(s) + _data(w) * (_data(e) - _data(s))))
    _register(["addcmul"], lambda x, a, b, *, value=1: _new(_data(x) + exact(value) * _data(a) * _data(b)))
    _register(["addcdiv"], lambda x, a, b, *, value=1: _new(_data(x) + exact(value) * _data(a) / _data(b)))
    _register(["where"], _where)
    _register(["masked_fill"], _masked_fill)
    for name, op in {"lt": sympy.Lt, "le": sympy.Le, "gt": sympy.Gt, "ge": sympy.Ge,
                     "__lt__": sympy.Lt, "__le__": sympy.Le, "__gt__": sympy.Gt, "__ge__": sympy.Ge,
                     "less": sympy.Lt, "greater": sympy.Gt, "less_equal": sympy.Le, "greater_equal": sympy.Ge,
                     "eq": sympy.Eq, "__eq__": sympy.Eq, "ne": sympy.Ne, "__ne__": sympy.Ne}.items():
        _register([name], _compare(op))
    _register(["sum"], _sum)
    _register(["mean"], _mean)
    _register(["prod"], _prod)
    _register(["var"], _var)
    _register(["std"], _std)
    _register(["amax"], _amax)
    _register(["amin"], _amin)
    _register(["max"], _max)
    _register(["min"], _min)
    _register(["norm"], _norm)
    _register(["vector_norm"], _vector_norm)
    _register(["logsumexp"], _logsumexp)
    _register(["softmax"], _softmax)
    _register(["log_softmax"], _log_softmax)
    _register(["cumsum"], _cumsum)
    _register(["matmul", "mm", "bmm", "__matmul__"], _matmul)
    _register(["__rmatmul__"], lambda a, b: _matmul(b, a))
    _register(["addmm"], _addmm)
    _register(["outer", "ger"], _outer)
    _register(["linear"], _linear)
    _register(["einsum"], _einsum)
    _register(["gelu"], _gelu)
    _register(["layer_norm"], _layer_norm)
    _register(["rms_norm"], _rms_norm)
    _register(["reshape"], _reshape)
    _register(["view"], _view)
    _register(["view_as", "reshape_as"], lambda x, other: _reshape(x, tuple(other.shape)))
    _register(["flatten", "ravel"], _flatten)
    _register(["unflatten"], _unflatten)
    _register(["transpose", "swapaxes", "swapdims"], _transpose)
    _register(["t"], _t)
    _register(["permute"], _permute)
    _register(["movedim", "moveaxis"], _movedim)
    _register(["unsqueeze"], _unsqueeze)
    _register(["squeeze"], _squeeze)
    _register(["expand"], _expand)
    _register(["expand_as"], _expand_as)
    _register(["broadcast_to"], _broadcast_to)
    _register(["repeat"], _repeat)
    _register(["tile"], lambda x, dims: _repeat(x, tuple(dims)))
    _register(["repeat_interleave"], _repeat_interleave)
    _register(["contiguous"], _contiguous)
    _register(["clone", "detach", "float", "double", "half", "bfloat16", "cpu", "cuda", "alias", "resolve_conj",
               "resolve_neg"], _copy_of)
    _register(["requires_grad_", "backward", "grad", "retain_grad", "register_hook"], _autograd)
    _register(["type_as"], lambda x, other: _to(x, other.dtype))
    _register(["to"], _to)
    _register(["type"], _type)
    _register(["long"], _integer_cast(torch.int64, "long"))
    _register(["int"], _integer_cast(torch.int32, "int"))
    _register(["bool"], _integer_cast(torch.bool, "bool"))
    _register(["flip"], _flip)
    _register(["roll"], _roll)
    _register(["narrow"], _narrow)
    _register(["select"], _select)
    _register(["cat", "concat", "concatenate"], _cat)
    _register(["stack"], _stack)
    _register(["chunk"], _chunk)
    _register(["split"], _split)
    _register(["unbind"], _unbind)
    _register(["tril"], _tril)
    _register(["triu"], _triu)
    _register(["__getitem__"], _getitem)
    _register(["__setitem__"], _setitem)
    _register(["gather", "take_along_dim"], _gather)
    _register(["index_select"], _index_select)
    _register(["view_as_complex"], _view_as_complex)
    _register(["view_as_real"], _view_as_real)
    _register(["polar"], _polar)
    _register(["complex"], _complex)
    _register(["real"], _real)
    _register(["imag"], _imag)
    _register(["copy_"], _copy_)
    _register(["fill_"], _fill_)
    _register(["zero_"], _zero_)
    _register(["item"], _scalar(lambda v: v, "item"))
    _register(["__float__"], _scalar(float, "__float__"))
    _register(["__int__", "__index__"], _scalar(int, "__int__"))
    _register(["__bool__"], _scalar(bool, "__bool__"))
    _register(["tolist"], _tolist)
    _register(["__len__"], _len)
    _register(["__iter__"], _iter)
    _register(["__repr__", "__format__", "__str__"], _repr)
    _register(["zeros"], _zeros)
    _register(["ones"], _ones)
    _register(["empty"], _empty)
    _register(["full"], _full)
    _register(["zeros_like"], _zeros_like)
    _register(["ones_like"], _ones_like)
    _register(["empty_like"], _empty_like)
    _register(["full_like"], _full_like)
    _register(["new_zeros"], _new_zeros)
    _register(["new_ones"], _new_ones)
    _register(["new_empty"], _new_empty)
    _register(["new_full"], _new_full)
    _register(["tensor", "as_tensor"], _tensor)
    _register(["new_tensor"], _new_tensor)
    _register(["arange"], _arange)
    _register(["linspace"], _linspace)
    _register(["eye"], _eye)


_build_registry()
# Tensor properties computed from the elements (the others are answered from the metadata or refused)
_PROPERTIES.update({"T": _t, "mT": lambda x: _transpose(x, -2, -1), "H": _t, "mH": lambda x: _transpose(x, -2, -1),
                    "real": _real, "imag": _imag, "data": lambda x: x})
