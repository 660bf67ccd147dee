"""Errors that sit on a lattice (many exactly tied values), spread within their lattice cells before a
tail fit (docs/method.md, Gate 3, "Tied and lattice errors").

A kernel pair whose outputs round the same way produces per-replicate errors on a few values (multiples
of half a ULP, say). A GPD fitted to tied excesses is not a GPD fitted to the law they came from: the
audit of the variance gate measured 93 % coverage against a nominal 99.865 % on a half-ULP lattice.
The remedy is randomisation within the lattice cell: each tied value ``x`` becomes ``x + h V`` (prod) or
``x - h V`` (ref), ``V`` uniform on [0, 1), ``h`` the lattice spacing. The direction is chosen so that
the bound stays a bound on the errors as measured: for a value on the lattice, ``P(X + hV > q) =
P(X > q)`` whenever ``q`` is a lattice point, so prod's spread law has every return level at or above
the lattice law's, and ref's (spread downwards) at or below it. The tail ratio of the spread laws is
then at least the lattice laws' ratio, and a bound on the first bounds the second.

The spread is drawn from a generator the caller seeds (the run's seed): the same run gives the same
certificate.

This module imports numpy only (never torch).
"""

from __future__ import annotations

import numpy as np

__all__ = ["lattice_spacing", "spread_within_cells"]

TIED_SHARE = 0.5  # the default of VarianceThresholds.tied_share: fewer distinct positive values than this share
_GAP_FLOOR = 1e-9  # gaps under this fraction of the largest value are rounding noise, not the lattice


def lattice_spacing(x, tied_share: float = TIED_SHARE) -> float:
    """The cell width of the lattice the positive values of ``x`` sit on: the smallest gap between two
    distinct positive values, when they are mostly tied (fewer distinct values than ``tied_share`` of
    their count); 0.0 when they are not (nothing to spread)."""
    x = np.asarray(x, np.float64)
    positive = x[np.isfinite(x) & (x > 0)]
    if positive.size < 2:
        return 0.0
    distinct = np.unique(positive)
    if distinct.size >= tied_share * positive.size or distinct.size < 2:
        return 0.0
    gaps = np.diff(distinct)
    gaps = gaps[gaps > _GAP_FLOOR * distinct[-1]]
    return float(gaps.min()) if gaps.size else 0.0


def spread_within_cells(x, spacing: float, upwards: bool, rng: np.random.Generator) -> np.ndarray:
    """``x`` with every positive value moved by ``spacing * V``, V uniform on [0, 1): up (``upwards``,
    prod's side) or down, never below 0; zeros (exact agreement) and non-finite values stay."""
    x = np.array(x, np.float64)
    if spacing <= 0:
        return x
    move = np.isfinite(x) & (x > 0)
    v = spacing * rng.random(int(move.sum()))
    x[move] = x[move] + v if upwards else np.maximum(x[move] - v, 0.0)
    return x


LATTICE_STREAM = 23  # the spread's generator: the run's seed and this stream (no other draw uses it)


def spread_lattices(a, b, seed: int,
                    tied_share: float = TIED_SHARE) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """Prod's (``a``) and ref's (``b``) errors each spread within their lattice cells when they are mostly
    tied (prod upwards, ref downwards: the spread tail ratio is at least the lattice one), from a generator
    on ``seed`` and :data:`LATTICE_STREAM`; and the two spacings (0: not a lattice)."""
    spacing = (lattice_spacing(a, tied_share), lattice_spacing(b, tied_share))
    rng = np.random.default_rng([int(seed), LATTICE_STREAM])
    return (spread_within_cells(a, spacing[0], True, rng), spread_within_cells(b, spacing[1], False, rng),
            spacing)
