"""Where a certification's seconds go, part by part, against the floor of running the kernels.

For one case (default: the daily-use issue's RMSNorm (2, 256, 1024) bf16, whose prod closes over
its width), in CPU seconds of this process (``time.process_time``: on a machine shared with other
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

    python benchmarks/cost_split.py [--replicates 1024] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

import kcert
from kcert.catalog import norms
from kcert.certification import DEFAULT_HORIZON
from kcert.execution import probes, seeding
from kcert.execution.outputs import summarize
from kcert.execution.realmode import run_real
from kcert.execution.runner import Runner, as_outputs
from kcert.execution.algebra import evaluate_algebra
from kcert.gates.algebra import judge_algebra
from kcert.gates.bias import judge_bias
from kcert.gates.bitwise import judge_bitwise
from kcert.gates.variance import judge_variance
from kcert.stats.thresholds import BiasThresholds

CPU = torch.device("cpu")


def rms_norm_closed_1024(x, w, eps=norms.LLAMA_EPS):
    """F.rms_norm with its width closed over, as a module built for hidden size 1024 calls it."""
    return torch.nn.functional.rms_norm(x, [1024], w, eps)


def case() -> kcert.Case:
    return norms.RMSNORM.case("rmsnorm_2x256x1024", rms_norm_closed_1024, shape=(2, 256, 1024))


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
            o = as_outputs(run_real(lambda: c.ref(**exact), dtype=torch.float64, name="ref"), "oracle", "")
        t4 = clock()
        if runner.layouts is None:
            runner._summaries(r, draw, a, b, o)  # fixes the layouts (and warms the reduction)
        else:
            for layout, x, y, z in zip(runner.layouts, a, b, o):
                summarize(layout, x, y, z, None, runner.workspace)
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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    c = case()
    R = args.replicates
    kcert.certify(c, replicates=2, max_replicates=2)  # warm-up: imports, allocator, numba
    rows: dict[str, list[float]] = {}
    ratios, read_ratios, outcome = [], [], ""
    for _ in range(args.repeats):
        split = per_replicate(c, args.sample)
        elements = split.pop("_elements")
        fx = fixed(c, R)
        outcome = fx.pop("_outcome") + "; identity: " + fx.pop("_identity")
        t = clock()
        cert = kcert.certify(c, replicates=R, max_replicates=R)
        total = clock() - t
        floor = sum(split[k] for k in ("draw", "ref", "prod", "oracle"))
        for k, v in split.items():
            rows.setdefault(f"per replicate: {k}", []).append(v)
        rows.setdefault("per replicate: floor (draw + ref + prod + oracle)", []).append(floor)
        rows.setdefault("ns per output element: reduction", []).append(split["reduction"] / elements * 1e9)
        rows.setdefault("ns per output element: one read of ref, prod, oracle", []).append(
            split["read"] / elements * 1e9)
        rows.setdefault("reduction / one read", []).append(split["reduction"] / split["read"])
        for k, v in fx.items():
            rows.setdefault(f"fixed: {k}", []).append(v)
        rows.setdefault(f"certify at R = {R}", []).append(total)
        rows.setdefault(f"floor x {R}", []).append(floor * R)
        ratios.append(total / (floor * R))
        read_ratios.append(total / ((floor + split["read"]) * R))
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s), "
          f"CPU seconds of this process, median of {args.repeats}; parts timed on {args.sample} replicates; "
          f"verdict {cert.verdict.value}; proof {outcome}")
    print()
    print("| part | seconds |")
    print("| --- | --- |")
    for k, v in rows.items():
        print(f"| {k} | {statistics.median(v):.4g} |")
    print(f"| **certify / (floor x R)** | **{statistics.median(ratios):.3f}** (repeats: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}) |")
    print(f"| **certify / ((floor + one read) x R)** | **{statistics.median(read_ratios):.3f}** (repeats: "
          f"{', '.join(f'{r:.3f}' for r in read_ratios)}) |")


if __name__ == "__main__":
    main()
