"""The variance gate's FAIL under its minimum (100 replicates), before and after a FAIL there on the
separate-shapes estimate needed to be reproduced on half the replicates (docs/calibration.md, "Small R: the
variance gate").

Below the minimum the tail model rests on lowered thresholds (``threshold_lowered``) and a PASS is refused;
a FAIL was kept, also when the even or the odd replicates alone gave an estimate of A_T at or under the FAIL
line (``fail_not_confirmed``). One judged on the separate-shapes estimate is now held at WARN there. Pure statistics, the gate as shipped
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

With ``--above``, a second table at R = 128, 256, 1024, above the minimum, where the rule does not apply:
FAILs as shipped against FAILs if the rule held at any R (measured and rejected), on the real benign pairs
(null), the shape-mismatch null, and three defects: prod's errors 20x ref's (same law), prod's law heavier in
shape than ref's scaled to a true A_T of 20, and a Pareto-like tail against an exponential one (GPD xi = 0.4,
true A_T about 39: the shape defect tests/test_variance_gate.py FAILs).

    python benchmarks/variance_small_r.py [--runs 300] [--seed 0] [--above]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from tail_coverage import DATA, LAWS, MISMATCH, SCALE, T, true_ratio
from kcert.diagnostics import Code
from kcert.gates.variance import judge_errors, on_separate_shapes
from kcert.stats.thresholds import VarianceThresholds
from kcert.verdict import Verdict

REPLICATES = (16, 32, 64)  # under the minimum; --above: 128, 256, 1024
MINIMUM = 100  # the variance gate's minimum for a PASS at the defaults (kcert.gates.minimum)
CHOSEN = ("exponential", "half-normal", "lognormal s=0.5", "GPD xi=+0.1")
FACTOR = 20.0


def one(rng, n: int, law: str, factor: float, ref_law: str | None = None) -> tuple[bool, bool]:
    a = factor * SCALE * LAWS[law][0](rng.random(n))
    b = SCALE * LAWS[ref_law or law][0](rng.random(n))
    return judged(a, b)


def judged(a, b) -> tuple[bool, bool, bool]:
    """(FAIL by the rule before; FAIL when every unconfirmed FAIL under the minimum is held at WARN (an
    alternative measured and rejected); FAIL as shipped: held when judged on the separate-shapes estimate)."""
    v = judge_errors(a, b, T, VarianceThresholds(bootstrap=2))
    held = v.verdict is Verdict.WARN and any(d.code == Code.FAIL_NOT_CONFIRMED and "held at WARN" in d.message
                                              for d in v.diagnostics)
    before = v.verdict is Verdict.FAIL or held
    unconfirmed = v.confirmation is not None and min(v.confirmation) <= v.thresholds.fail
    return before, before and not (unconfirmed and a.size < MINIMUM), v.verdict is Verdict.FAIL


def separate_unconfirmed(a, b) -> tuple[bool, bool]:
    """(FAIL as shipped, FAIL if every unconfirmed separate-shapes FAIL were held at WARN at any R)."""
    v = judge_errors(a, b, T, VarianceThresholds(bootstrap=2))
    fail = v.verdict is Verdict.FAIL
    unconfirmed = v.confirmation is not None and min(v.confirmation) <= v.thresholds.fail
    separate = v.interval is not None and on_separate_shapes(v.fail_estimate, v.interval)
    return fail, fail and not (unconfirmed and separate)


def above(runs: int, seed: int) -> None:
    print(f"\nAbove the minimum: FAILs of {runs} runs per cell as shipped / if every unconfirmed separate-shapes "
          f"FAIL were held at WARN at any R (rejected)\n")
    print("| case | R = 128 | R = 256 | R = 1024 |")
    print("| --- | --- | --- | --- |")

    def cell(key, n, draw):
        rng = np.random.default_rng([seed, 300, *key, n])
        got = [separate_unconfirmed(*draw(rng, n)) for _ in range(runs)]
        return f"{sum(g[0] for g in got)} / {sum(g[1] for g in got)}"

    def laws(heavy, light, target):
        scale = target / true_ratio(heavy, light)
        return lambda rng, n: (scale * SCALE * LAWS[heavy][0](rng.random(n)), SCALE * LAWS[light][0](rng.random(n)))

    data = np.load(DATA)
    pairs = sorted({k.rsplit("|", 1)[0] for k in data.files})

    def real(rng, n):
        pair = pairs[rng.integers(len(pairs))]
        a, b = data[f"{pair}|prod"], data[f"{pair}|ref"]
        idx = rng.choice(a.size, n, replace=False)
        return a[idx], b[idx]

    rows = [("real benign pairs (null)", (0,), real)]
    for i, (heavy, light) in enumerate(MISMATCH):
        rows.append((f"{heavy} / {light}, true A_T 1 (null)", (1, i), laws(heavy, light, 1.0)))
        rows.append((f"{heavy} / {light}, true A_T {FACTOR:g} (defect)", (2, i), laws(heavy, light, FACTOR)))
    rows.append((f"exponential x{FACTOR:g} (defect)", (3,), laws("exponential", "exponential", FACTOR)))

    def pareto(rng, n):  # GPD xi = 0.4 against exponential, both x40: true A_T = (T^0.4 - 1) / 0.4 / log T ~ 39
        return 40 * stats.genpareto.rvs(0.4, size=n, random_state=rng), 40 * rng.exponential(size=n)

    rows.append(("GPD xi=0.4 / exponential, true A_T 39 (defect)", (4,), pareto))
    for name, key, draw in rows:
        print(f"| {name} | " + " | ".join(cell(key, n, draw) for n in (128, 256, 1024)) + " |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--above", action="store_true", help="only the table above the minimum")
    args = p.parse_args()
    start = time.perf_counter()
    if args.above:
        above(args.runs, args.seed)
        print(f"\n({time.perf_counter() - start:.0f} s)")
        return
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
