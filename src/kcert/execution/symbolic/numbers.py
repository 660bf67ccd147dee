"""Numbers: Python literals read as exact SymPy numbers (:func:`exact`), values stored in tensors taken
as their binary value, and :class:`Cx`, a complex element kept as a pair of real expressions."""

from __future__ import annotations

import fractions
import math
from typing import Any

import numpy as np
import sympy

from .limits import SymbolicUnsupported


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
