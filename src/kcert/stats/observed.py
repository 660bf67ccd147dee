"""What the replicates show before any extrapolation: prod's and ref's largest observed errors against
the variance gate's PASS line (docs/method.md, Gate 3, "The observed range first").

The gate's bound U extrapolates both tails ``T / R`` times beyond the data. Before it may PASS, the data
themselves must not say the opposite at the levels they resolve:

- **the observed ratio** ``(max a - slack) / max b``: the tail ratio at the highest level both sides
  resolve (each side's largest of R errors, its R-call return level read off the data);
- **an exact one-sided test** that prod's errors, taken at the PASS line (``(a - slack) / line``), sit
  above ref's among the largest of the pooled sample more often than chance allows. If prod's errors at
  the line are no larger than ref's in law (``(a - slack) / line <=st b``: the tail ratio at most
  ``line`` at every observed level), the labels of the pooled top values are at most as prod-heavy as a
  uniformly random arrangement of R prod and R ref labels (exactly so at equality). The statistic is a
  scan over the depth ``m`` of the top: the smallest hypergeometric tail probability of the prod count
  among the top ``m``, for ``m = 1 ..`` ``depth``; its p-value is computed exactly for that scan (a
  recursion over the random arrangement), so scanning costs no false alarms. Ties between the two sides
  are ranked ref first (the test can only lose power to them).

The test treats the two samples as independent, like the tail model. prod's and ref's errors come from
the same inputs and are positively dependent: a replicate whose prod error is large tends to bring a
large ref error into the same top, which makes the prod count less extreme, not more.

This module imports numpy and scipy only (never torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ObservedTail", "observed_tail", "scan_p_value"]


@dataclass(frozen=True)
class ObservedTail:
    """prod's and ref's largest observed errors, compared at the PASS line.

    Attributes
    ----------
    ratio : float
        ``max(0, max a - slack) / max b``: the tail ratio at the highest level both sides resolve
        (inf when ref's errors are all zero and prod's maximum exceeds the slack).
    max_prod, max_ref : float
        The largest observed error of each side, in the errors' units.
    line : float
        The PASS line the test compares at (prod's errors less the slack, divided by it).
    p_value : float
        The exact one-sided p-value of the scan test (1 when prod has no error above the slack).
    depth : int
        ``m`` where the scan's smallest tail probability was found.
    prod_in_top : int
        prod's errors (at the line) among the pooled top ``depth``.
    scanned : int
        How deep the scan went (the pooled top values it looked at).
    """

    ratio: float
    max_prod: float
    max_ref: float
    line: float
    p_value: float
    depth: int
    prod_in_top: int
    scanned: int


def _labels(prod_scaled: np.ndarray, ref: np.ndarray, depth: int) -> np.ndarray:
    """1 for prod, 0 for ref, of the pooled values in decreasing order (ties: ref first), the top ``depth``."""
    values = np.concatenate([prod_scaled, ref])
    labels = np.concatenate([np.ones(prod_scaled.size, np.int8), np.zeros(ref.size, np.int8)])
    order = np.lexsort((labels, -values))  # by value decreasing, then ref (0) before prod (1)
    return labels[order[:depth]]


def _step(alive: np.ndarray, j: int, n_prod: int, total: int) -> np.ndarray:
    """The law of the prod count after drawing position ``j + 1`` of a random arrangement."""
    s = np.arange(alive.size)
    p_prod = np.clip((n_prod - s) / (total - j), 0.0, 1.0)
    out = alive * (1.0 - p_prod)
    out[1:] += alive[:-1] * p_prod[:-1]
    return out


def scan_p_value(counts: np.ndarray, n_prod: int, n_ref: int) -> tuple[float, int]:
    """Exact p-value of the scan over ``m = 1 .. len(counts)`` of the hypergeometric tail probability of
    ``counts[m - 1]`` prod labels among the top ``m`` of a random arrangement of ``n_prod`` prod and
    ``n_ref`` ref labels; returns (p-value, the ``m`` with the smallest tail probability).

    ``P(min_m P(K_m >= k_m) <= observed min)``: one forward recursion over the arrangement gives the
    hypergeometric law of every ``K_m``; a second keeps it restricted to the paths that have not yet
    reached the boundary (the smallest count at each ``m`` as extreme as the observed minimum)."""
    counts = np.asarray(counts, np.int64)
    depth = counts.size
    total = n_prod + n_ref
    law = np.zeros(depth + 2)
    law[0] = 1.0
    sf = np.empty((depth, depth + 2))  # sf[m - 1, k] = P(K_m >= k)
    for j in range(depth):
        law = _step(law, j, n_prod, total)
        sf[j] = np.cumsum(law[::-1])[::-1]
    tails = sf[np.arange(depth), np.minimum(counts, depth + 1)]
    best = int(np.argmin(tails))
    observed = float(tails[best])
    if observed >= 1.0:
        return 1.0, best + 1
    hit = sf <= observed * (1 + 1e-9)  # relative tolerance: the observed minimum is on the boundary
    boundary = np.where(hit.any(axis=1), np.argmax(hit, axis=1), depth + 2)
    alive = np.zeros(depth + 2)
    alive[0] = 1.0
    for j in range(depth):
        alive = _step(alive, j, n_prod, total)
        alive[boundary[j]:] = 0.0  # paths at the boundary at m = j + 1 are crossings
    return float(min(1.0, max(observed, 1.0 - alive.sum()))), best + 1


def observed_tail(a, b, *, slack: float = 1.0, line: float = 2.0, depth: float = 0.1) -> ObservedTail:
    """The observed ratio and the exact scan test of prod's errors at the PASS line ``line`` against ref's.

    ``a``, ``b``: each side's per-replicate errors (finite, non-negative; the same count, in the same
    units). ``depth``: the scan looks at the pooled top ``depth * len(a)`` values (at least one)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"a and b must be 1-D of one non-zero length, got {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(a >= 0) and np.all(b >= 0)):
        raise ValueError("a and b must be finite and non-negative")
    if not (line > 0 and slack >= 0):
        raise ValueError(f"line must be > 0 and slack >= 0, got line={line!r}, slack={slack!r}")
    max_a, max_b = float(a.max()), float(b.max())
    excess = max(0.0, max_a - slack)
    ratio = 0.0 if excess == 0 else (math.inf if max_b == 0 else excess / max_b)
    scanned = max(1, min(2 * a.size, int(math.ceil(depth * a.size))))
    if excess == 0:
        return ObservedTail(ratio=ratio, max_prod=max_a, max_ref=max_b, line=float(line), p_value=1.0, depth=1,
                            prod_in_top=0, scanned=scanned)
    labels = _labels((a - slack) / line, b, scanned)
    counts = np.cumsum(labels)
    p, m = scan_p_value(counts, a.size, b.size)
    return ObservedTail(ratio=ratio, max_prod=max_a, max_ref=max_b, line=float(line), p_value=p, depth=m,
                        prod_in_top=int(counts[m - 1]), scanned=scanned)
