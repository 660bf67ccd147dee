"""Paired statistics of a training comparison: numpy and scipy only, never torch.

The unit is the training seed: both arms of seed ``s`` start from the same initialisation and see
the same batches, so their difference ``d_s = prod_s - ref_s`` removes everything the seed
decides (initialisation, data order) and keeps what the kernel decides. Over ``K`` seeds:

- a scalar metric (final loss, mean loss-curve difference, mean gain drift) gets the paired t
  interval ``mean(d) +- t_{1-alpha/2, K-1} sd(d) / sqrt(K)``, its two-sided p-value, and the
  smallest difference the test detects with probability ``power`` (exact, noncentral t);
  beside it the seed-to-seed spread ``sd(ref_s)``: what changing the seed alone moves;
- a vector metric (the drift of every norm channel, ``D_s`` of ``C`` channels) gets an exact
  sign-flip test: under "training cannot tell the arms apart" the two arms of a seed are
  exchangeable, so ``D_s`` and ``-D_s`` are equally likely; the statistic
  ``sum_c mean_s(D_sc)^2 / mean_s(D_sc^2)`` (each channel scaled by its own flip-invariant
  second moment) is compared with its value under all ``2^K`` sign patterns (a seeded sample of
  them beyond ``K = 16``). It sees any drift that keeps its direction over seeds, in any
  channels, without a distributional assumption; it cannot go below ``2 / 2^K``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

EXACT_FLIP_SEEDS = 16  # enumerate all 2^K sign patterns up to this many seeds
SAMPLED_FLIPS = 1 << 16


@dataclass(frozen=True)
class PairedStatistic:
    """One scalar metric compared over seeds."""

    name: str
    differences: np.ndarray  # prod - ref per seed
    reference: np.ndarray  # ref's value per seed
    mean: float
    sd: float
    low: float  # confidence interval at ``level``
    high: float
    p_value: float
    detectable: float  # smallest |mean difference| detected with ``power`` at ``level``
    seed_spread: float  # sd of ref's value over seeds
    level: float
    power: float

    @property
    def seeds(self) -> int:
        return int(self.differences.size)

    @property
    def in_seed_spreads(self) -> float:
        """The mean difference in units of the seed-to-seed spread (nan without spread)."""
        return self.mean / self.seed_spread if self.seed_spread > 0 else math.nan


def detectable_difference(sd: float, seeds: int, alpha: float, power: float = 0.8) -> float:
    """Smallest true mean difference a two-sided paired t test at ``alpha`` detects with
    probability ``power``, given the per-seed sd of the differences (exact: noncentral t)."""
    if seeds < 2 or not math.isfinite(sd):
        return math.inf
    if sd == 0:
        return 0.0
    df = seeds - 1
    crit = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(effect):  # power at standardized effect ``effect`` minus the target
        nc = effect * math.sqrt(seeds)
        value = stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc)
        if not math.isfinite(value):  # scipy's noncentral t fails at large df: the normal limit
            value = stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc)
        return value - power

    high = 1.0
    while shortfall(high) < 0:
        high *= 2
        if high > 1e6:
            return math.inf
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-10)) * sd


def paired(name: str, ref, prod, alpha: float = 0.05, power: float = 0.8) -> PairedStatistic:
    """The paired comparison of one scalar metric (``ref``, ``prod``: one value per seed)."""
    ref = np.asarray(ref, np.float64)
    prod = np.asarray(prod, np.float64)
    if ref.shape != prod.shape or ref.ndim != 1:
        raise ValueError(f"{name}: ref and prod must be 1-D with one value per seed, got {ref.shape}, {prod.shape}")
    d = prod - ref
    k = d.size
    mean = float(d.mean()) if k else math.nan
    sd = float(d.std(ddof=1)) if k > 1 else math.nan
    spread = float(ref.std(ddof=1)) if k > 1 else math.nan
    if k < 2 or not np.all(np.isfinite(d)):
        return PairedStatistic(name=name, differences=d, reference=ref, mean=mean, sd=sd, low=-math.inf, high=math.inf,
                               p_value=math.nan, detectable=math.inf, seed_spread=spread, level=1 - alpha, power=power)
    se = sd / math.sqrt(k)
    crit = float(stats.t.ppf(1 - alpha / 2, k - 1))
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(mean) / se, k - 1))
    return PairedStatistic(name=name, differences=d, reference=ref, mean=mean, sd=sd, low=mean - crit * se,
                           high=mean + crit * se, p_value=p, detectable=detectable_difference(sd, k, alpha, power),
                           seed_spread=spread, level=1 - alpha, power=power)


def pointwise_interval(d: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column of ``d`` (seeds, points): the mean over seeds and its paired t interval at ``level``
    (the mean three times with one seed)."""
    k = d.shape[0]
    mean = d.mean(axis=0)
    if k < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.5 + level / 2, k - 1) * d.std(axis=0, ddof=1) / math.sqrt(k)
    return mean, mean - half, mean + half


def _flip_statistic(signs: np.ndarray, d: np.ndarray, m2: np.ndarray) -> np.ndarray:
    means = signs @ d / d.shape[0]  # (patterns, channels)
    return np.sum(means * means / m2, axis=1)


def sign_flip_test(differences, seed: int = 0) -> tuple[float, float]:
    """Exact sign-flip test of a coherent drift: ``differences`` (seeds, channels). Returns
    (statistic, p-value); channels whose differences are all zero carry no information and are
    left out (all zero everywhere: p = 1)."""
    d = np.asarray(differences, np.float64)
    if d.ndim != 2:
        raise ValueError(f"differences must be (seeds, channels), got shape {d.shape}")
    d = d[:, np.all(np.isfinite(d), axis=0)]
    m2 = np.mean(d * d, axis=0)
    d, m2 = d[:, m2 > 0], m2[m2 > 0]
    k = d.shape[0]
    if d.size == 0 or k < 2:
        return 0.0, 1.0
    observed = float(_flip_statistic(np.ones((1, k)), d, m2)[0])
    if k <= EXACT_FLIP_SEEDS:
        codes = np.arange(1 << k, dtype=np.int64)
        total = codes.size
    else:
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        codes = None
        total = SAMPLED_FLIPS
    at_least, chunk = 0, 4096
    for start in range(0, total, chunk):
        if codes is not None:
            block = codes[start:start + chunk]
            signs = 1.0 - 2.0 * ((block[:, None] >> np.arange(k)) & 1)
        else:
            signs = rng.choice([-1.0, 1.0], size=(min(chunk, total - start), k))
        values = _flip_statistic(signs, d, m2)
        at_least += int(np.sum(values >= observed * (1 - 1e-12)))
    if codes is None:  # the identity pattern, counted so the p-value is never 0
        return observed, (at_least + 1) / (total + 1)
    return observed, at_least / total


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm-adjusted p-values (family-wise error control over the metrics)."""
    finite = {k: v for k, v in p_values.items() if not math.isnan(v)}
    order = sorted(finite, key=finite.get)
    m = len(order)
    out, running = {}, 0.0
    for i, name in enumerate(order):
        running = max(running, min(1.0, (m - i) * finite[name]))
        out[name] = running
    for name in p_values:
        out.setdefault(name, math.nan)
    return out


def regression_slope(measured, predicted) -> np.ndarray:
    """Per seed, the least-squares slope of the measured drift on the predicted drift
    (``measured``: (seeds, channels), ``predicted``: (channels,)): 1 when the parameters moved
    exactly as predicted, 0 when they show none of it."""
    measured = np.asarray(measured, np.float64)
    predicted = np.asarray(predicted, np.float64)
    norm = float(predicted @ predicted)
    if norm == 0:
        return np.full(measured.shape[0], np.nan)
    return measured @ predicted / norm
