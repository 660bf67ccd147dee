"""Elementwise operations: arithmetic, the transcendental functions' helpers, clamping, ``where`` and
masks with constant conditions, comparisons between constants, and complex values (views, polar form,
real and imaginary parts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy
import torch

from .limits import SymbolicUnsupported
from .numbers import Cx, exact
from .tensor import _constant_values, _data, _is_complex, _new, _sym


def _unary(fn: Callable[[sympy.Expr], sympy.Expr]) -> Callable:
    vec = np.frompyfunc(fn, 1, 1)

    def apply(input, *args, **kwargs):
        x = _sym(input)
        return _new(vec(x.sym), x.is_complex_valued)

    return apply


def _binary_op(fn: Callable) -> Callable:
    def apply(input, other, *, out=None):
        if out is not None:
            raise SymbolicUnsupported("out=", "writing into an out= tensor is not followed")
        a, b = _sym(input), _sym(other)
        return _new(fn(a.sym, b.sym), _is_complex(a, b))

    return apply


def _add(input, other, *, alpha=1, out=None):
    if out is not None:
        raise SymbolicUnsupported("out=", "writing into an out= tensor is not followed")
    a, b = _sym(input), _sym(other)
    return _new(a.sym + b.sym * exact(alpha), _is_complex(a, b))


def _sub(input, other, *, alpha=1, out=None):
    if out is not None:
        raise SymbolicUnsupported("out=", "writing into an out= tensor is not followed")
    a, b = _sym(input), _sym(other)
    return _new(a.sym - b.sym * exact(alpha), _is_complex(a, b))


def _rsub(input, other, *, alpha=1):
    return _sub(other, input, alpha=alpha)


def _div(input, other, *, rounding_mode=None, out=None):
    if rounding_mode is not None:
        a, b = _constant_values(input, "div(rounding_mode)"), _constant_values(other, "div(rounding_mode)")
        q = np.floor_divide(a, b) if rounding_mode == "floor" else np.trunc(np.true_divide(a, b))
        return _sym(torch.as_tensor(np.asarray(q, dtype=np.float64)))
    a, b = _sym(input), _sym(other)
    return _new(a.sym / b.sym, _is_complex(a, b))


def _rdiv(input, other):
    return _div(other, input)


def _pow(input, exponent):
    a, b = _sym(input), _sym(exponent)
    return _new(a.sym ** b.sym, _is_complex(a, b))


def _rpow(input, other):
    return _pow(other, input)


class maximum(sympy.Function):
    """max of real arguments, left unevaluated while any argument depends on the inputs: SymPy's Max
    compares every pair of arguments and answers assumption queries by exploring them, which made
    softmax over dot products (``exp(s - max(s))``) take seconds per row; opaque, it costs nothing,
    and ``expand`` + ``cancel`` still remove it from a softmax. On numbers it is sympy.Max."""

    @classmethod
    def eval(cls, *args):
        if all(a.is_number for a in args):
            return sympy.Max(*args)
        return None

    def _eval_is_extended_real(self):
        return True


class minimum(sympy.Function):
    """min of real arguments; see :class:`maximum`."""

    @classmethod
    def eval(cls, *args):
        if all(a.is_number for a in args):
            return sympy.Min(*args)
        return None

    def _eval_is_extended_real(self):
        return True


_smax, _smin = maximum, minimum


def _exp(e):
    """exp without SymPy's evaluation on input-dependent arguments: its checks (is the argument zero,
    a logarithm, ...) query assumptions on every term and dominated softmax over dot products;
    numbers still evaluate (exp(-oo) = 0 for masked scores)."""
    return sympy.exp(e, evaluate=False) if getattr(e, "free_symbols", None) else sympy.exp(e)


def _conj(e):
    return e.conjugate() if isinstance(e, Cx) else e


def _sigmoid(x):
    return 1 / (1 + _exp(-x))


def _gelu(input, approximate="none"):
    x = _data(input)
    if approximate == "tanh":
        inner = sympy.sqrt(2 / sympy.pi) * (x + sympy.Rational(44715, 10**6) * x**3)
        return _new(x / 2 * (1 + np.frompyfunc(sympy.tanh, 1, 1)(inner)))
    return _new(x / 2 * (1 + np.frompyfunc(sympy.erf, 1, 1)(x / sympy.sqrt(2))))


def _clamp(input, min=None, max=None):
    x = _sym(input)
    out = x.sym
    if min is not None:
        out = np.frompyfunc(_smax, 2, 1)(out, _data(min))
    if max is not None:
        out = np.frompyfunc(_smin, 2, 1)(out, _data(max))
    return _new(out)


def _where(condition, input=None, other=None):
    if input is None:
        raise SymbolicUnsupported("torch.where(condition)", "the indices of true elements depend on values")
    cond = np.asarray(_constant_values(condition, "torch.where"), dtype=bool)
    a, b = _sym(input), _sym(other)
    return _new(np.where(cond, a.sym, b.sym), _is_complex(a, b))


def _masked_fill(input, mask, value):
    m = np.asarray(_constant_values(mask, "masked_fill"), dtype=bool)
    x = _sym(input)
    return _new(np.where(m, _data(value), x.sym), x.is_complex_valued)


def _compare(op: Callable) -> Callable:
    def apply(input, other):
        a, b = _data(input), _data(other)
        a, b = np.broadcast_arrays(a, b)
        out = np.empty(a.shape, bool)
        for idx in np.ndindex(*a.shape):
            if a[idx].free_symbols or b[idx].free_symbols:
                raise SymbolicUnsupported("comparison", "it compares input-dependent values (data-dependent "
                                                        "control flow or a mask driven by values)")
            r = op(a[idx], b[idx])
            if r not in (sympy.true, sympy.false, True, False):
                raise SymbolicUnsupported("comparison", f"SymPy cannot decide {r}")
            out[idx] = bool(r)
        return torch.from_numpy(out)

    return apply


# --- complex values --------------------------------------------------------------------------------


def _view_as_complex(input):
    x = _data(input)
    return _new(np.frompyfunc(Cx, 2, 1)(x[..., 0], x[..., 1]), True)


def _re(e):
    return e.re if isinstance(e, Cx) else e


def _im(e):
    return e.im if isinstance(e, Cx) else sympy.Integer(0)


def _view_as_real(input):
    x = _data(input)
    return _new(np.stack([np.frompyfunc(_re, 1, 1)(x), np.frompyfunc(_im, 1, 1)(x)], axis=-1))


def _polar(abs, angle):
    r, a = _data(abs), _data(angle)
    return _new(np.frompyfunc(Cx, 2, 1)(r * np.frompyfunc(sympy.cos, 1, 1)(a), r * np.frompyfunc(sympy.sin, 1, 1)(a)),
                True)


def _complex(real, imag):
    return _new(np.frompyfunc(Cx, 2, 1)(_data(real), _data(imag)), True)


def _real(input):
    return _new(np.frompyfunc(_re, 1, 1)(_data(input)))


def _imag(input):
    return _new(np.frompyfunc(_im, 1, 1)(_data(input)))
