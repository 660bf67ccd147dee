"""The generalized Pareto distribution (GPD, location 0) of exceedances over a threshold: its
maximum-likelihood fit with the shape restricted to bounds (:func:`fit_gpd`; :func:`fit_gpd_batch`
over the rows of bootstrap resamples), the T-step return level and the quantile. The variance gate's
tail fit (:mod:`kcert.stats.tail`, docs/method.md, "Gate 3") is built on it.

Fitting method (Grimshaw 1993): with ``theta = xi / sigma`` the likelihood maximised over
``xi`` for fixed ``theta`` has ``xi = k(theta) = mean(log1p(theta * y))``, which leaves the
one-dimensional profile ``l*(theta) = -n*log(k/theta) - n*k - n`` on ``theta > -1/max(y)``.

Numerics. Rows are scaled by their maximum ``M`` (``z = y/M``, ``t = theta*M > -1``) and searched
in ``s = log1p(t)``. A GPD sample's maximum puts the optimum near ``1 + t = n**xi`` (about 1e-3 at
``xi = -1``, n = 1000) and the ``xi = -1`` end of the interval can sit 1e-70 from ``t = -1``: ``t``
cannot resolve that, ``s`` can, since ``1 + t*z = (1 - z) + exp(s)*z`` is a sum of non-negative
terms. The grid is dense where ``s ~ xi*ln(n)``. The stationary point is the root of the analytic
derivative (full precision, where a search on the flat profile value gets only about 1e-8).

Bounds. ``xi`` is restricted to ``[a, b]`` (default ``[-1, 0]``; the likelihood is unbounded
below -1). The Grimshaw profile covers the ``theta`` interval where ``k(theta)`` is in ``[a, b]``;
when its maximum sits on an end, the constrained MLE lies on the face ``xi = a`` or ``xi = b`` with
``sigma`` re-optimised (at ``xi = 0``: exponential, ``sigma = mean(y)``; at ``xi = -1``: uniform,
``sigma = max(y)``), which is at least as likely as the profile's end point. Both faces are always
scored, so the result is the maximum over the whole constrained set.

This module imports numpy and scipy only (never torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import optimize

__all__ = ["GPDFit", "fit_gpd", "fit_gpd_batch", "gpd_quantile", "return_level"]

_DEEP = math.log(0.5)  # s below this (t < -0.5): 1 + t*z may cancel, use (1 - z) + exp(s)*z
_S_FLOOR = -700.0  # exp(s) stays a normal double; beyond, the xi = a face takes over
_S_CEIL = 700.0
_SMALL_T = 1e-10  # |t| below this: exponential limit (series) for k/t
_SMALL_X = 1e-2  # |t*z| below this: series for x/(1+x) - log1p(x), which cancels
_GRID = 40  # coarse grid points per row
_XTOL = 1e-13  # root tolerance in s (absolute part)
_RTOL = 4 * np.finfo(np.float64).eps
_CHUNK_ELEMENTS = 1 << 17  # rows per batch chunk: ~1 MiB work buffers
_TIE = 1e-12  # relative log-likelihood margin within which a face (exact bound) wins a tie


# --------------------------------------------------------------------------------------------
# Public results
# --------------------------------------------------------------------------------------------


def return_level(threshold, exceedance_rate, horizon, shape, scale):
    """``r_T = u + sigma/xi * ((T*zeta)**xi - 1)`` (``u + sigma*ln(T*zeta)`` at ``xi = 0``),
    elementwise over ``shape``/``scale`` arrays; ``u`` where ``T*zeta <= 1``.

    Written as ``sigma * expm1(xi*L) / xi`` with ``L = ln(T*zeta)`` so it is continuous and
    accurate through ``xi = 0``."""
    shape = np.asarray(shape, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    tz = float(horizon) * float(exceedance_rate)
    if not tz > 1.0:
        return np.full(np.broadcast(shape, scale).shape, float(threshold))[()]
    log_tz = math.log(tz)
    zero = shape == 0.0
    safe = np.where(zero, 1.0, shape)
    excess = np.where(zero, scale * log_tz, scale * np.expm1(shape * log_tz) / safe)
    return (float(threshold) + excess)[()]


@dataclass(frozen=True)
class GPDFit:
    """Generalized Pareto fit (location 0) of ``n`` exceedances over a threshold."""

    shape: float  # xi
    scale: float  # sigma
    log_likelihood: float
    n: int

    def return_level(self, threshold: float, exceedance_rate: float, horizon: float) -> float:
        """T-step return level ``u + sigma/xi*((T*zeta)**xi - 1)``; ``u`` when ``T*zeta <= 1``
        (the level is at or below the threshold, which the caller flags)."""
        return float(return_level(threshold, exceedance_rate, horizon, self.shape, self.scale))


# --------------------------------------------------------------------------------------------
# Profile likelihood on rows of exceedances
# --------------------------------------------------------------------------------------------


class _Rows:
    """A (B, n) block of exceedance samples, each row scaled by its maximum, with work buffers.

    Evaluations write into preallocated (B, n) buffers: fresh multi-megabyte temporaries cost
    more in page faults than the arithmetic itself."""

    def __init__(self, y: np.ndarray):
        self.y = y
        self.b, self.n = y.shape
        self.m = y.max(axis=1)
        inv = 1.0 / self.m[:, None]
        self.z = y * inv  # in (0, 1], exactly 1 at the maximum
        self.d = (self.m[:, None] - y) * inv  # 1 - z without cancellation
        self.mz = self.z.mean(axis=1)
        self.mz2 = (self.z * self.z).mean(axis=1)
        self.zmin = self.z.min(axis=1)
        self.log_m = np.log(self.m)
        self._buf = {}

    def buf(self, name: str, m: int) -> np.ndarray:
        arr = self._buf.get(name)
        if arr is None:
            arr = self._buf[name] = np.empty((self.b, self.n))
        return arr[:m]

    def full(self, idx) -> bool:
        # row subsets are sorted and unique, so one as long as the block is every row
        return idx is None or len(idx) == self.b

    def pick(self, arr, idx):
        return arr if self.full(idx) else arr[idx]

    def rows_of(self, name: str, idx) -> np.ndarray:
        """``z`` or ``d`` of the rows ``idx`` (a buffer copy for a subset)."""
        arr = getattr(self, name)
        if self.full(idx):
            return arr
        return np.take(arr, idx, axis=0, out=self.buf("sel_" + name, len(idx)))


def _log_terms(rows: _Rows, s: np.ndarray, idx, need_u: bool = False):
    """``t = expm1(s)``, ``x = t*z``, ``u = 1 + x`` (None unless ``need_u`` or needed) and
    ``L = log(u)`` for each row's point ``s``, accurately. Results live in work buffers."""
    m = len(s)
    z = rows.rows_of("z", idx)
    t = np.expm1(s)
    x = np.multiply(t[:, None], z, out=rows.buf("x", m))
    log_u = rows.buf("log_u", m)
    deep = s < _DEEP
    n_deep = int(np.count_nonzero(deep))
    if n_deep < m:
        np.log1p(x, out=log_u)
    u = None
    if n_deep:
        # near t = -1, 1 + x cancels; this sum of non-negative terms keeps u's relative precision
        u = np.multiply(np.exp(s)[:, None], z, out=rows.buf("u", m))
        np.add(u, rows.rows_of("d", idx), out=u)
        if n_deep == m:
            np.log(u, out=log_u)
        else:
            di = np.flatnonzero(deep)
            log_u[di] = np.log(u[di])
    elif need_u:
        u = np.add(x, 1.0, out=rows.buf("u", m))
    return t, x, u, log_u


def _k_and_ratio(rows: _Rows, t: np.ndarray, log_u: np.ndarray, idx):
    """``k = mean(log(1 + t*z))`` and ``k/t`` (which tends to ``mean(z)`` as ``t -> 0``)."""
    k = log_u.mean(axis=1)
    small = np.abs(t) < _SMALL_T
    if small.any():
        series = rows.pick(rows.mz, idx) - 0.5 * t * rows.pick(rows.mz2, idx)
        ratio = np.where(small, series, k / np.where(small, 1.0, t))
        k = np.where(small, t * series, k)
    else:
        ratio = k / t
    return k, ratio


def _profile(rows: _Rows, s: np.ndarray, idx=None) -> np.ndarray:
    """Profile log-likelihood per exceedance, less ``log M``: ``-(log(k/t) + k + 1)``."""
    t, _, _, log_u = _log_terms(rows, s, idx)
    k, ratio = _k_and_ratio(rows, t, log_u, idx)
    return -(np.log(ratio) + k + 1.0)


def _phi_mean(rows: _Rows, t, x, u, log_u) -> np.ndarray:
    """Row means of ``x/(1+x) - log1p(x)`` (<= 0), by a series where ``|t| < 0.01``: there
    the two terms cancel (``|x| <= |t|`` since ``z <= 1``)."""
    phi = np.divide(x, u, out=rows.buf("tmp", len(t)))
    np.subtract(phi, log_u, out=phi)
    small = np.flatnonzero(np.abs(t) < _SMALL_X)
    if small.size:
        xs = x[small]
        poly = 6 / 7 - xs * (7 / 8)
        for c in (-5 / 6, 4 / 5, -3 / 4, 2 / 3, -1 / 2):
            poly = c + xs * poly
        phi[small] = xs * xs * poly
    return phi.mean(axis=1)


def _dprofile(rows: _Rows, s: np.ndarray, idx=None) -> np.ndarray:
    """d/ds of :func:`_profile`: ``-(w*mean(phi)/(k*t) + w*mean(z/u))`` with ``w = exp(s)``.

    The form ``mean(phi)`` avoids the ``1/t - k'/k`` cancellation near the exponential limit."""
    t, x, u, log_u = _log_terms(rows, s, idx, need_u=True)
    k, ratio = _k_and_ratio(rows, t, log_u, idx)
    mean_phi = _phi_mean(rows, t, x, u, log_u)
    z_over_u = np.divide(rows.rows_of("z", idx), u, out=rows.buf("tmp", len(s)))
    w = np.exp(s)
    small = np.abs(t) < _SMALL_T
    kt = np.where(small, 1.0, k * t)
    d = -(w * mean_phi / kt + w * z_over_u.mean(axis=1))
    if small.any():
        mz, mz2 = rows.pick(rows.mz, idx), rows.pick(rows.mz2, idx)
        d = np.where(small, 0.5 * mz2 / mz - mz, d)
    return d


def _k_of_s(rows: _Rows, s: np.ndarray, idx=None) -> np.ndarray:
    t, _, _, log_u = _log_terms(rows, s, idx)
    return _k_and_ratio(rows, t, log_u, idx)[0]


def _face_h(rows: _Rows, s: np.ndarray, idx=None) -> np.ndarray:
    """``mean(t*z/(1 + t*z))``: increasing in s; the face ``xi = c`` is optimal where it equals
    ``c/(1+c)``."""
    _, x, u, _ = _log_terms(rows, s, idx, need_u=True)
    return np.divide(x, u, out=rows.buf("tmp", len(s))).mean(axis=1)


# --------------------------------------------------------------------------------------------
# Root finding and maximisation: scipy per row (scalar path) or vectorised (batch path)
# --------------------------------------------------------------------------------------------

# f(s, idx) evaluates rows ``idx`` at their points ``s``
_RowFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _root_scalar(f: _RowFn, lo, hi, f_lo, f_hi, idx) -> np.ndarray:
    out = np.empty(len(idx))
    for j, row in enumerate(idx):  # one row on the scalar path
        g = lambda s, r=row: float(f(np.array([s]), np.array([r]))[0])  # noqa: E731
        out[j] = optimize.brentq(g, lo[j], hi[j], xtol=_XTOL, rtol=_RTOL)
    return out


def _root_vector(f: _RowFn, lo, hi, f_lo, f_hi, idx, maxiter: int = 200) -> np.ndarray:
    """Illinois (modified regula falsi) on many brackets at once; bisection after 60 steps
    as a guarantee. Requires ``f_lo`` and ``f_hi`` of opposite signs."""
    a, b = np.array(lo, dtype=float), np.array(hi, dtype=float)
    fa, fb = np.array(f_lo, dtype=float), np.array(f_hi, dtype=float)
    side = np.zeros(a.shape, dtype=np.int8)
    out = 0.5 * (a + b)
    act = np.flatnonzero(np.abs(b - a) > _XTOL + _RTOL * np.abs(out))
    for it in range(maxiter):
        if act.size == 0:
            break
        A, Bb, FA, FB = a[act], b[act], fa[act], fb[act]
        mid = 0.5 * (A + Bb)
        if it < 60:
            with np.errstate(invalid="ignore", divide="ignore"):
                c = Bb - FB * (Bb - A) / (FB - FA)
            c = np.where((c - A) * (c - Bb) < 0, c, mid)  # stay strictly inside
        else:
            c = mid
        fc = f(c, idx[act])
        out[act] = c
        hit = fc == 0
        move_b = np.sign(fc) == np.sign(FB)
        move_a = ~move_b & ~hit
        # Illinois: halve the stale end's value when the same end moves twice running
        s_act = side[act]
        FA = np.where(move_b & (s_act == -1), 0.5 * FA, FA)
        FB = np.where(move_a & (s_act == 1), 0.5 * FB, FB)
        Bb, FB = np.where(move_b, c, Bb), np.where(move_b, fc, FB)
        A, FA = np.where(move_a, c, A), np.where(move_a, fc, FA)
        side[act] = np.where(move_b, -1, np.where(move_a, 1, 0))
        a[act], b[act], fa[act], fb[act] = A, Bb, FA, FB
        done = hit | (np.abs(Bb - A) <= _XTOL + _RTOL * np.abs(c))
        act = act[~done]
    return out


def _max_scalar(p: _RowFn, lo, hi, idx) -> np.ndarray:
    out = np.empty(len(idx))
    for j, row in enumerate(idx):
        g = lambda s, r=row: -float(p(np.array([s]), np.array([r]))[0])  # noqa: E731
        res = optimize.minimize_scalar(
            g, bounds=(lo[j], hi[j]), method="bounded", options={"xatol": 1e-12}
        )
        out[j] = res.x
    return out


def _max_vector(p: _RowFn, lo, hi, idx, iters: int = 80) -> np.ndarray:
    """Golden-section search on many brackets at once (fallback when the derivative does not
    bracket a root: a profile that is not unimodal between grid points)."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = np.array(lo, dtype=float), np.array(hi, dtype=float)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = p(c, idx), p(d, idx)
    for _ in range(iters):
        left = fc >= fd  # the maximum lies in [a, d]
        a, b = np.where(left, a, c), np.where(left, d, b)
        c_new = np.where(left, b - g * (b - a), d)
        d_new = np.where(left, c, a + g * (b - a))
        f_eval = p(np.where(left, c_new, d_new), idx)
        fc, fd = np.where(left, f_eval, fd), np.where(left, fc, f_eval)
        c, d = c_new, d_new
    return np.where(fc >= fd, c, d)


# --------------------------------------------------------------------------------------------
# The constrained fit, shared by the scalar and the batch path
# --------------------------------------------------------------------------------------------


def _check_bounds(shape_bounds) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in shape_bounds)
    except (TypeError, ValueError):
        raise ValueError(f"shape_bounds must be a pair (low, high), got {shape_bounds!r}") from None
    if not (math.isfinite(a) and math.isfinite(b)) or a > b:
        raise ValueError(f"shape_bounds must be finite with low <= high, got {shape_bounds!r}")
    if a < -1.0:
        raise ValueError(
            f"shape_bounds low = {a} < -1: the GPD likelihood is unbounded for shape < -1"
        )
    return a, b


def _check_exceedances(y, what: str = "exceedances") -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    bad = ~np.isfinite(y)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{what} must be finite: {int(bad.sum())} value(s) are nan or inf "
            f"(first at index {first if len(first) > 1 else first[0]})"
        )
    nonpos = y <= 0
    if nonpos.any():
        first = tuple(int(i) for i in np.argwhere(nonpos)[0])
        raise ValueError(
            f"{what} must be positive (values above the threshold): {int(nonpos.sum())} "
            f"value(s) are <= 0 (first at index {first if len(first) > 1 else first[0]}, "
            f"value {y[first]!r})"
        )
    return y


def _interval_end(rows: _Rows, c: float, root, idx: np.ndarray) -> np.ndarray:
    """The s where ``k(s) = c`` (k increases with s and has its sign)."""
    m = len(idx)
    if c == 0.0:
        return np.zeros(m)
    f = lambda s, i: _k_of_s(rows, s, i) - c  # noqa: E731
    if c < 0:
        # k(s) <= s/n for s <= 0, so k(c*n) <= c
        lo = np.full(m, max(c * rows.n, _S_FLOOR))
        hi = np.zeros(m)
    else:
        # k(s) >= log1p(t*zmin), so t = expm1(c)/zmin gives k >= c
        lo = np.zeros(m)
        with np.errstate(divide="ignore", over="ignore"):
            hi = np.minimum(np.log1p(math.expm1(c) / rows.zmin[idx]), _S_CEIL)
    f_lo, f_hi = f(lo, idx), f(hi, idx)
    out = np.where(f_lo >= 0, lo, hi)  # truncated at the floor or ceiling
    ok = (f_lo < 0) & (f_hi > 0)
    if ok.any():
        out[ok] = root(f, lo[ok], hi[ok], f_lo[ok], f_hi[ok], idx[ok])
    return out


def _face(rows: _Rows, c: float, root, idx: np.ndarray):
    """Best (xi = c, sigma, loglik) on the face xi = c, for rows ``idx``."""
    n, m = rows.n, len(idx)
    xi = np.full(m, c)
    if c == 0.0:  # exponential
        sigma = rows.pick(rows.y, idx).mean(axis=1)
        return xi, sigma, -n * (np.log(sigma) + 1.0)
    if c == -1.0:  # uniform on [0, sigma]: sigma as small as the data allow
        sigma = rows.m[idx].copy()
        return xi, sigma, -n * rows.log_m[idx]
    target = c / (1.0 + c)
    f = lambda s, i: _face_h(rows, s, i) - target  # noqa: E731
    if c < 0:
        # h(s) <= (1 - exp(-s))/n for s <= 0
        lo = np.full(m, max(-math.log1p(-n * target), _S_FLOOR))
        hi = np.zeros(m)
    else:
        # h(s) >= 1 - 1/(1 + t*zmin)
        lo = np.zeros(m)
        with np.errstate(divide="ignore", over="ignore"):
            hi = np.minimum(np.log1p(c / rows.zmin[idx]), _S_CEIL)
    f_lo, f_hi = f(lo, idx), f(hi, idx)
    s = np.where(f_lo >= 0, lo, hi)
    ok = (f_lo < 0) & (f_hi > 0)
    if ok.any():
        s[ok] = root(f, lo[ok], hi[ok], f_lo[ok], f_hi[ok], idx[ok])
    t, _, _, log_u = _log_terms(rows, s, idx)
    k = log_u.mean(axis=1)  # = mean(log1p(c*y/sigma))
    sigma = c * rows.m[idx] / t
    return xi, sigma, -n * np.log(sigma) - (1.0 / c + 1.0) * n * k


def _grid(lo: np.ndarray, hi: np.ndarray, a: float, b: float, log_n: float) -> np.ndarray:
    """(m, _GRID) points per row, increasing, covering [lo, hi] and dense in the window where the
    optimum usually sits (s ~ xi*ln(n): 1 + t = n**xi for a GPD sample's maximum)."""
    w_lo = np.maximum(lo, a * log_n - 3.0)
    w_hi = np.minimum(hi, b * log_n + 3.0)
    empty = w_lo >= w_hi
    w_lo, w_hi = np.where(empty, lo, w_lo), np.where(empty, hi, w_hi)
    qa = np.where(w_lo > lo, 0.15, 0.0)[:, None]
    qb = np.where(w_hi < hi, 0.85, 1.0)[:, None]
    q = np.linspace(0.0, 1.0, _GRID)[None, :]
    lo, hi, w_lo, w_hi = lo[:, None], hi[:, None], w_lo[:, None], w_hi[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        left = lo + (w_lo - lo) * q / qa
        mid = w_lo + (w_hi - w_lo) * (q - qa) / (qb - qa)
        right = w_hi + (hi - w_hi) * (q - qb) / (1.0 - qb)
    g = np.where(q < qa, left, np.where(q <= qb, mid, right))
    g[:, 0], g[:, -1] = lo[:, 0], hi[:, 0]
    return g


def _fit_rows(y: np.ndarray, a: float, b: float, root, maximize):
    """Constrained GPD MLE of each row of y (B, n); returns (shape, scale, loglik) arrays."""
    rows = _Rows(y)
    all_rows = np.arange(y.shape[0])
    cands = [_face(rows, b, root, all_rows)]  # faces first: they win exact ties
    if a != b:
        cands.append(_face(rows, a, root, all_rows))
        s_lo = _interval_end(rows, a, root, all_rows)
        s_hi = _interval_end(rows, b, root, all_rows)
        cands.append(_profile_max(rows, s_lo, s_hi, a, b, root, maximize))
    xi, sigma, ll = (np.stack(v) for v in zip(*cands))
    best = ll.max(axis=0)
    # first candidate within a hair of the best (prefers an exact bound on a tie)
    pick = np.argmax(ll >= best - _TIE * (1.0 + np.abs(best)), axis=0)
    return xi[pick, all_rows], sigma[pick, all_rows], ll[pick, all_rows]


def _profile_max(rows: _Rows, s_lo, s_hi, a, b, root, maximize):
    """Maximum of the Grimshaw profile over [s_lo, s_hi] per row: grid, then the root of the
    derivative in the bracketing grid cell."""
    B, n = rows.y.shape
    all_rows = np.arange(B)
    grid = _grid(s_lo, s_hi, a, b, math.log(n))
    vals = np.empty_like(grid)
    for j in range(_GRID):
        vals[:, j] = _profile(rows, grid[:, j])
    vals = np.where(np.isnan(vals), -np.inf, vals)
    i = np.argmax(vals, axis=1)
    take = lambda j: grid[all_rows, np.clip(j, 0, _GRID - 1)]  # noqa: E731
    s_i = take(i)
    d_i = _dprofile(rows, s_i)
    s_star = s_i.copy()
    up = (d_i > 0) & (i < _GRID - 1)  # rising: the maximum is in (s_i, s_{i+1})
    down = (d_i < 0) & (i > 0)
    other = np.where(up, take(i + 1), take(i - 1))
    need = np.flatnonzero(up | down)
    if need.size:
        d_other = _dprofile(rows, other[need], need)
        bracketed = np.where(up[need], d_other < 0, d_other > 0)
        r = need[bracketed]
        if r.size:
            lo = np.where(up[r], s_i[r], other[r])
            hi = np.where(up[r], other[r], s_i[r])
            d_lo = np.where(up[r], d_i[r], d_other[bracketed])
            d_hi = np.where(up[r], d_other[bracketed], d_i[r])
            s_star[r] = root(_dprofile_fn(rows), lo, hi, d_lo, d_hi, r)
        r = need[~bracketed]
        if r.size:  # not unimodal within the cell pair: search the value
            lo = grid[r, np.maximum(i[r] - 1, 0)]
            hi = grid[r, np.minimum(i[r] + 1, _GRID - 1)]
            s_star[r] = maximize(_profile_fn(rows), lo, hi, r)
    t, _, _, log_u = _log_terms(rows, s_star, None)
    k, ratio = _k_and_ratio(rows, t, log_u, None)
    ll = n * (-(np.log(ratio) + k + 1.0) - rows.log_m)
    xi = np.clip(k, a, b)  # the ends come from root finding: trim rounding
    return xi, rows.m * ratio, ll


def _profile_fn(rows):
    return lambda s, idx: _profile(rows, s, idx)


def _dprofile_fn(rows):
    return lambda s, idx: _dprofile(rows, s, idx)


def _chunk_rows(n: int) -> int:
    return max(1, _CHUNK_ELEMENTS // n)


# --------------------------------------------------------------------------------------------
# Public fitting functions
# --------------------------------------------------------------------------------------------


def fit_gpd(exceedances, shape_bounds=(-1.0, 0.0)) -> GPDFit:
    """Maximum-likelihood GPD (location 0) of positive exceedances, shape restricted to
    ``shape_bounds`` (default ``[-1, 0]``: the report's bounded-tail assumption).

    Grimshaw's profile over ``theta = xi/sigma`` is maximised on a coarse grid, then refined
    with Brent's method on its derivative; when the free optimum lies outside the bounds the
    result sits on the boundary (``xi = 0``: ``sigma = mean(y)``)."""
    a, b = _check_bounds(shape_bounds)
    y = np.asarray(exceedances, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"exceedances must be 1-D, got shape {y.shape}")
    if y.size < 2:
        raise ValueError(f"fit_gpd needs at least 2 exceedances, got {y.size}")
    y = _check_exceedances(y)
    xi, sigma, ll = _fit_rows(y[None, :], a, b, _root_scalar, _max_scalar)
    return GPDFit(float(xi[0]), float(sigma[0]), float(ll[0]), int(y.size))


def fit_gpd_batch(samples, shape_bounds=(-1.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fit_gpd` on each row of ``samples`` (B, n), vectorised over rows (bootstrap
    resamples); returns the (shape, scale) arrays of length B."""
    a, b = _check_bounds(shape_bounds)
    y = np.asarray(samples, dtype=np.float64)
    if y.ndim != 2:
        raise ValueError(f"samples must be 2-D (B, n), got shape {y.shape}")
    if y.shape[1] < 2:
        raise ValueError(f"fit_gpd_batch needs at least 2 exceedances per row, got {y.shape[1]}")
    if y.shape[0] == 0:
        return np.empty(0), np.empty(0)
    y = _check_exceedances(y, "samples")
    xi, sigma = np.empty(y.shape[0]), np.empty(y.shape[0])
    step = _chunk_rows(y.shape[1])
    for lo in range(0, y.shape[0], step):  # chunks of rows keep the work buffers in cache
        xi[lo : lo + step], sigma[lo : lo + step], _ = _fit_rows(
            y[lo : lo + step], a, b, _root_vector, _max_vector
        )
    return xi, sigma


# --------------------------------------------------------------------------------------------
# Quantile (the model quantiles of the report's QQ plot)
# --------------------------------------------------------------------------------------------


def gpd_quantile(probability, shape, scale):
    """Quantile of the GPD (location 0): ``sigma/xi * ((1 - p)**(-xi) - 1)``, ``-sigma*ln(1 - p)``
    at ``xi = 0`` (written with ``expm1`` so it is continuous through ``xi = 0``)."""
    p = np.asarray(probability, dtype=np.float64)
    if np.any((p < 0) | (p >= 1) | np.isnan(p)):
        raise ValueError("probability must be in [0, 1)")
    shape, scale = float(shape), float(scale)
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    log_tail = -np.log1p(-p)  # -ln(1 - p) >= 0
    if shape == 0.0:
        return (scale * log_tail)[()]
    return (scale * np.expm1(shape * log_tail) / shape)[()]
