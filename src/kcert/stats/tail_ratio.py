"""Compare two error tails at a horizon: how much larger is prod's T-call worst error than ref's?

The variance gate's question (docs/method.md, Gate 3) is whether prod amplifies the error tail
against the float64 oracle: over ``T`` calls, is the error prod makes more than twice the error
ref makes? Each side's per-replicate error ``a`` (prod) and ``b`` (ref), in harm units, gets a
peaks-over-threshold model: ``n ~ Binomial(N, zeta)`` exceedances of a threshold ``u`` with
GPD(xi, sigma) excesses. Their T-call return levels ``r_a``, ``r_b`` give the tail ratio

    A_T = max(0, r_a - slack) / r_b        (slack: one harm unit, the report's eps)

and its profile-likelihood interval is the range of ``A_T`` over the likelihood-ratio region
``{2 (l_hat - l) <= c}``, ``c = z_(1-alpha)^2``, of the two sides' joint likelihood.

Why two tails and not the per-replicate ratio ``K = (E_prod - eps) / E_ref``: K divides by ref's
error of the same replicate, which is small in some replicates whatever the kernels, so K has a heavy
tail on benign pairs and its extrapolation over ``T / R`` ~ 600 explodes (a compiled SwiGLU MLP whose
errors are no larger than eager's got U = 1720 on K). What a training run feels is each kernel's
error distribution, not the pairing.

Why a common shape: extrapolating one tail 600x beyond the data is uncertain mostly through xi
(the return level of one side is known to about +-40 % at 3 sigma with R = 1024). When both tails
share xi that uncertainty largely cancels in the ratio: two identical error laws give a bound of
1.1-1.5 instead of ~2 (benchmarks/tail_coverage.py). The common shape is an assumption, so it is tested: a likelihood-ratio test
of ``xi_prod <= xi_ref`` against prod's tail being heavier. When it is rejected the interval comes
from the model with one shape per side, which assumes nothing about the shapes and is wider.

The joint likelihood treats the two samples as independent. They are positively dependent (the
same inputs), which makes the two return-level estimates move together and the ratio better
determined than independence says: the interval is conservative for it.

This module imports numpy and scipy only (never torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from .gpd import fit_gpd

__all__ = ["Exceedances", "HeterogeneityTest", "TailRatioInterval", "deviance_for", "exceedances_of",
           "return_level_upper", "tail_ratio_estimate", "tail_ratio_interval"]

_V = np.linspace(-16.0, 9.0, 126)  # log(sigma - edge) - log(mean y): 0.2 steps over 25 e-folds; crossings refined
_GRID_ELEMENTS = 4_000_000  # (xi, sigma, excess) terms per chunk of the log-likelihood grid
_XI_POINTS = 41
_ZETA_POINTS = 13
_SPLITS = 25  # fractions of the deviance budget given to prod's side
_ROUNDS = 3
_FINE_XI_POINTS = 201  # the common shape's MLE: a 0.01 grid on [-1, 1], then a parabola through the peak
SHAPE_BOUNDS = (-1.0, 1.0)


def deviance_for(alpha: float) -> float:
    """The likelihood-ratio cut-off ``c`` of a one-sided ``1 - alpha`` bound: ``z_(1-alpha)**2``."""
    alpha = float(alpha)
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    return float(stats.norm.isf(alpha)) ** 2


def _binomial_loglik(zeta, n: int, total: int):
    zeta = np.asarray(zeta, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = (total - n) * np.log1p(-zeta) if total > n else np.zeros_like(zeta)
        return n * np.log(zeta) + rest


def _h(xi, log_tz):
    """``((T zeta)**xi - 1)/xi`` clipped at 0 (``r_T = u`` when ``T zeta <= 1``)."""
    xi, log_tz = np.broadcast_arrays(np.asarray(xi, np.float64), np.asarray(log_tz, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(np.abs(xi) < 1e-12, log_tz, np.expm1(xi * log_tz) / np.where(xi == 0, 1.0, xi))
    return np.maximum(h, 0.0)


def _gpd_loglik(y: np.ndarray, xi: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """GPD log-likelihood of the sample ``y`` at every ``(xi[a], sigma[a, v])``: shape ``(A, V)``;
    ``-inf`` outside the support. Computed in chunks of rows to bound the work arrays."""
    rows = max(1, _GRID_ELEMENTS // max(1, sigma.shape[1] * y.size))
    if xi.size > rows:
        return np.concatenate([_gpd_loglik(y, xi[i:i + rows], sigma[i:i + rows]) for i in range(0, xi.size, rows)])
    xi = xi[:, None, None]
    s = sigma[:, :, None]
    z = y[None, None, :] / s
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        arg = xi * z
        inside = np.all(arg > -1.0, axis=-1)
        safe_xi = np.where(xi == 0, 1.0, xi)
        terms = np.where(xi == 0, z, (1.0 + 1.0 / safe_xi) * np.log1p(np.maximum(arg, -1.0 + 1e-300)))
        ll = -y.size * np.log(sigma) - terms.sum(axis=-1)
    # xi = -1 exactly: the density 1/sigma on [0, sigma], support sigma >= max(y)
    return np.where(inside | ((xi[:, :, 0] == -1.0) & (sigma >= y.max())), ll, -np.inf)


def _sigma_grid(y: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """sigma values per xi, uniform in ``log(sigma - edge)`` above the support's edge ``-xi max(y)``."""
    edge = np.maximum(0.0, -xi) * y.max()
    return edge[:, None] + y.mean() * np.exp(_V)[None, :]


@dataclass(frozen=True)
class Exceedances:
    """One side's peaks over threshold: ``excesses`` over ``threshold`` among ``n_total`` replicates
    (zeros and values under the threshold included in ``n_total``)."""

    threshold: float
    excesses: np.ndarray
    n_total: int
    quantile: float  # the quantile of the positive values the threshold sits at
    n_positive: int
    maximum: float  # the largest observed value

    @property
    def n(self) -> int:
        return int(self.excesses.size)

    @property
    def rate(self) -> float:
        return self.n / self.n_total


def exceedances_of(x, quantile: float = 0.90, min_exceedances: int = 10) -> Exceedances:
    """The excesses of the positive values of ``x`` over their ``quantile`` quantile, lowered (down
    to the smallest positive value) to keep ``min_exceedances`` when there are few. Raises
    ``ValueError`` with fewer than three excesses (:func:`exceedances_or_reason` returns why instead)."""
    found = exceedances_or_reason(x, quantile, min_exceedances)
    if isinstance(found, str):
        raise ValueError(found)
    return found


def exceedances_or_reason(x, quantile: float = 0.90, min_exceedances: int = 10) -> Exceedances | str:
    """:func:`exceedances_of`, or the text saying why there is no tail when ``x`` has fewer than three
    excesses (a finding, not an error: the gates branch on it); input that is not a 1-D array of finite,
    non-negative values raises ``ValueError``."""
    x = np.asarray(x, np.float64)
    if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("x must be a 1-D array of finite, non-negative values")
    positive = x[x > 0]
    q = float(quantile)
    if positive.size * (1 - q) < min_exceedances:
        q = max(0.0, 1.0 - (min_exceedances + 1) / max(positive.size, 1))
    u = float(np.quantile(positive, q)) if positive.size else 0.0
    y = positive[positive > u] - u
    if y.size < 3:
        return f"{positive.size} positive values of {x.size}: fewer than 3 excesses over u = {u:.3g}"
    return Exceedances(threshold=u, excesses=y, n_total=int(x.size), quantile=q, n_positive=int(positive.size),
                       maximum=float(x.max()))


@dataclass(frozen=True)
class HeterogeneityTest:
    """Likelihood-ratio test of a common tail shape against prod's tail being the heavier one."""

    statistic: float  # 2 (l_separate - l_common) >= 0
    p_value: float  # one-sided: 0.5 P(chi2_1 > stat) when prod's own xi is the larger, else 1
    shape_prod: float
    shape_ref: float
    shape_common: float
    level: float
    rejects: bool


@dataclass(frozen=True)
class TailRatioInterval:
    """Profile-likelihood interval of the tail ratio ``A_T`` (each end one-sided at ``1 - alpha``)."""

    estimate: float
    lower: float
    upper: float  # inf when the region is unbounded (too little data to bound a tail)
    alpha: float
    deviance: float  # c
    model: str  # "common shape" or "separate shapes"
    shape_bounds: tuple[float, float]
    slack: float
    horizon: float
    shape_prod: float  # MLE of xi (equal to shape_ref under the common-shape model)
    shape_ref: float
    scale_prod: float
    scale_ref: float
    return_level_prod: float  # r_a at the MLE, in the errors' units
    return_level_ref: float
    threshold_prod: float
    threshold_ref: float
    exceedances_prod: int
    exceedances_ref: int
    heterogeneity: HeterogeneityTest | None = None
    common_estimate: float = math.nan  # A_T's MLE under the common shape
    separate_estimate: float = math.nan  # A_T's MLE with one shape per side
    separate_upper: float = math.nan  # U with one shape per side, one-sided at 1 - separate_alpha (nan: not asked)
    separate_alpha: float = math.nan


class _Side:
    """One side's profile machinery: the GPD log-likelihood on a (xi, sigma) grid and the exact
    profile maximum over sigma at each xi."""

    def __init__(self, ex: Exceedances, horizon: float):
        self.ex = ex
        self.y = ex.excesses
        self.n, self.total = ex.n, ex.n_total
        self.log_t = math.log(horizon)
        self.zeta_hat = self.n / self.total
        self.b_hat = float(_binomial_loglik(self.zeta_hat, self.n, self.total))
        self._grids: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self._maxima: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def profile(self, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`gpd_max`, cached per xi grid (every zoom round of both ends asks for its grid)."""
        key = xi.tobytes()
        if key not in self._maxima:
            self._maxima[key] = self.gpd_max(xi)
        return self._maxima[key]

    def grid(self, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (xi, sigma) grid's sigma values and GPD log-likelihoods, cached per xi grid (the upper
        and the lower end search the same first grid)."""
        key = xi.tobytes()
        if key not in self._grids:
            sigma = _sigma_grid(self.y, xi)
            self._grids[key] = (sigma, _gpd_loglik(self.y, xi, sigma))
        return self._grids[key]

    def gpd_max(self, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """max over sigma of the GPD log-likelihood at each xi, and the maximising sigma. The score
        decreases monotonically in sigma; its root is found by Newton steps in ``v = log(sigma - edge)``
        (the support's edge ``-xi max(y)`` sits at v = -inf, so no step leaves the support),
        safeguarded by a bisection bracket, all xi at once."""
        xi = np.asarray(xi, np.float64)
        y = self.y
        ymax, ymean = float(y.max()), float(y.mean())
        edge = np.maximum(0.0, -xi) * ymax
        lo = np.full(xi.shape, math.log(ymean * 1e-12))
        hi = np.full(xi.shape, math.log(ymean * 1e6))
        v = np.clip(np.log(np.maximum(ymean * (1 - xi) - edge, ymean * 1e-3)), lo, hi)  # sigma = mean (1 - xi)
        one = 1.0 + xi[:, None]
        uniform = xi <= -1.0 + 1e-12  # xi = -1: the density 1/sigma on [0, sigma], best at sigma = max y
        for _ in range(100):
            sigma = edge + np.exp(v)
            z = y[None, :] / sigma[:, None]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                q = 1.0 / (1.0 + xi[:, None] * z)
                g = -y.size + np.sum(one * z * q, axis=1)
                dg = -np.sum(one * z * q * q, axis=1) * np.exp(v) / sigma  # d g / d v
            g = np.where(np.isfinite(g), g, np.inf)
            lo, hi = np.where(g > 0, v, lo), np.where(g > 0, hi, v)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = v - g / dg
            bisect = ~np.isfinite(step) | (step <= lo) | (step >= hi)
            new = np.where(bisect, 0.5 * (lo + hi), step)
            done = (np.abs(new - v) < 1e-11) | uniform | (hi - lo < 1e-11)
            v = new
            if np.all(done):
                break
        sigma = edge + np.exp(v)
        sigma = np.where(uniform, ymax, sigma)
        ll = _gpd_loglik(y, xi, sigma[:, None])[:, 0]
        ll = np.where(uniform, -y.size * math.log(ymax), ll)  # (1 + 1/xi) log(1 - y/sigma) is 0 * -inf there
        return np.where(np.isnan(ll), -np.inf, ll), sigma

    def best(self, bounds: tuple[float, float]) -> tuple[float, float, float]:
        """The side's own MLE with xi in ``bounds``: (xi, sigma, total log-likelihood), by Grimshaw's
        method (:func:`kcert.stats.gpd.fit_gpd`)."""
        fit = fit_gpd(self.y, bounds)
        return fit.shape, fit.scale, fit.log_likelihood + self.b_hat

    def return_level(self, xi: float, sigma: float, zeta: float | None = None) -> float:
        zeta = self.zeta_hat if zeta is None else zeta
        return self.ex.threshold + sigma * float(_h(xi, self.log_t + math.log(zeta)))

    def zeta_grid(self, drop: float) -> np.ndarray:
        """exceedance rates whose binomial log-likelihood is within ``drop`` of its maximum."""
        n, total, b_hat = self.n, self.total, self.b_hat

        def gap(z):
            return float(_binomial_loglik(z, n, total)) - (b_hat - drop)

        z_lo = optimize.brentq(gap, 1e-300, self.zeta_hat) if gap(1e-300) < 0 else 1e-300
        z_hi = optimize.brentq(gap, self.zeta_hat, 1.0) if n < total and gap(1.0 - 1e-15) < 0 else 1.0
        return np.unique(np.concatenate([np.geomspace(max(z_lo, 1e-300), z_hi, _ZETA_POINTS), [self.zeta_hat]]))

    def extremes(self, xi: np.ndarray, gpd_top: np.ndarray, drops: np.ndarray, zetas: np.ndarray,
                 exact: bool = False, rows: np.ndarray | None = None):
        """For each ``xi[i]`` and drop ``drops[i, k]`` (log-likelihood units below ``gpd_top[i] +
        b_hat``), the largest and smallest return level over ``{(sigma, zeta): l_GPD + l_binom >=
        gpd_top[i] + b_hat - drop}``: two (A, K) arrays, -inf / +inf where the set is empty.
        ``rows``: only these entries of ``xi`` (the grid stays cached for the whole ``xi``)."""
        sigma, ll = self.grid(xi)  # (A, V) each
        if rows is not None:
            xi, gpd_top, drops, sigma, ll = xi[rows], gpd_top[rows], drops[rows], sigma[rows], ll[rows]
        a, k = drops.shape
        binom = _binomial_loglik(zetas, self.n, self.total)  # (Z,)
        levels = gpd_top[:, None, None] + self.b_hat - drops[:, None, :] - binom[None, :, None]  # (A, Z, K)
        lev = levels.reshape(a, -1)  # (A, Z*K)
        s_top, s_bottom = _level_ends(ll, sigma, lev, float(self.y.mean()), (self.y, xi) if exact else None)
        h = _h(xi[:, None], self.log_t + np.log(zetas)[None, :])  # (A, Z)
        h = np.repeat(h[:, :, None], k, axis=2).reshape(a, -1)
        u = self.ex.threshold
        with np.errstate(invalid="ignore"):
            r_top = np.where(np.isnan(s_top), -np.inf, u + np.where(h > 0, s_top * h, 0.0))
            r_bottom = np.where(np.isnan(s_bottom), np.inf, u + s_bottom * h)
        r_top = r_top.reshape(a, -1, k).max(axis=1)
        r_bottom = r_bottom.reshape(a, -1, k).min(axis=1)
        return r_top, r_bottom


def _level_ends(ll: np.ndarray, sigma: np.ndarray, levels: np.ndarray, ymean: float, exact=None):
    """Per row ``i`` and level ``levels[i, l]``: the largest and smallest sigma with ``ll >= level``,
    interpolated linearly in ``log(sigma - edge)`` between grid points (the grid is uniform in it);
    nan where no grid point reaches the level, upper inf when the set runs off the grid's top.
    ``exact=(y, xi)``: refine each crossing on the exact log-likelihood (regula falsi inside the grid
    bracket): the chord of a concave log-likelihood crosses a level early, so the linear estimate sits
    inside the region and would make a bound slightly too narrow."""
    mask = ll[:, None, :] >= levels[:, :, None]  # (A, L, V)
    found = mask.any(axis=-1)
    nv = ll.shape[1]
    last = nv - 1 - np.argmax(mask[..., ::-1], axis=-1)
    first = np.argmax(mask, axis=-1)
    rows = np.arange(ll.shape[0])[:, None]
    edge = sigma[:, :1] - ymean * math.exp(_V[0])

    def crossing(inside, outside):
        li, lo = ll[rows, inside], ll[rows, outside]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            w = np.where(np.isfinite(lo) & (li != lo), (li - levels) / (li - lo), 0.0)
            v = _V[inside] + np.clip(w, 0.0, 1.0) * (_V[outside] - _V[inside])
            if exact is not None:
                v = _refine_crossing(exact, edge, ymean, _V[inside], li - levels, _V[outside], lo - levels, v, levels)
            return edge + ymean * np.exp(v)

    top = crossing(last, np.minimum(last + 1, nv - 1))
    top = np.where(last == nv - 1, np.inf, top)
    bottom = crossing(first, np.maximum(first - 1, 0))
    bottom = np.where(first == 0, sigma[rows, 0], bottom)
    return np.where(found, top, np.nan), np.where(found, bottom, np.nan)


def _refine_crossing(exact, edge, ymean, va, fa, vb, fb, v, levels, steps: int = 6):
    """Illinois regula falsi on ``ll(v) - level`` between ``va`` (>= 0) and ``vb`` (< 0), all crossings
    at once; entries without a proper bracket keep ``v``."""
    y, xi = exact
    ok = np.isfinite(fa) & np.isfinite(fb) & (fa >= 0) & (fb < 0) & (va != vb)
    if not ok.any():
        return v
    va, vb, fa, fb = (np.where(ok, x, 0.0) for x in (va, vb, fa, fb))
    fb = np.where(ok, fb, -1.0)
    side = np.zeros(v.shape, np.int8)
    for _ in range(steps):
        with np.errstate(divide="ignore", invalid="ignore"):
            vc = np.where(ok, (va * fb - vb * fa) / (fb - fa), v)
        fc = _gpd_loglik(y, xi, edge + ymean * np.exp(vc)) - levels
        fc = np.where(np.isfinite(fc), fc, -1.0)
        inside = fc >= 0
        va, fa = np.where(inside, vc, va), np.where(inside, fc, fa)
        vb, fb = np.where(inside, vb, vc), np.where(inside, fb, fc)
        # Illinois: halve the stale end's value when the same end is kept twice
        fb = np.where(inside & (side == 1), fb / 2, fb)
        fa = np.where(~inside & (side == -1), fa / 2, fa)
        side = np.where(inside, 1, -1).astype(np.int8)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(ok, (va * fb - vb * fa) / (fb - fa), v)
    return np.where(np.isfinite(out), out, v)


def _ratio(r_prod, r_ref, slack):
    with np.errstate(divide="ignore", invalid="ignore"):
        num = np.maximum(np.asarray(r_prod, np.float64) - slack, 0.0)
        out = np.where(num == 0, 0.0, num / np.asarray(r_ref, np.float64))
    return np.where(np.isnan(out), np.inf, out)


def _upper_ratio(a_top, b_bottom, slack):
    """The ratio's largest value from prod's largest and ref's smallest return level; -inf where
    either set is empty (extremes marks an empty set -inf at the top, +inf at the bottom)."""
    empty = (a_top == -np.inf) | (b_bottom == np.inf)
    return np.where(empty, -np.inf, _ratio(a_top, b_bottom, slack))


def _lower_ratio(a_bottom, b_top, slack):
    empty = (a_bottom == np.inf) | (b_top == -np.inf)
    return np.where(empty, np.inf, _ratio(a_bottom, b_top, slack))


def _common_region(pa: _Side, pb: _Side, xi: np.ndarray, splits: np.ndarray, l_hat: float, c: float,
                   slack: float, za, zb, exact: bool = False):
    """Upper and lower ratio on a (xi, split) grid of the common-shape region: at ``xi`` the budget
    left, ``c/2`` minus the profile's distance below the joint maximum, is split between the sides."""
    ma, _ = pa.profile(xi)
    mb, _ = pb.profile(xi)
    budget = c / 2 - (l_hat - (ma + pa.b_hat + mb + pb.b_hat))  # (A,)
    inside = budget >= 0
    budget = np.maximum(budget, 0.0)
    da = budget[:, None] * splits[None, :]
    db = budget[:, None] * (1.0 - splits[None, :])
    a_top, a_bottom = pa.extremes(xi, ma, da, za, exact)
    b_top, b_bottom = pb.extremes(xi, mb, db, zb, exact)
    upper = np.where(inside[:, None], _upper_ratio(a_top, b_bottom, slack), -np.inf)
    lower = np.where(inside[:, None], _lower_ratio(a_bottom, b_top, slack), np.inf)
    return upper, lower


def _separate_region(pa: _Side, pb: _Side, xi: np.ndarray, splits: np.ndarray, c: float, slack: float, za, zb,
                     exact: bool = False):
    """Upper and lower ratio per split of the separate-shapes region: each side's extreme over its
    own xi within its share of the budget."""
    out = []
    for side, share, z in ((pa, splits, za), (pb, 1.0 - splits, zb)):
        m, _ = side.profile(xi)
        gap = float(m.max()) - m  # distance of each xi's profile below the side's own maximum
        drops = c / 2 * share[None, :] - gap[:, None]
        rows = np.flatnonzero(np.any(drops >= 0, axis=1))  # the shapes inside this side's share at all
        ok = drops[rows] >= 0
        top, bottom = side.extremes(xi, m, np.maximum(drops, 0.0), z, exact, rows=rows)
        out.append((np.where(ok, top, -np.inf).max(axis=0), np.where(ok, bottom, np.inf).min(axis=0)))
    (a_top, a_bottom), (b_top, b_bottom) = out
    return _upper_ratio(a_top, b_bottom, slack), _lower_ratio(a_bottom, b_top, slack)


def _parabolic_peak(x: np.ndarray, y: np.ndarray) -> float:
    """The vertex of the parabola through the largest value of ``y`` on the grid ``x`` and its
    neighbours (the grid point itself at an end)."""
    i = int(np.argmax(y))
    if i == 0 or i == x.size - 1 or not np.all(np.isfinite(y[i - 1:i + 2])):
        return float(x[i])
    y0, y1, y2 = y[i - 1:i + 2]
    denom = y0 - 2 * y1 + y2
    if denom >= 0:
        return float(x[i])
    return float(x[i] + 0.5 * (x[i] - x[i - 1]) * (y0 - y2) / denom)


def _zoom(grid: np.ndarray, i: int, points: int) -> np.ndarray:
    return np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)], points)


@dataclass(frozen=True)
class _Fit:
    """The maximum-likelihood part of the comparison: both sides' fits, the test, the chosen model."""

    prod: _Side
    ref: _Side
    test: HeterogeneityTest
    model: str
    shapes: tuple[float, float]
    scales: tuple[float, float]
    return_levels: tuple[float, float]
    estimate: float
    log_likelihood: float  # the chosen model's maximum
    common_estimate: float  # A_T under the common shape, whichever model was chosen
    separate_estimate: float  # A_T with one shape per side, whichever model was chosen


def _fit(prod: Exceedances, ref: Exceedances, horizon: float, slack: float, bounds: tuple[float, float],
         heterogeneity_level: float) -> _Fit:
    pa, pb = _Side(prod, horizon), _Side(ref, horizon)
    xa, sa, la = pa.best(bounds)
    xb, sb, lb = pb.best(bounds)
    fine = np.linspace(bounds[0], bounds[1], _FINE_XI_POINTS)
    joint = pa.profile(fine)[0] + pb.profile(fine)[0]
    xc = _parabolic_peak(fine, joint)
    if pa.gpd_max(np.array([xc]))[0][0] + pb.gpd_max(np.array([xc]))[0][0] < joint.max():
        xc = float(fine[int(np.argmax(joint))])
    mca, sca = pa.gpd_max(np.array([xc]))
    mcb, scb = pb.gpd_max(np.array([xc]))
    l_common = float(mca[0] + mcb[0]) + pa.b_hat + pb.b_hat
    stat = max(0.0, 2.0 * ((la + lb) - l_common))
    p = 0.5 * float(stats.chi2.sf(stat, 1)) if (xa > xb and stat > 0) else 1.0
    test = HeterogeneityTest(statistic=stat, p_value=p, shape_prod=xa, shape_ref=xb, shape_common=xc,
                             level=heterogeneity_level, rejects=bool(p < heterogeneity_level))
    if test.rejects:
        model, shapes, scales, ll = "separate shapes", (xa, xb), (sa, sb), la + lb
    else:
        model, shapes, scales, ll = "common shape", (xc, xc), (float(sca[0]), float(scb[0])), l_common
    ra, rb = pa.return_level(shapes[0], scales[0]), pb.return_level(shapes[1], scales[1])
    common = float(_ratio(pa.return_level(xc, float(sca[0])), pb.return_level(xc, float(scb[0])), slack))
    separate = float(_ratio(pa.return_level(xa, sa), pb.return_level(xb, sb), slack))
    return _Fit(prod=pa, ref=pb, test=test, model=model, shapes=shapes, scales=scales, return_levels=(ra, rb),
                estimate=float(_ratio(ra, rb, slack)), log_likelihood=ll, common_estimate=common,
                separate_estimate=separate)


def tail_ratio_estimate(prod: Exceedances, ref: Exceedances, horizon: float, *, slack: float = 1.0,
                        shape_bounds=SHAPE_BOUNDS, separate_level: float = 0.0) -> float:
    """The estimate of ``A_T`` the FAIL line judges, alone (no interval): under one shape per side when the
    heterogeneity test rejects a common shape at ``separate_level``, else under the common shape
    (threshold-stability and half-sample checks)."""
    fit = _fit(prod, ref, float(horizon), slack, _bounds(shape_bounds), separate_level)
    return fit.separate_estimate if fit.test.rejects else fit.common_estimate


def _bounds(shape_bounds) -> tuple[float, float]:
    lo_b, hi_b = (float(v) for v in shape_bounds)
    if not -1.0 <= lo_b < hi_b <= 1.0:
        raise ValueError(f"shape_bounds must satisfy -1 <= low < high <= 1, got {shape_bounds!r}")
    return lo_b, hi_b


def tail_ratio_interval(prod: Exceedances, ref: Exceedances, horizon: float, alpha: float = 0.00135, *,
                        slack: float = 1.0, shape_bounds=SHAPE_BOUNDS, heterogeneity_level: float = 0.05,
                        deviance: float | None = None, separate_alpha: float | None = None) -> TailRatioInterval:
    """Profile-likelihood interval of ``A_T = max(0, r_prod - slack) / r_ref`` at ``horizon``.

    The common-shape model is used unless the heterogeneity test rejects it at
    ``heterogeneity_level`` (prod's tail heavier than ref's); then each side has its own shape.
    ``deviance`` overrides ``c = z_(1-alpha)^2`` (a calibrated cut-off). ``separate_alpha``: also
    bound A_T with one shape per side, one-sided at ``1 - separate_alpha``, whatever the test says
    (``separate_upper``): a bound that holds when the shapes differ by less than the test can see."""
    horizon = float(horizon)
    if not (math.isfinite(horizon) and horizon > 1):
        raise ValueError(f"horizon must be finite and > 1, got {horizon!r}")
    lo_b, hi_b = _bounds(shape_bounds)
    c = deviance_for(alpha) if deviance is None else float(deviance)
    fit = _fit(prod, ref, horizon, slack, (lo_b, hi_b), heterogeneity_level)
    pa, pb = fit.prod, fit.ref
    za = pa.zeta_grid(c / 2)
    zb = pb.zeta_grid(c / 2)
    splits = np.linspace(0.0, 1.0, _SPLITS)
    grid = np.linspace(lo_b, hi_b, _XI_POINTS)
    if fit.model == "common shape":
        def region(xi, f, exact=False):
            return _common_region(pa, pb, xi, f, fit.log_likelihood, c, slack, za, zb, exact)
    else:
        fine = np.linspace(lo_b, hi_b, 2 * _XI_POINTS - 1)

        def region(xi, f, exact=False):
            up, lw = _separate_region(pa, pb, fine, f, c, slack, za, zb, exact)
            return np.broadcast_to(up, (xi.size, f.size)), np.broadcast_to(lw, (xi.size, f.size))

    upper = _extreme(region, grid, splits, maximise=True)
    lower = _extreme(region, grid, splits, maximise=False)
    estimate = fit.estimate
    separate_upper = math.nan
    if separate_alpha is not None:
        separate_upper = max(_separate_upper(pa, pb, lo_b, hi_b, deviance_for(separate_alpha), slack, splits),
                             fit.separate_estimate)
    return TailRatioInterval(
        estimate=estimate, lower=float(min(lower, estimate)), upper=float(max(upper, estimate)), alpha=float(alpha),
        deviance=c, model=fit.model, shape_bounds=(lo_b, hi_b), slack=float(slack), horizon=horizon,
        shape_prod=fit.shapes[0], shape_ref=fit.shapes[1], scale_prod=fit.scales[0], scale_ref=fit.scales[1],
        return_level_prod=float(fit.return_levels[0]), return_level_ref=float(fit.return_levels[1]),
        threshold_prod=prod.threshold, threshold_ref=ref.threshold, exceedances_prod=prod.n,
        exceedances_ref=ref.n, heterogeneity=fit.test, common_estimate=fit.common_estimate,
        separate_estimate=fit.separate_estimate, separate_upper=float(separate_upper),
        separate_alpha=math.nan if separate_alpha is None else float(separate_alpha),
    )


def _separate_upper(pa: _Side, pb: _Side, lo_b: float, hi_b: float, c: float, slack: float,
                    splits: np.ndarray) -> float:
    """The largest A_T over the separate-shapes region at cut-off ``c``. Each side's extreme depends on
    its own share of the budget only, so the split is searched on grid estimates (zoomed once) and the
    best split alone is evaluated with its level crossings on the exact likelihood."""
    za, zb = pa.zeta_grid(c / 2), pb.zeta_grid(c / 2)
    fine = np.linspace(lo_b, hi_b, 2 * _XI_POINTS - 1)

    def upper(f, exact=False):
        return _separate_region(pa, pb, fine, f, c, slack, za, zb, exact)[0]

    values = upper(splits)
    j = int(np.argmax(values))
    best = float(values[j])
    if not math.isfinite(best):
        return best
    zoomed = _zoom(splits, j, 9)
    values = upper(zoomed)
    j = int(np.argmax(values))
    exact = upper(zoomed[max(j - 1, 0):j + 2], exact=True)  # the best split and its neighbours
    return max(best, float(values[j]), float(exact.max()))


def return_level_upper(side: Exceedances, horizon: float, alpha: float = 0.00135, *,
                       shape_bounds=SHAPE_BOUNDS) -> float:
    """One side's profile-likelihood upper bound of its ``horizon``-call return level, one-sided at
    ``1 - alpha``, its shape free within ``shape_bounds``: the largest ``r_T`` over ``{2 (l_hat - l) <=
    c}`` in (xi, sigma, zeta). The variance gate asks it of prod when every prod error is within the
    slack: only a bound at or under the slack lets it PASS without comparing the tails."""
    horizon = float(horizon)
    if not (math.isfinite(horizon) and horizon > 1):
        raise ValueError(f"horizon must be finite and > 1, got {horizon!r}")
    lo_b, hi_b = _bounds(shape_bounds)
    c = deviance_for(alpha)
    one = _Side(side, horizon)
    xi = np.linspace(lo_b, hi_b, 2 * _XI_POINTS - 1)
    m, _ = one.profile(xi)
    drops = (c / 2 - (float(m.max()) - m))[:, None]
    rows = np.flatnonzero(drops[:, 0] >= 0)
    top, _ = one.extremes(xi, m, np.maximum(drops, 0.0), one.zeta_grid(c / 2), exact=True, rows=rows)
    return float(top.max())


def _extreme(region, xi_grid: np.ndarray, splits: np.ndarray, maximise: bool) -> float:
    """The region's largest (or smallest) ratio on the grid, zoomed on the best cell ``_ROUNDS`` times;
    the last zoomed grid is evaluated again with every level crossing on the exact likelihood."""
    sign = 1.0 if maximise else -1.0

    def best_of(values):
        i, j = np.unravel_index(np.argmax(sign * values), values.shape)
        return i, j, float(values[i, j])

    up, lw = region(xi_grid, splits)
    i, j, best = best_of(up if maximise else lw)
    for _ in range(_ROUNDS):
        if not math.isfinite(best):
            return best
        xi_grid, splits = _zoom(xi_grid, i, 5), _zoom(splits, j, 9)
        up, lw = region(xi_grid, splits)
        i, j, value = best_of(up if maximise else lw)
        best = max(best, value) if maximise else min(best, value)
    up, lw = region(xi_grid, splits, True)
    _, _, value = best_of(up if maximise else lw)
    return max(best, value) if maximise else min(best, value)


# --- refits of the estimate: other thresholds, halves of the replicates ------------------------------


def estimates_at_quantiles(a, b, horizon: float, quantiles, *, slack: float = 1.0,
                           separate_level: float = 0.0) -> tuple[tuple[float, float], ...]:
    """The A_T estimate (:func:`tail_ratio_estimate`) refitted with each side's threshold at each of
    ``quantiles``: (quantile, estimate) for those that leave each side three excesses."""
    found = []
    for q in quantiles:
        s_a, s_b = (exceedances_or_reason(x, q, 3) for x in (a, b))
        if isinstance(s_a, str) or isinstance(s_b, str):
            continue
        found.append((q, tail_ratio_estimate(s_a, s_b, horizon, slack=slack, separate_level=separate_level)))
    return tuple(found)


def half_estimates(a, b, horizon: float, quantile: float, min_exceedances: int, *, slack: float = 1.0,
                   separate_level: float = 0.0) -> tuple[float, float] | None:
    """The A_T estimate on the even and on the odd replicates (None when a half leaves a side fewer than
    three excesses)."""
    a, b = np.asarray(a), np.asarray(b)
    halves = []
    for sl in (slice(0, None, 2), slice(1, None, 2)):
        h_a, h_b = (exceedances_or_reason(x[sl], quantile, min_exceedances) for x in (a, b))
        if isinstance(h_a, str) or isinstance(h_b, str):
            return None
        halves.append(tail_ratio_estimate(h_a, h_b, horizon, slack=slack, separate_level=separate_level))
    return tuple(halves)


def tied_excesses(s: Exceedances) -> bool:
    """Fewer distinct excesses than half their number, counted up to 1e-6 of the tail's scale."""
    scale = float(s.threshold + s.excesses.max())
    distinct = np.unique(np.round(s.excesses / (scale * 1e-6))).size if scale > 0 else 1
    return distinct < 0.5 * s.n
