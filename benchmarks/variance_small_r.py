"""The variance gate's FAIL under its minimum (100 replicates), before and after a FAIL there needed to be
reproduced on half the replicates (docs/calibration.md, "Small R: the variance gate").

Below the minimum the tail model rests on lowered thresholds (``threshold_lowered``) and a PASS is refused;
a FAIL was kept, also when the even or the odd replicates alone gave an estimate of A_T at or under the FAIL
line (``fail_not_confirmed``). It is now held at WARN. Pure statistics, the gate as shipped
(``kcert.gates.variance.judge_errors``, one look): per run, prod's and ref's per-replicate errors drawn
independently, in harm units far above the one-unit slack (benchmarks/tail_coverage.py's laws),

- **null**: both sides from one law (true A_T = 1): any FAIL is false;
- **null, shapes differ**: prod's law heavier in shape than ref's (benchmarks/tail_coverage.py's mismatch
  pairs), prod scaled to a true A_T of 1 at T: the case that FAILed a float16 decoder layer at R = 32, where
  the separate-shapes fit extrapolates two free shapes from ten exceedances each;
- **defect**: prod's errors 20x ref's, the same law (true A_T = 20, a FAIL the gate should give);
- **real benign pairs**: the per-replicate errors (harm units) of the control suite's benign pairs kept in
  benchmarks/data/real_errors.npz (1024 replicates each; torch.compile, eager against sdpa, RoPE caches),
  R of them drawn in pairs without replacement per run: every FAIL is false.

"before" counts the runs that FAILed or were held at WARN by the rule (the verdict the rule before gave);
"after" the runs that FAIL now.

    python benchmarks/variance_small_r.py [--runs 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tail_coverage import DATA, LAWS, MISMATCH, SCALE, T, true_ratio
from kcert.diagnostics import Code
from kcert.gates.variance import judge_errors
from kcert.stats.thresholds import VarianceThresholds
from kcert.verdict import Verdict

REPLICATES = (16, 32, 64, 128)
MINIMUM = 100  # the variance gate's minimum for a PASS at the defaults (kcert.gates.minimum)
CHOSEN = ("exponential", "half-normal", "lognormal s=0.5", "GPD xi=+0.1")
FACTOR = 20.0


def one(rng, n: int, law: str, factor: float, ref_law: str | None = None) -> tuple[bool, bool]:
    a = factor * SCALE * LAWS[law][0](rng.random(n))
    b = SCALE * LAWS[ref_law or law][0](rng.random(n))
    return judged(a, b)


def judged(a, b) -> tuple[bool, bool, bool]:
    """(FAIL by the rule before; FAIL when every unconfirmed FAIL under the minimum is held at WARN; FAIL as
    shipped: held only when judged on the separate-shapes estimate)."""
    v = judge_errors(a, b, T, VarianceThresholds(bootstrap=2))
    held = v.verdict is Verdict.WARN and any(d.code == Code.FAIL_NOT_CONFIRMED and "held at WARN" in d.message
                                              for d in v.diagnostics)
    before = v.verdict is Verdict.FAIL or held
    unconfirmed = v.confirmation is not None and min(v.confirmation) <= v.thresholds.fail
    return before, before and not (unconfirmed and a.size < MINIMUM), v.verdict is Verdict.FAIL


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    start = time.perf_counter()
    print(f"FAILs of {args.runs} runs per cell: the rule before / every unconfirmed FAIL under {MINIMUM} replicates "
          f"held at WARN / only those judged on the separate-shapes estimate held (shipped). Null: true A_T = 1; "
          f"defect: prod's errors {FACTOR:g}x ref's, true A_T = {FACTOR:g}\n")
    print("| law (prod / ref) | R | null: false FAIL | defect: FAIL |")
    print("| --- | --- | --- | --- |")

    def cell(key, n, law, factor, ref_law=None):
        rng = np.random.default_rng([args.seed, *key, n])
        runs = [one(rng, n, law, factor, ref_law) for _ in range(args.runs)]
        before, every, shipped = (sum(r[k] for r in runs) for k in (0, 1, 2))
        return f"{before} / {every} / {shipped}"

    for i, law in enumerate(CHOSEN):
        for n in REPLICATES:
            print(f"| {law} | {n} | {cell((i, 0), n, law, 1.0)} | {cell((i, 1), n, law, FACTOR)} |", flush=True)
    for i, (heavy, light) in enumerate(MISMATCH):
        for n in REPLICATES:  # prod at a true A_T of 1: its return level at T is ref's
            null = cell((100 + i, 0), n, heavy, 1.0 / true_ratio(heavy, light), light)
            print(f"| {heavy} / {light} | {n} | {null} | - |", flush=True)
    data = np.load(DATA)
    pairs = sorted({k.rsplit("|", 1)[0] for k in data.files})
    for n in REPLICATES:
        rng = np.random.default_rng([args.seed, 200, n])
        runs = []
        for pair in pairs:  # the same number of runs per pair, drawn without replacement within a run
            a, b = data[f"{pair}|prod"], data[f"{pair}|ref"]
            for _ in range(max(1, args.runs // len(pairs))):
                idx = rng.choice(a.size, n, replace=False)
                runs.append(judged(a[idx], b[idx]))
        before, every, shipped = (sum(r[k] for r in runs) for k in (0, 1, 2))
        print(f"| real benign pairs ({len(pairs)} outputs, {len(runs)} runs) | {n} | {before} / {every} / {shipped} | - |",
              flush=True)
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
