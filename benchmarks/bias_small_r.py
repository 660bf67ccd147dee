"""The bias gate's per-bucket false-signal rate at small R, before and after its critical value became a
Student t quantile (docs/calibration.md, "Small R: the critical value").

Pure statistics, the machinery of benchmarks/bias_power.py: per-replicate bucket differences drawn with numpy
(G buckets of two elements with opposite-sign references: the raw and the sign-aligned mean, 2G tests per
output), accumulated in the runner's blocks and judged by ``kcert.stats.bias.judge_buckets``. No bias, ULP floor
not binding: a significant bucket is a false FAIL. For each R and noise law, the pooled per-test rate of

- the rule before: |z| > z*, whose rate for Gaussian noise is P(|t_(R-1)| > z*), 2700x the normal's at R = 8;
- the gate's rule: |z| above ``kcert.stats.power.critical_z`` (R - 1 degrees of freedom), stated 2 Phi(-z*),

at z* = 3 and 4 (z* = 5, the default, is out of reach of a direct count; the Gaussian rows are exact by
construction there), against the stated rate, with the share of outputs with any false FAIL at z* = 5 under
each rule. Non-Gaussian laws are where the t quantile is not exact: heavy (t(5)), skewed (exp - 1), quantised.

    python benchmarks/bias_small_r.py [--runs 400] [--buckets 256] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.stats import norm

from bias_power import TINY_ULP, _laws, accumulate, cp_upper, judge
from kcert.stats.thresholds import BiasThresholds

REPLICATES = (4, 8, 16, 32, 64, 128)
Z_STARS = (3.0, 4.0)


def study(runs: int, buckets: int, seed: int) -> dict:
    out = {}
    for i, (law, draw) in enumerate(_laws().items()):
        for r in REPLICATES:
            rng = np.random.default_rng([seed, 7, i, r])
            before = np.zeros(len(Z_STARS) + 1, np.int64)  # per-test counts at Z_STARS, then outputs at z* = 5
            after = np.zeros(len(Z_STARS) + 1, np.int64)
            for _ in range(runs):
                e = draw(rng, (r, buckets, 2))
                accs = (accumulate((e[..., 0] + e[..., 1]) / 2), accumulate((e[..., 0] - e[..., 1]) / 2))
                for j, z_star in enumerate(Z_STARS + (5.0,)):
                    tests = [judge(a, TINY_ULP, BiasThresholds(z_star=z_star), statistic=s)
                             for a, s in zip(accs, ("raw", "sign_aligned"))]
                    old = np.concatenate([np.abs(t.z) > z_star for t in tests])
                    new = np.concatenate([t.significant for t in tests])
                    if j < len(Z_STARS):
                        before[j] += int(old.sum())
                        after[j] += int(new.sum())
                    else:
                        before[j] += bool(old.any())
                        after[j] += bool(new.any())
            out[(law, r)] = (before, after)
    return out


def table(res: dict, runs: int, buckets: int) -> str:
    tests = runs * 2 * buckets
    head = (f"Per-test false-signal rate under the null, pooled over {tests:,} tests per cell ({runs} outputs of "
            f"{2 * buckets} tests), before (|z| > z*) -> the gate's rule (|z| > t quantile); stated 2Φ(-z*): "
            + ", ".join(f"{2 * norm.sf(z):.2g} at z* = {z:g}" for z in Z_STARS)
            + f". Last column: outputs with any false FAIL at z* = 5 (stated bound {2 * 2 * buckets * norm.sf(5):.2g}).")
    lines = [head, "", "| law | R | " + " | ".join(f"z* = {z:g}" for z in Z_STARS) + " | outputs, z* = 5 |",
             "| --- | --- |" + " --- |" * (len(Z_STARS) + 1)]
    for (law, r), (before, after) in res.items():
        cells = [f"{before[j] / tests:.2g} -> {after[j] / tests:.2g} ({after[j]}; <= {cp_upper(after[j], tests):.2g})"
                 for j in range(len(Z_STARS))]
        cells.append(f"{before[-1]}/{runs} -> {after[-1]}/{runs}")
        lines.append(f"| {law} | {r} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=400)
    p.add_argument("--buckets", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    start = time.perf_counter()
    res = study(args.runs, args.buckets, args.seed)
    print(table(res, args.runs, args.buckets))
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
