"""Time the statistics engine alone (issue: "bias over G = 4096 buckets and R = 4096 replicates,
the GPD fit and its resampling: under one second together").

Streams R replicate rows of G bucket values through the Welford/Chan accumulators (7 rows per
bucket, as the runner does), judges both bias statistics, and fits the tail of R amplification
ratios with the 1000-resample bootstrap. Prints the median of several repeats for each step and
the total. Run: python benchmarks/stats_engine.py [--buckets G] [--replicates R] [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from kcert.stats.bias import judge_buckets
from kcert.stats.thresholds import BiasThresholds
from kcert.stats.moments import MomentAccumulator
from kcert.stats.tail import fit_tail
from kcert.stats.ulp import ulp

ROWS = 7  # raw, sign-aligned, prod/ref against the oracle for both, magnitude
BLOCK = 64  # replicates accumulated per block, as the runner does


def accumulate(data: np.ndarray, one_row_blocks: bool = False) -> list[MomentAccumulator]:
    """What the runner does: one add per row per replicate (with its presence mask) into the
    block's accumulators, blocks merged in order. ``one_row_blocks`` feeds each replicate as a
    (1, G) block instead, the Chan-merge path the runner used before Welford's update."""
    present = np.ones(data.shape[2], bool)
    accs = [MomentAccumulator.zeros(data.shape[2]) for _ in range(ROWS)]
    for start in range(0, data.shape[0], BLOCK):
        blocks = [MomentAccumulator.zeros(data.shape[2]) for _ in range(ROWS)]
        for replicate in data[start:start + BLOCK]:
            for block, row in zip(blocks, replicate):
                if one_row_blocks:
                    block.add(row[None, :], present[None, :])
                else:
                    block.add(row, present)
        for acc, block in zip(accs, blocks):
            acc.merge(block)
    return accs


def judge(accs: list[MomentAccumulator], horizon: float) -> None:
    u = np.asarray(ulp(np.abs(accs[6].mean) + 1.0, "bfloat16"))
    for stat in (0, 1):
        m, p, r = accs[stat], accs[2 + stat], accs[4 + stat]
        judge_buckets("s", m.count, m.mean, m.std(), u, BiasThresholds(), horizon, p.mean, r.mean)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--buckets", type=int, default=4096)
    ap.add_argument("--replicates", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    data = rng.normal(size=(args.replicates, ROWS, args.buckets)) * 1e-3
    k = np.where(rng.random(args.replicates) < 0.3, 0.0, rng.exponential(0.3, args.replicates))
    timings: dict[str, list[float]] = {"accumulate (streaming, 7 rows)": [], "judge bias (2 statistics)": [],
                                       "tail fit + 1000-resample bootstrap": []}
    previous: list[float] = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        accs = accumulate(data)
        t1 = time.perf_counter()
        judge(accs, 6.25e5)
        t2 = time.perf_counter()
        fit_tail(k, 6.25e5, bootstrap=1000, seed=0)
        t3 = time.perf_counter()
        for key, dt in zip(timings, (t1 - t0, t2 - t1, t3 - t2)):
            timings[key].append(dt)
        t4 = time.perf_counter()
        accumulate(data, one_row_blocks=True)
        previous.append(time.perf_counter() - t4)
    print(f"G = {args.buckets}, R = {args.replicates}, median of {args.repeats}")
    total = 0.0
    for key, values in timings.items():
        med = statistics.median(values)
        total += med
        print(f"  {key:40s} {med * 1e3:8.1f} ms")
    print(f"  {'total':40s} {total * 1e3:8.1f} ms")
    old = statistics.median(previous)
    new = statistics.median(timings["accumulate (streaming, 7 rows)"])
    print(f"  {'accumulate via one-row block merges':40s} {old * 1e3:8.1f} ms  ({old / new:.1f}x the Welford path)")


if __name__ == "__main__":
    main()
