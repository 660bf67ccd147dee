"""Streaming, mergeable first and second moments per bucket (Welford / Chan et al.).

Memory is O(buckets); shards built on disjoint replicates merge exactly in any order
(up to float64 rounding), which is what lets replicates run in batches, processes or GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MomentAccumulator:
    """Count, mean and sum of squared deviations (M2) of one value per bucket per replicate."""

    count: np.ndarray  # int64, (G,)
    mean: np.ndarray  # float64, (G,)
    m2: np.ndarray  # float64, (G,)

    @classmethod
    def zeros(cls, size: int) -> "MomentAccumulator":
        return cls(np.zeros(size, np.int64), np.zeros(size), np.zeros(size))

    @property
    def size(self) -> int:
        return self.count.shape[0]

    def grow(self, size: int) -> None:
        """Add empty buckets so that there are ``size`` (labels seen for the first time)."""
        extra = size - self.size
        if extra > 0:
            self.count = np.concatenate([self.count, np.zeros(extra, np.int64)])
            self.mean = np.concatenate([self.mean, np.zeros(extra)])
            self.m2 = np.concatenate([self.m2, np.zeros(extra)])

    def add(self, values: np.ndarray, present: np.ndarray | None = None) -> None:
        """Add a block of replicates: ``values`` is (G,) or (B, G); ``present`` masks out
        buckets a replicate did not populate (data-dependent labels)."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim == 1:
            self._add_one(values, present)
            return
        values = np.atleast_2d(values)
        if present is None:
            n = np.full(values.shape[1], values.shape[0], np.int64)
            block_mean = values.mean(axis=0)
            block_m2 = ((values - block_mean) ** 2).sum(axis=0)
        else:
            present = np.atleast_2d(present)
            n = present.sum(axis=0).astype(np.int64)
            safe_n = np.maximum(n, 1)
            block_mean = np.where(present, values, 0.0).sum(axis=0) / safe_n
            block_m2 = np.where(present, (values - block_mean) ** 2, 0.0).sum(axis=0)
        self._merge_moments(n, block_mean, block_m2)

    def _add_one(self, x: np.ndarray, present: np.ndarray | None) -> None:
        """Welford's update for one replicate: the runner's hot path, a third of the block path's
        array passes (measured in benchmarks/stats_engine.py)."""
        if present is None or present.all():
            self.count = self.count + 1
            delta = x - self.mean
            self.mean = self.mean + delta / self.count
            self.m2 = self.m2 + delta * (x - self.mean)
            return
        step = present.astype(np.int64)
        self.count = self.count + step
        delta = np.where(present, x - self.mean, 0.0)
        self.mean = self.mean + delta / np.maximum(self.count, 1)
        self.m2 = self.m2 + delta * np.where(present, x - self.mean, 0.0)

    def merge(self, other: "MomentAccumulator") -> None:
        """Fold in another accumulator built on disjoint replicates."""
        size = max(self.size, other.size)
        self.grow(size)
        other_count = np.concatenate([other.count, np.zeros(size - other.size, np.int64)])
        other_mean = np.concatenate([other.mean, np.zeros(size - other.size)])
        other_m2 = np.concatenate([other.m2, np.zeros(size - other.size)])
        self._merge_moments(other_count, other_mean, other_m2)

    def _merge_moments(self, n_b: np.ndarray, mean_b: np.ndarray, m2_b: np.ndarray) -> None:
        n_a = self.count
        total = n_a + n_b
        safe_total = np.maximum(total, 1)
        delta = mean_b - self.mean
        # Chan's pairwise update; where one side is empty it reduces to the other side exactly.
        self.mean = np.where(n_b == 0, self.mean, self.mean + delta * (n_b / safe_total))
        self.m2 = np.where(
            n_b == 0, self.m2, self.m2 + m2_b + delta**2 * (n_a * n_b / safe_total)
        )
        self.mean = np.where(n_a == 0, mean_b, self.mean)
        self.m2 = np.where(n_a == 0, m2_b, self.m2)
        self.count = total

    def std(self) -> np.ndarray:
        """Sample standard deviation (ddof=1); nan where fewer than two replicates."""
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.where(self.count > 1, self.m2 / np.maximum(self.count - 1, 1), np.nan)
        return np.sqrt(np.maximum(var, 0.0))
