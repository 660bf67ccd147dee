"""L0, the bitwise layer (docs/method.md): how prod's bits differ from ref's, and whether a
bucket's bias grows like a bias should.

Two pieces of pure statistics, no torch:

- **ULP distance** between two values of one floating format: the number of steps between their
  bit patterns in IEEE 754 totalOrder (``-0`` and ``+0`` are one step apart, every other pair of
  neighbouring values too). The map from bit patterns to ordered integers is a bijection, so
  distance 0 means bitwise equal. Distances are binned on a log2 scale: ``0, 1, 2, 3-4, 5-8, ...,
  2^(TOP-1)+1 - 2^TOP, > 2^TOP`` plus one bin for pairs that differ and involve inf or nan.
- **Growth test**: a coherent bias has a fixed mean and standard deviation per replicate, so its
  ``z = sqrt(n) mean / s`` grows like ``sqrt(n)``: by 2 from R/4 to R replicates. A sub-ULP
  rounding arrangement without coherent bias does not (docs/controls.md: TransformerEngine
  #1132 in the technical report). Buckets significant at R (``|z| > z*``) are compared with
  their own z on the first replicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .moments import MomentAccumulator

TOP = 16  # distances above 2**TOP share one bin: they are far beyond rounding
N_BINS = TOP + 4  # 0, 1, then (2^(k-1), 2^k] for k = 1..TOP, > 2^TOP, non-finite
SATURATED_BIN = N_BINS - 2
NONFINITE_BIN = N_BINS - 1


def _bin_label(k: int) -> str:
    if k == 0:
        return "0"
    if k == 1:
        return "1"
    if k == 2:
        return "2"
    if k == SATURATED_BIN:
        return f"> {2 ** TOP}"
    if k == NONFINITE_BIN:
        return "non-finite"
    return f"{2 ** (k - 2) + 1}-{2 ** (k - 1)}"


BIN_LABELS: tuple[str, ...] = tuple(_bin_label(k) for k in range(N_BINS))


def ordered_keys(bits: np.ndarray) -> np.ndarray:
    """IEEE 754 totalOrder keys of floats given by their bit patterns as signed integers of the
    format's width: non-negative patterns keep their value, negative ones (sign bit set) flip their
    magnitude bits, so that the keys are ordered as the values and adjacent values differ by 1."""
    bits = np.asarray(bits)
    if bits.dtype.kind != "i":
        raise TypeError(f"bits must be a signed integer array, got dtype {bits.dtype}")
    magnitude = np.array(np.iinfo(bits.dtype).max, bits.dtype)
    return bits ^ ((bits >> (8 * bits.itemsize - 1)) & magnitude)


def ulp_distance(ref_bits: np.ndarray, prod_bits: np.ndarray) -> np.ndarray:
    """|key(prod) - key(ref)| as exact Python-free uint64 (the reference for the torch kernels)."""
    kr = ordered_keys(ref_bits).astype(np.int64)
    kp = ordered_keys(prod_bits).astype(np.int64)
    if np.asarray(ref_bits).itemsize < 8:
        return np.abs(kp - kr).astype(np.uint64)
    # 64-bit keys: the difference may not fit an int64; take it in unsigned arithmetic
    hi, lo = np.maximum(kp, kr), np.minimum(kp, kr)
    return hi.astype(np.uint64) - lo.astype(np.uint64)


def ulp_bins(distance: np.ndarray) -> np.ndarray:
    """The histogram bin of each distance: 0 -> 0, 1 -> 1, d in (2^(k-1), 2^k] -> k + 1, d > 2^TOP
    -> :data:`SATURATED_BIN`. (The bin of d >= 1 is the bit length of d - 1, plus one.)"""
    d = np.asarray(distance, np.uint64)
    below = np.minimum(d, np.uint64(2 ** TOP + 1))  # saturate first: exact in float64 afterwards
    _, bit_length = np.frexp(np.maximum(below.astype(np.float64) - 1.0, 0.0))
    return np.where(d == 0, 0, np.minimum(bit_length + 1, SATURATED_BIN)).astype(np.int64)


def ulp_histogram(ref_bits: np.ndarray, prod_bits: np.ndarray, nonfinite: np.ndarray | None = None) -> np.ndarray:
    """Counts per bin (:data:`N_BINS`) of the ULP distances of two bit-pattern arrays. ``nonfinite``
    marks elements where either value is inf or nan; those that are not bitwise equal go to the
    non-finite bin."""
    bins = ulp_bins(ulp_distance(ref_bits, prod_bits))
    if nonfinite is not None:
        bins = np.where(np.asarray(nonfinite) & (bins != 0), NONFINITE_BIN, bins)
    return np.bincount(bins.reshape(-1), minlength=N_BINS).astype(np.int64)


# -- growth of |z| with R ---------------------------------------------------------------------
def z_scores(m: MomentAccumulator) -> np.ndarray:
    """z = sqrt(n) mean / s per bucket, as the bias gate computes it: a constant non-zero mean
    (s = 0) is infinitely significant, an all-zero bucket has z = 0, fewer than 2 replicates nan."""
    std = m.std()
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.sqrt(m.count) * m.mean / std
    z = np.where(std > 0, z, np.where(m.mean == 0, 0.0, np.copysign(np.inf, m.mean)))
    return np.where(m.count >= 2, z, np.nan)


@dataclass(frozen=True, eq=False)
class GrowthTest:
    """|z| at ``early_replicates`` (the first replicates) against |z| at ``replicates``, per
    statistic and bucket. ``expected`` = sqrt(replicates / early_replicates) is the growth of a
    coherent bias; a difference with no coherent mean does not grow (its z stays of order one, or
    shrinks back toward it)."""

    early_replicates: int
    replicates: int
    threshold: float  # |z| at R above which a bucket counts as significant (the bias gate's critical value at R)
    statistics: tuple[str, ...]
    z_early: tuple[np.ndarray, ...]  # per statistic, per bucket
    z_final: tuple[np.ndarray, ...]

    @property
    def expected(self) -> float:
        return float(np.sqrt(self.replicates / self.early_replicates))

    @property
    def cut(self) -> float:
        """Growth above which a bucket counts as growing: the geometric middle of 1 (no growth) and
        :attr:`expected` (a coherent bias)."""
        return float(np.sqrt(self.expected))

    def selected(self) -> tuple[np.ndarray, ...]:
        """Per statistic: the buckets significant at R."""
        return tuple(np.abs(np.nan_to_num(z, nan=0.0)) > self.threshold for z in self.z_final)

    @property
    def significant(self) -> int:
        """Buckets significant at R on at least one statistic."""
        sel = self.selected()
        return int(np.logical_or.reduce(sel).sum()) if sel else 0

    def ratios(self) -> np.ndarray:
        """z(R) / z(R_early) over every significant (statistic, bucket), signed: a bucket whose
        sign flipped has a negative ratio. A bias with no noise (|z| infinite at both) counts as
        growing as expected."""
        out = []
        for sel, early, final in zip(self.selected(), self.z_early, self.z_final):
            e, f = early[sel], final[sel]
            with np.errstate(divide="ignore", invalid="ignore"):
                r = f / e
            both_infinite = np.isinf(e) & np.isinf(f)
            r = np.where(both_infinite, np.sign(e) * np.sign(f) * self.expected, r)
            out.append(r[np.isfinite(r)])
        return np.concatenate(out) if out else np.zeros(0)

    @property
    def median_growth(self) -> float | None:
        r = self.ratios()
        return float(np.median(r)) if r.size else None

    @property
    def grows(self) -> bool:
        median = self.median_growth
        return median is not None and median >= self.cut


def growth_test(early: dict[str, MomentAccumulator], final: dict[str, MomentAccumulator], early_replicates: int,
                replicates: int, threshold: float) -> GrowthTest:
    """Compare z per bucket on the first ``early_replicates`` (``early``) and on all
    ``replicates`` (``final``), for every statistic present in both."""
    if not 0 < early_replicates < replicates:
        raise ValueError(f"early_replicates must be in (0, replicates = {replicates}), got {early_replicates}")
    stats = tuple(s for s in final if s in early)
    z_early, z_final = [], []
    for s in stats:
        ze, zf = z_scores(early[s]), z_scores(final[s])
        if ze.size < zf.size:  # buckets first seen after the early look (data-dependent labels)
            ze = np.concatenate([ze, np.full(zf.size - ze.size, np.nan)])
        z_early.append(ze)
        z_final.append(zf)
    return GrowthTest(early_replicates=early_replicates, replicates=replicates, threshold=float(threshold),
                      statistics=stats, z_early=tuple(z_early), z_final=tuple(z_final))


# -- the classification the report prints ------------------------------------------------------
IDENTICAL = "bitwise identical"
COHERENT = "coherent bias: |z| grows like sqrt(R)"
NO_GROWTH = "no growth: arrangement/rounding noise"
UNDETERMINED = "undetermined: too few replicates for the growth test"
NOT_COMPARED = "not compared: prod's output dtype differs from ref's"


def classify(histogram: np.ndarray, growth: GrowthTest | None, comparable: bool = True) -> str:
    """One of :data:`IDENTICAL`, :data:`COHERENT`, :data:`NO_GROWTH`, :data:`UNDETERMINED`,
    :data:`NOT_COMPARED`. Differences with no bucket significant at R are rounding noise too."""
    histogram = np.asarray(histogram)
    if not comparable:
        return NOT_COMPARED
    if histogram.sum() == histogram[0]:
        return IDENTICAL
    if growth is None:
        return UNDETERMINED
    return COHERENT if growth.grows else NO_GROWTH
