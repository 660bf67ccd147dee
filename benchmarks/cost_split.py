"""Where a certification's seconds go, part by part, against the floor of running the kernels.

For each case (``--cases``; default the daily-use issue's RMSNorm (2, 256, 1024) bf16, whose prod
closes over its width; also RoPE, attention and the router at daily-use sizes, ``overhead.build_cases("daily")``),
interleaved in every repeat, in CPU seconds of this process (``time.process_time``: on a machine shared with other
jobs, wall-clock parts timed at different moments mostly measure the load), median of ``--repeats``:

- the floor, per replicate, as kcert draws and runs it: the probe draws (``kcert.execution.probes``,
  seeded per replicate, rounded to the case dtype), ref, prod, and the float64 oracle (ref in real
  mode); ``floor x R`` is what any certification must spend;
- kcert's per-replicate work on top: the reduction of the three outputs into the accumulators
  (``kcert.execution.outputs.summarize``), also in ns per output element against one read of the
  outputs (``torch.sum`` of ref, prod and the oracle, each once: the memory traffic any reduction
  must pay);
- kcert's fixed work: the algebra gate's identity test (real mode, float64 and float32, on the
  probe and wide draws), its symbolic proof, and the statistics of the bias and variance gates and
  L0 on the accumulated replicates;
- ``kcert.certify`` itself at R, and the ratio certify / (floor x R), also against the floor plus
  one read of the outputs (what kcert's reduction cannot go below).

    python benchmarks/cost_split.py [--replicates 1024] [--repeats 3] [--threads 1] [--cases rmsnorm rope attention router]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

import kcert
import overhead  # benchmarks/overhead.py: the cases and the oracle as the runner runs it
from kcert.certification import DEFAULT_HORIZON
from kcert.execution import probes, seeding
from kcert.execution.runner import Runner, as_outputs
from kcert.execution.algebra import evaluate_algebra
from kcert.gates.algebra import judge_algebra
from kcert.gates.bias import judge_bias
from kcert.gates.bitwise import judge_bitwise
from kcert.gates.variance import judge_variance
from kcert.stats.thresholds import BiasThresholds

CPU = torch.device("cpu")


def cases() -> dict[str, kcert.Case]:
    """The cases at daily-use sizes (the RMSNorm one is the daily-use issue's)."""
    return overhead.build_cases("daily")


def clock() -> float:
    return time.process_time()


def per_replicate(c: kcert.Case, n: int) -> dict[str, float]:
    """Seconds per replicate of each floor part, of the reduction and of one read of the outputs,
    over replicates 0..n-1 (and, as ``_elements``, the output elements of a replicate)."""
    runner = Runner(c, 0, CPU)
    weights = runner.weights
    parts = {"draw": 0.0, "ref": 0.0, "prod": 0.0, "oracle": 0.0, "reduction": 0.0, "read": 0.0}
    for r in range(n):
        t = clock()
        draw = probes.draw_inputs(c, 0, r, CPU)
        working, exact = {**draw.working, **weights.working}, {**draw.exact, **weights.exact}
        t1 = clock()
        with torch.no_grad():
            a = as_outputs(c.ref(**working), "ref", "")
            t2 = clock()
            b = as_outputs(c.prod(**working), "prod", "")
            t3 = clock()
            o = overhead.oracle_outputs(c, exact)
        t4 = clock()
        runner._summaries(r, draw, a, b, o)  # the runner's reduction (bucket labels included)
        t5 = clock()
        for x in (*a, *b, *o):  # one read of the outputs
            x.sum()
        t6 = clock()
        for k, v in zip(parts, (t1 - t, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            parts[k] += v
    return {k: v / n for k, v in parts.items()} | {"_elements": sum(x.numel() for x in a)}


def fixed(c: kcert.Case, replicates: int) -> dict[str, float]:
    """Seconds of the fixed parts: identity test, proof, gates' statistics on ``replicates``."""
    from kcert.execution.proof import prove
    from kcert.stats.identity import FAIL_FLOOR

    runner = Runner(c, 0, CPU)
    t = clock()
    identity = judge_algebra(evaluate_algebra(c, runner.weights, 0, CPU, proof=False))
    t1 = clock()
    points = 8  # as certify: 8 probe draws and 8 wide draws, the proof's points among them
    draws = [probes.draw_inputs(c, 0, i, CPU, stream=seeding.ALGEBRA, widen=1.0 if i < points else 4.0)
             for i in range(2 * points)]
    proof = prove(c, (c.ref, "ref in real mode"), (c.prod, "prod in real mode"), draws, runner.weights, FAIL_FLOOR,
                  wide_from=points)
    t2 = clock()
    runner.run(0, replicates)
    t3 = clock()
    thresholds = BiasThresholds()
    for i, acc in enumerate(runner.accumulators):
        judge_bias(acc, thresholds, DEFAULT_HORIZON, attribution=True)
        judge_bitwise(acc, runner.early_moments(i, len(acc.replicate)), thresholds.z_star)
    t4 = clock()
    for acc in runner.accumulators:
        judge_variance(acc.layout.name, acc.layout.dtype_name, *acc.errors(), DEFAULT_HORIZON,
                       kcert.VarianceThresholds(), seeding.derived_seed(0, seeding.BOOTSTRAP, acc.layout.index),
                       (replicates,), 1)
    t5 = clock()
    return {"identity test": t1 - t, "symbolic proof": t2 - t1, f"bias + L0 statistics at R = {replicates}": t4 - t3,
            f"variance statistics at R = {replicates}": t5 - t4,
            "_outcome": f"{proof.outcome} ({proof.reason}): {proof.note[:160]}", "_identity": identity.reason[:80]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=1024)
    ap.add_argument("--sample", type=int, default=64, help="replicates timed part by part (default 64)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", nargs="+", default=["rmsnorm"], choices=sorted(cases()))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    R = args.replicates
    chosen = {name: cases()[name] for name in args.cases}
    for c in chosen.values():
        kcert.certify(c, replicates=2, max_replicates=2)  # warm-up: imports, allocator, numba
    rows = {name: {} for name in chosen}
    ratios = {name: ([], []) for name in chosen}
    outcomes, verdicts = {}, {}
    for _ in range(args.repeats):
        for name, c in chosen.items():  # interleaved: every case in every repeat
            split = per_replicate(c, args.sample)
            elements = split.pop("_elements")
            fx = fixed(c, R)
            outcomes[name] = fx.pop("_outcome") + "; identity: " + fx.pop("_identity")
            t = clock()
            cert = kcert.certify(c, replicates=R, max_replicates=R)
            total = clock() - t
            verdicts[name] = cert.verdict.value
            floor = sum(split[k] for k in ("draw", "ref", "prod", "oracle"))
            row = rows[name]
            for k, v in split.items():
                row.setdefault(f"per replicate: {k}", []).append(v)
            row.setdefault("per replicate: floor (draw + ref + prod + oracle)", []).append(floor)
            row.setdefault("ns per output element: reduction", []).append(split["reduction"] / elements * 1e9)
            row.setdefault("ns per output element: one read of ref, prod, oracle", []).append(
                split["read"] / elements * 1e9)
            row.setdefault("reduction / one read", []).append(split["reduction"] / split["read"])
            for k, v in fx.items():
                row.setdefault(f"fixed: {k}", []).append(v)
            row.setdefault(f"certify at R = {R}", []).append(total)
            row.setdefault(f"floor x {R}", []).append(floor * R)
            ratios[name][0].append(total / (floor * R))
            ratios[name][1].append(total / ((floor + split["read"]) * R))
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s), "
          f"CPU seconds of this process, median of {args.repeats} interleaved repeats; parts timed on {args.sample} "
          f"replicates")
    for name, c in chosen.items():
        print()
        print(f"{c.name}: verdict {verdicts[name]}; proof {outcomes[name]}")
        print()
        print("| part | seconds |")
        print("| --- | --- |")
        for k, v in rows[name].items():
            print(f"| {k} | {statistics.median(v):.4g} |")
        plain, read = ratios[name]
        print(f"| **certify / (floor x R)** | **{statistics.median(plain):.3f}** (repeats: "
              f"{', '.join(f'{r:.3f}' for r in plain)}) |")
        print(f"| **certify / ((floor + one read) x R)** | **{statistics.median(read):.3f}** (repeats: "
              f"{', '.join(f'{r:.3f}' for r in read)}) |")
    print()
    print(f"| case | reduction ns/element | reduction / one read | certify / (floor x {R}) | "
          f"certify / ((floor + one read) x {R}) |")
    print("| --- | --- | --- | --- | --- |")
    for name, c in chosen.items():
        row = rows[name]
        print(f"| {c.name} ({verdicts[name]}) | {statistics.median(row['ns per output element: reduction']):.2f} | "
              f"{statistics.median(row['reduction / one read']):.2f} | {statistics.median(ratios[name][0]):.3f} | "
              f"{statistics.median(ratios[name][1]):.3f} |")


if __name__ == "__main__":
    main()
