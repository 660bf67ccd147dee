"""Symbolic real mode: evaluate a PyTorch callable on tensors of SymPy expressions.

The algebra gate's proof level (docs/method.md, "Gate 1", docs/method.md "Gate 1") evaluates ref and prod
on tensors whose elements are distinct real symbols and asks SymPy whether ``ref - prod`` is zero.
This module is the evaluator: :class:`SymTensor` is a ``torch.Tensor`` wrapper subclass (no storage)
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
"""

from __future__ import annotations

import contextlib
import fractions
import importlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import sympy
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import realmode
from .realmode import _op_name

__all__ = ["Deadline", "SymTensor", "SymbolicMode", "SymbolicTimeout", "SymbolicUnsupported", "compilation_disabled",
           "exact", "expression_size", "run_symbolic", "symbols_like"]


class SymbolicUnsupported(Exception):
    """The symbolic evaluator cannot follow an operation; ``op`` names it."""

    def __init__(self, op: str, why: str = "the symbolic evaluator does not implement it"):
        super().__init__(f"`{op}`: {why}")
        self.op = op
        self.why = why


class SymbolicTimeout(BaseException):
    """The proof's budget ran out. ``kind``: "work" (the deterministic work budget) or "time" (the
    wall-clock guard against a hang). A BaseException so that ``except Exception`` in kernel or SymPy
    code cannot swallow it."""

    def __init__(self, message: str, kind: str = "time"):
        super().__init__(message)
        self.kind = kind


class Deadline:
    """The proof's budgets.

    ``units``: the deterministic work budget. The evaluator spends, per operation, the number of
    symbolic elements it reads and writes; the proof spends the size (expression nodes) of every
    expression it simplifies or evaluates. Equal inputs spend equal units on any machine, so where a
    proof stops does not depend on the load: equal runs give equal certificates.
    ``seconds``: a wall-clock guard against a hang (a SymPy call that never returns), far above what
    the work budget allows; ``check()`` raises :class:`SymbolicTimeout` once it is spent, and inside
    ``alarm()`` (main thread, no other timer running) a SIGALRM also interrupts long SymPy calls."""

    def __init__(self, seconds: float | None = None, units: int | None = None):
        self.seconds = None if seconds is None else float(seconds)
        self.end = math.inf if seconds is None else time.monotonic() + self.seconds
        self.units = units
        self.spent = 0

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def spend(self, units: int) -> None:
        self.spent += int(units)
        if self.units is not None and self.spent > self.units:
            raise SymbolicTimeout(f"work budget of {self.units:,} units spent", "work")

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise SymbolicTimeout(f"time guard of {self.seconds:g} s spent", "time")

    @contextlib.contextmanager
    def alarm(self):
        usable = (self.seconds is not None and hasattr(signal, "setitimer")
                  and threading.current_thread() is threading.main_thread()
                  and signal.getitimer(signal.ITIMER_REAL)[0] == 0)
        if not usable:  # cooperative checks only
            yield
            return

        def ring(signum, frame):
            raise SymbolicTimeout(f"time guard of {self.seconds:g} s spent", "time")

        previous = signal.signal(signal.SIGALRM, ring)
        try:
            signal.setitimer(signal.ITIMER_REAL, max(self.remaining(), 1e-3))
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def expression_size(e: Any, cap: int = 10**6) -> int:
    """Nodes of ``e``'s expression tree (at most ``cap``): the work unit of simplifying or evaluating it."""
    if not isinstance(e, sympy.Basic):
        return 1
    n = 0
    for _ in sympy.preorder_traversal(e):
        n += 1
        if n >= cap:
            break
    return n


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


# --- numbers -------------------------------------------------------------------------------------

_SHORT_DECIMAL = 10  # a literal with at most this many significant digits is read as that decimal
_MAX_DEN = 10**4  # else the simplest rational with a denominator up to this that rounds to the float
# (rationals that small are ~1e-8 apart: an arbitrary float matches one by chance with odds ~1e-8)


def _round_trips(candidate: sympy.Expr, v: float) -> bool:
    try:
        return float(candidate) == v
    except (TypeError, OverflowError):
        return False


def exact(v: Any) -> sympy.Expr:
    """A Python number as an exact SymPy number. A float is read as the simplest number that rounds
    to it: a decimal of at most 10 significant digits (``1e-6 -> 1/10**6``, ``0.044715``), a rational
    ``p/q`` with ``q <= 10**4`` (``2/3``), the square root of one (``8 ** -0.5 -> sqrt(2)/4``), a
    rational multiple of pi (``math.pi / 2``); otherwise its shortest round-trip decimal."""
    if isinstance(v, (sympy.Basic, Cx)):
        return v
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return sympy.Integer(int(v))
    if isinstance(v, int):
        return sympy.Integer(v)
    if isinstance(v, complex):
        return Cx(exact(v.real), exact(v.imag))
    if isinstance(v, float):
        return _exact_float(v)
    raise SymbolicUnsupported(type(v).__name__, f"cannot read {v!r} as a number")


_float_cache: dict[float, sympy.Expr] = {}


def _simple(x: float) -> sympy.Rational:
    f = fractions.Fraction(x).limit_denominator(_MAX_DEN)
    return sympy.Rational(f.numerator, f.denominator)


def _exact_float(v: float) -> sympy.Expr:
    if math.isnan(v):
        return sympy.nan
    if math.isinf(v):
        return sympy.oo if v > 0 else -sympy.oo
    hit = _float_cache.get(v)
    if hit is not None:
        return hit
    text = repr(v)
    digits = text.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    decimal = sympy.Rational(text)
    if len(digits) <= _SHORT_DECIMAL or not 1e-100 < abs(v) < 1e100:  # finfo.min & co.: their decimal
        out = decimal
    else:
        sign = 1 if v > 0 else -1
        candidates = (_simple(v), sign * sympy.sqrt(_simple(v * v)), _simple(v / math.pi) * sympy.pi)
        out = next((c for c in candidates if _round_trips(c, v)), decimal)
    if len(_float_cache) < 4096:
        _float_cache[v] = out
    return out


def _binary(v: float) -> sympy.Expr:
    """A value stored in a tensor: exactly its binary value."""
    if math.isnan(v):
        return sympy.nan
    if math.isinf(v):
        return sympy.oo if v > 0 else -sympy.oo
    return sympy.Rational(v)


class Cx:
    """A complex element as a pair of real SymPy expressions. Keeping real and imaginary parts apart
    is much faster than SymPy's ``I`` (which needs ``expand`` and ``re``/``im`` assumptions queries to
    take apart again) and is all RoPE's complex formulation needs: +, -, *, /, conjugate."""

    __slots__ = ("im", "re")

    def __init__(self, re, im):
        self.re, self.im = exact(re), exact(im)

    @staticmethod
    def _parts(o) -> tuple:
        return (o.re, o.im) if isinstance(o, Cx) else (o, sympy.Integer(0))

    def __add__(self, o):
        a, b = Cx._parts(o)
        return Cx(self.re + a, self.im + b)

    __radd__ = __add__

    def __sub__(self, o):
        a, b = Cx._parts(o)
        return Cx(self.re - a, self.im - b)

    def __rsub__(self, o):
        a, b = Cx._parts(o)
        return Cx(a - self.re, b - self.im)

    def __mul__(self, o):
        a, b = Cx._parts(o)
        return Cx(self.re * a - self.im * b, self.re * b + self.im * a)

    __rmul__ = __mul__

    def __truediv__(self, o):
        a, b = Cx._parts(o)
        den = a * a + b * b
        return Cx((self.re * a + self.im * b) / den, (self.im * a - self.re * b) / den)

    def __rtruediv__(self, o):
        return Cx(*Cx._parts(o)) / self

    def __neg__(self):
        return Cx(-self.re, -self.im)

    def __pos__(self):
        return self

    def __pow__(self, n):
        if not (isinstance(n, (int, sympy.Integer)) and 0 <= int(n) <= 8):
            raise SymbolicUnsupported("complex power", "only small non-negative integer powers of complex values")
        out = Cx(1, 0)
        for _ in range(int(n)):
            out = out * self
        return out

    def conjugate(self):
        return Cx(self.re, -self.im)

    def __repr__(self) -> str:
        return f"({self.re}) + I*({self.im})"


def _total(values: list) -> Any:
    """The sum of a list of elements (SymPy's n-ary Add, or pairwise for complex elements)."""
    if any(isinstance(v, Cx) for v in values):
        out = Cx(0, 0)
        for v in values:
            out = out + v
        return out
    return sympy.Add(*values)


# --- the tensor ------------------------------------------------------------------------------------


class SymTensor(torch.Tensor):
    """A storage-less tensor of SymPy expressions (``.sym``: an object ndarray). Every torch call on
    it goes through :func:`_dispatch`; what is not implemented raises :class:`SymbolicUnsupported`."""

    sym: np.ndarray
    is_complex_valued: bool

    @staticmethod
    def __new__(cls, data: np.ndarray, complex_valued: bool = False):
        dtype = torch.complex128 if complex_valued else torch.float64
        t = torch.Tensor._make_wrapper_subclass(cls, tuple(data.shape), dtype=dtype, device="cpu",
                                                requires_grad=False)
        t.sym = data
        t.is_complex_valued = complex_valued
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Reached only when native code got hold of a SymTensor (nothing intercepted the call above).
        raise SymbolicUnsupported(str(func), "it reached torch's native kernels, which symbolic tensors cannot enter")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

    def __repr__(self) -> str:  # torch's repr would read the (absent) storage
        return f"SymTensor(shape={tuple(self.sym.shape)})"


def _obj(value: Any) -> np.ndarray:
    """``value`` (a scalar or an array from a NumPy object operation) as an object ndarray."""
    if isinstance(value, np.ndarray):
        return value if value.dtype == object else value.astype(object)
    a = np.empty((), object)
    a[()] = value
    return a


def _is_complex(*xs) -> bool:
    return any(isinstance(x, SymTensor) and x.is_complex_valued for x in xs)


def _new(data: Any, complex_valued: bool = False) -> SymTensor:
    return SymTensor(_obj(data), complex_valued)


def _native_values(t: torch.Tensor) -> tuple[np.ndarray, Callable]:
    """A native tensor's values as a NumPy array, and the converter of one value to SymPy."""
    with torch._C.DisableTorchFunctionSubclass():
        t = t.detach().cpu()
        if t.is_complex():
            raise SymbolicUnsupported("complex tensor", "complex constants made outside the kernel are not followed")
        if t.is_floating_point():
            return t.to(torch.float64).numpy(), _binary
        return t.to(torch.int64).numpy(), sympy.Integer


def _values_to_obj(values: np.ndarray, conv: Callable) -> np.ndarray:
    values = np.asarray(values)
    _spend(int(values.size))  # every value becomes a SymPy number: work the budget counts
    out = np.empty(values.shape, object)
    flat = out.reshape(-1)
    for i, v in enumerate(values.reshape(-1).tolist()):
        flat[i] = conv(v)
    return out


def _native_to_obj(t: torch.Tensor) -> np.ndarray:
    return _values_to_obj(*_native_values(t))


def _sym(x: Any) -> SymTensor:
    """A tensor, number or nested list as a SymTensor."""
    if isinstance(x, SymTensor):
        return x
    if isinstance(x, np.ndarray):
        return _new(x)
    if isinstance(x, torch.Tensor):
        return _new(_native_to_obj(x))
    if isinstance(x, (list, tuple)):
        parts = [_sym(v) for v in x]
        if not parts:
            return _new(np.empty((0,), object))
        return _new(np.stack([p.sym for p in parts]), _is_complex(*parts))
    return _new(exact(x), isinstance(x, complex))


def _data(x: Any) -> np.ndarray:
    return _sym(x).sym


def symbols_like(name: str, shape: tuple[int, ...]) -> SymTensor:
    """A SymTensor of distinct real symbols ``name[i,j,...]``."""
    out = np.empty(shape, object)
    for idx in np.ndindex(*shape):
        out[idx] = sympy.Symbol(f"{name}[{','.join(map(str, idx))}]", real=True)
    return _new(out)


def _constant_values(x: Any, op: str) -> np.ndarray:
    """The elements of ``x`` as plain Python numbers; refuses values that depend on the inputs."""
    if isinstance(x, torch.Tensor) and not isinstance(x, SymTensor):
        with torch._C.DisableTorchFunctionSubclass():
            return x.detach().cpu().numpy()
    data = _data(x)
    out = np.empty(data.shape, object)
    for idx in np.ndindex(*data.shape):
        e = data[idx]
        if isinstance(e, Cx):
            raise SymbolicUnsupported(op, "it needs a complex value as a number")
        if e.free_symbols:
            raise SymbolicUnsupported(op, "it needs the value of an input-dependent quantity (data-dependent "
                                          "control flow, a mask or an index computed from the inputs)")
        if e.is_integer:
            out[idx] = int(e)
        else:
            out[idx] = float(e)
    return out


# --- elementwise helpers ---------------------------------------------------------------------------


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


# --- reductions ------------------------------------------------------------------------------------


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


# --- norms of the catalogue ----------------------------------------------------------------------


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


# --- shapes -------------------------------------------------------------------------------------------


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


# --- casts and conversions -----------------------------------------------------------------------------


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


def _factory_dtype(kwargs: dict) -> Any:
    return kwargs.get("dtype")


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


# --- registry ---------------------------------------------------------------------------------------------------

_HANDLERS: dict[Any, Callable] = {}
_SOURCES = (torch, torch.Tensor, F, torch.special, torch.linalg)


def _register(names: Iterable[str], handler: Callable, sources=_SOURCES) -> None:
    for name in names:
        for owner in sources:
            f = getattr(owner, name, None)
            if f is not None and callable(f):
                _HANDLERS[f] = handler


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

# Tensor properties answered from the wrapper's metadata; the others are computed.
_METADATA = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "requires_grad", "layout", "names",
                       "is_sparse", "is_quantized", "is_meta", "is_mkldnn", "is_nested", "grad", "grad_fn",
                       "is_leaf", "itemsize", "_base", "output_nr", "_version", "is_xpu", "is_mps"})
_PROPERTIES = {"T": _t, "mT": lambda x: _transpose(x, -2, -1), "H": _t, "mH": lambda x: _transpose(x, -2, -1),
               "real": _real, "imag": _imag, "data": lambda x: x}
_PASSTHROUGH = frozenset({"size", "dim", "ndimension", "numel", "nelement", "element_size", "is_floating_point",
                          "is_complex", "is_contiguous", "stride", "storage_offset", "get_device", "is_signed",
                          "__hash__", "is_inference", "has_names", "__reduce_ex__", "__dlpack_device__",
                          "__get__", "__set__"})


def _find(obj: Any, pred: Callable[[Any], bool]) -> bool:
    if pred(obj):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_find(o, pred) for o in obj)
    if isinstance(obj, dict):
        return any(_find(o, pred) for o in obj.values())
    return False


def _is_sym(o: Any) -> bool:
    return isinstance(o, SymTensor)


def _is_floating_native(o: Any) -> bool:
    return isinstance(o, torch.Tensor) and not isinstance(o, SymTensor) and (o.is_floating_point() or o.is_complex())


_active = threading.local()


def _elements(obj: Any) -> int:
    """Symbolic elements held by ``obj`` (tensors in nested lists, tuples and dicts)."""
    if isinstance(obj, SymTensor):
        return int(obj.sym.size)
    if isinstance(obj, (list, tuple)):
        return sum(_elements(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_elements(o) for o in obj.values())
    return 0


def _spend(units: int) -> None:
    deadline = getattr(_active, "deadline", None)
    if deadline is not None and units:
        deadline.spend(units)


def _check_active() -> None:
    deadline = getattr(_active, "deadline", None)
    if deadline is not None:
        deadline.check()
    if getattr(realmode._tls, "bypass", 0):
        raise SymbolicUnsupported("kcert.semantic_round", "a rounding that belongs to the definition has no exact "
                                                          "real-number form")


def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    _check_active()
    name = getattr(func, "__name__", "") or ""
    if name in ("__get__", "__set__"):
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        if args and isinstance(args[0], SymTensor) and prop not in _METADATA:
            if name == "__get__" and prop in _PROPERTIES:
                return _PROPERTIES[prop](args[0])
            raise SymbolicUnsupported(f"Tensor.{prop}")
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)
    try:
        handler = _HANDLERS.get(func)
    except TypeError:  # unhashable callable
        handler = None
    has_sym = _find((args, kwargs), _is_sym)
    if handler is None:
        if name in _PASSTHROUGH:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if has_sym or _find((args, kwargs), _is_floating_native):
            raise SymbolicUnsupported(_op_name(func))
        out = func(*args, **kwargs)
        if _find(out, _is_floating_native):
            raise SymbolicUnsupported(_op_name(func), "it makes floating values the symbolic evaluator cannot follow")
        return out
    if not has_sym and not _find((args, kwargs), _is_floating_native):
        # integers only (positions, indices): exact natively, unless the result is floating
        out = func(*args, **kwargs)
        if not _find(out, _is_floating_native):
            return out
    out = handler(*args, **kwargs)
    _spend(_elements((args, kwargs)) + _elements(out))  # the deterministic work budget
    return out


class SymbolicMode(TorchFunctionMode):
    """Answer every torch call with the symbolic evaluator (see the module docstring)."""

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
