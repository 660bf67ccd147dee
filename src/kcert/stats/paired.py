"""The shape difference bounded through the pairs (docs/method.md, Gate 3, "The paired difference").

prod and ref run on the same input in every replicate, so prod's error is ref's plus a difference,
``a = b + d``, and ``a <= b + max(d, 0)`` on every call. For any share ``0 < eps < 1`` of the horizon's
tail probability, the union bound ``P(a > x + y) <= P(b > x) + P(d > y)`` gives, between return levels,

    r_a(T) <= r_b(T / (1 - eps)) + r_d(T / eps),

so the tail ratio ``A_T = max(0, r_a(T) - slack) / r_b(T)`` is at most ``rho + (r_d(T / eps) - slack) /
r_b(T)``, with ``rho = r_b(T / (1 - eps)) / r_b(T)`` the growth of ref's return level over a horizon
longer by ``1 / (1 - eps)``. Hence ``A_T <= line`` whenever

    r_d(T / eps) <= slack + (line - rho) * r_b(T),

and ``r_b(T)`` is at least ref's k-th largest of R errors unless k of R draws land beyond ref's
``1 - 1/T`` quantile, a binomial probability made negligible by the choice of k
(:func:`return_level_floor`: ``k = 2`` at R = 1024, T = 6.25e5). With d's own profile-likelihood upper
bound (its own tail, its own shape) for ``r_d`` and that order statistic ``b_(k)`` for ``r_b(T)``,
``rho + max(0, upper - slack) / b_(k)`` is an upper bound of ``A_T`` (``PairedBound.ratio_upper``).

What this bounds that the common-shape bound cannot: nothing is assumed about how prod's tail shape
relates to ref's. A prod whose error is ref's plus a small difference (prod and ref rounding the same
computation a little differently, the usual benign pair) has that difference's tail to extrapolate,
far lighter than either error; the separate-shapes bound, extrapolating each side with its own free
shape, cannot use the pairing and stays wide. When prod's and ref's errors are unrelated (a different
algorithm), ``d``'s tail is as heavy as prod's and the paired bound is no tighter than prod's own.

``rho`` is not estimated: it is bounded over every GPD tail the gate's model allows (shape within
``shape_bounds``) at ref's exceedance count over the horizon, the worst case being a threshold at
zero: for ``eps = 0.1``, shapes up to 1 and ``T zeta >= 10``, ``rho <= 1.124``; shapes up to 2 would
give 1.237.

This module imports numpy and scipy only (never torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .tail_ratio import SHAPE_BOUNDS, exceedances_of, return_level_upper

__all__ = ["PairedBound", "paired_bound", "return_level_floor", "return_level_growth"]

HORIZON_SHARE = 0.1  # eps: the share of the horizon's tail probability given to the difference
FLOOR_SHARE = 0.01  # the order statistic's miss probability, as a share of the bound's alpha


@dataclass(frozen=True)
class PairedBound:
    """prod's error as ref's plus a difference, the difference's tail bounded on its own.

    Attributes
    ----------
    ratio_upper : float
        The bound it puts on the tail ratio: ``growth + max(0, upper - slack) / ref_floor`` (inf when
        the difference has too few positive values for a tail, or ``ref_floor`` is zero).
    upper : float
        The profile-likelihood upper bound of the difference's return level at ``T / share`` calls
        (one-sided ``1 - alpha``), in harm units.
    ref_floor : float
        ``b_(k)``, the order statistic of ref's errors taken as a lower bound of its T-call level.
    growth : float
        The bound on ``rho``, ref's return level at ``T / (1 - share)`` calls over its level at T.
    share : float
        ``eps``, the share of the horizon's tail probability given to the difference.
    max_difference : float
        The largest observed ``a - b``.
    positive : int
        Replicates where prod's error exceeds ref's.
    alpha : float
        The bound's one-sided level.
    """

    ratio_upper: float
    upper: float
    ref_floor: float
    growth: float
    share: float
    max_difference: float
    positive: int
    alpha: float


def return_level_growth(share: float, calls: float, shape_bounds=SHAPE_BOUNDS) -> float:
    """The largest ``r(T / (1 - share)) / r(T)`` of a GPD tail with its shape in ``shape_bounds`` and
    ``calls = T zeta`` exceedances expected over T (at least 10 assumed), threshold at zero (the worst).

    Examples
    --------
    >>> round(return_level_growth(0.1, 1e4), 3), round(return_level_growth(0.1, 10), 3)
    (1.111, 1.123)
    """
    m = max(float(calls), 10.0)
    k = 1.0 / (1.0 - share)
    xi = np.linspace(shape_bounds[0], shape_bounds[1], 401)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(np.abs(xi) < 1e-9, math.log(m), np.expm1(xi * math.log(m)) / xi)
        longer = np.where(np.abs(xi) < 1e-9, math.log(m * k), np.expm1(xi * math.log(m * k)) / xi)
    return float(max(1.0, np.max(longer / level)))


def return_level_floor(b, horizon: float, alpha: float) -> float:
    """A lower bound of ref's ``horizon``-call return level from its own errors, no model: the k-th
    largest of the R values, k the smallest with ``P(Binomial(R, 1/T) >= k) <= FLOOR_SHARE * alpha`` (k
    draws beyond the level are needed for it to sit under the k-th largest).

    Examples
    --------
    >>> return_level_floor([3.0, 1.0, 2.0, 5.0] * 256, 6.25e5, 0.00135)  # k = 2 of 1024: the second largest
    5.0
    """
    b = np.sort(np.asarray(b, np.float64))[::-1]
    k = 1
    while k < b.size and stats.binom.sf(k - 1, b.size, 1.0 / horizon) > FLOOR_SHARE * alpha:
        k += 1
    return float(b[k - 1]) if b.size else 0.0


def paired_bound(a, b, horizon: float, alpha: float, *, slack: float, quantile: float, min_exceedances: int,
                 share: float = HORIZON_SHARE) -> PairedBound:
    """The paired bound for errors ``a`` (prod) and ``b`` (ref) of the same replicates, in harm units,
    each side's tail threshold at ``quantile`` of its positive values (lowered to keep
    ``min_exceedances``), as the gate places them."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    d = a - b
    floor = return_level_floor(b, horizon, alpha)
    try:
        ref_rate = exceedances_of(b, quantile, min_exceedances).rate
        side = exceedances_of(np.maximum(d, 0.0), quantile, min_exceedances)
    except ValueError:  # too few positive values for a tail: nothing bounds the unseen differences
        return PairedBound(ratio_upper=math.inf, upper=math.inf, ref_floor=floor, growth=math.nan, share=share,
                           max_difference=float(d.max()), positive=int(np.sum(d > 0)), alpha=alpha)
    growth = return_level_growth(share, horizon * ref_rate)
    upper = return_level_upper(side, horizon / share, alpha)
    ratio = growth + max(0.0, upper - slack) / floor if floor > 0 else math.inf
    return PairedBound(ratio_upper=float(ratio), upper=float(upper), ref_floor=floor, growth=growth, share=share,
                       max_difference=float(d.max()), positive=int(np.sum(d > 0)), alpha=alpha)
