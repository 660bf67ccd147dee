"""L0's result (informational): ULP distances between prod's and ref's bits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..stats.bitwise import BIN_LABELS, GrowthTest


@dataclass(frozen=True, eq=False)
class BitwiseResult:
    """L0, the bitwise layer, for one output: informational, it never changes a verdict.

    ``ulp_histogram`` counts, over every element of every replicate, the ULP distance between
    prod and ref in the output's format (bins :data:`kcert.stats.bitwise.BIN_LABELS`; bin 0 is
    exactly the bitwise-equal elements). ``growth`` compares the bias statistics' |z| at
    ``growth.early_replicates`` (about R/4) with |z| at R (None when R < 256)."""

    output: str
    dtype: str
    replicates: int
    ulp_histogram: np.ndarray  # (N_BINS,) int64
    classification: str
    growth: GrowthTest | None = None
    reason: str = ""  # why a part of the layer was not computed

    @property
    def elements(self) -> int:
        return int(self.ulp_histogram.sum())

    @property
    def bitwise_equal(self) -> int:
        return int(self.ulp_histogram[0])

    @property
    def fraction_equal(self) -> float | None:
        return self.bitwise_equal / self.elements if self.elements else None

    @property
    def bin_labels(self) -> tuple[str, ...]:
        return BIN_LABELS

    @property
    def max_distance(self) -> str | None:
        """Label of the farthest non-empty bin (None when nothing was compared)."""
        nonzero = np.nonzero(self.ulp_histogram)[0]
        return BIN_LABELS[int(nonzero[-1])] if nonzero.size else None

    @property
    def significant(self) -> int:
        return 0 if self.growth is None else self.growth.significant

    @property
    def median_growth(self) -> float | None:
        return None if self.growth is None else self.growth.median_growth
