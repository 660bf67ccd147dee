"""The probe draw against a plain ``torch.randn`` + cast (issue: the probes' float64 copies and
rounding are part of the floor; where kcert itself makes them slower than a plain draw, close the gap).

For the daily-use RMSNorm case (x: Gaussian (2, 256, 1024), shift 0.1, std 1, bf16), per replicate,
side by side and interleaved in one process, median of ``--repeats`` (each the mean of ``--draws``
draws), wall-clock milliseconds:

- kcert: ``kcert.execution.probes.draw_inputs`` (a generator seeded per replicate, the probe's
  ``sample`` in float32, rounded to bf16, and the float64 copy the oracle reads);
- kcert before: the same with the previous ``Gaussian.sample`` (``randn().mul_(std).add_(shift)``:
  a multiplication by 1.0 that changes no bit);
- plain: ``torch.randn(shape, dtype=float32).to(bfloat16)`` from a seeded generator;
- plain + float64 copy: the same and ``.to(float64)`` (what a float64 oracle must read anyway);
- and the parts: seeding the generator, randn alone, the shift, the rounding, the float64 copy.

    python benchmarks/draw.py [--repeats 15] [--draws 20]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from kcert.catalog import norms
from kcert.execution import probes, seeding

CPU = torch.device("cpu")
SHAPE = (2, 256, 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--draws", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)

    def rms(x, w, eps=norms.LLAMA_EPS):
        return torch.nn.functional.rms_norm(x, [1024], w, eps)

    case = norms.RMSNORM.case("rmsnorm_2x256x1024", rms, shape=SHAPE)
    probe = case.inputs["x"]
    x32 = torch.randn(SHAPE)
    x16 = x32.to(torch.bfloat16)

    def generator(r):
        return seeding.generator(0, seeding.INPUTS, r, CPU)

    def before(r):
        x = torch.randn(SHAPE, generator=generator(r), dtype=torch.float32).mul_(probe.std).add_(probe.shift)
        x.to(torch.bfloat16).to(torch.float64)

    def plain(r):
        torch.randn(SHAPE, generator=torch.Generator().manual_seed(r), dtype=torch.float32).to(torch.bfloat16)

    def plain64(r):
        g = torch.Generator().manual_seed(r)
        torch.randn(SHAPE, generator=g, dtype=torch.float32).to(torch.bfloat16).to(torch.float64)

    parts = {
        "kcert": lambda r: probes.draw_inputs(case, 0, r, CPU),
        "kcert before (randn, mul_(1.0), add_(shift), cast, float64 copy)": before,
        "plain randn + cast": plain,
        "plain randn + cast + float64 copy": plain64,
        "part: seeding the generator": generator,
        "part: randn alone (float32)": lambda r: torch.randn(SHAPE, generator=torch.Generator().manual_seed(r)),
        "part: mul_(1.0) (no longer run)": lambda r: x32.mul_(1.0),
        "part: add_(shift)": lambda r: x32.add_(0.0),
        "part: cast to bf16": lambda r: x32.to(torch.bfloat16),
        "part: float64 copy": lambda r: x16.to(torch.float64),
    }
    times = {k: [] for k in parts}
    for fn in parts.values():  # warm-up
        fn(0)
    for _ in range(args.repeats):
        for key, fn in parts.items():
            t = time.perf_counter()
            for r in range(args.draws):
                fn(r)
            times[key].append((time.perf_counter() - t) / args.draws * 1e3)
    plain_ms = statistics.median(times["plain randn + cast"])
    plain64_ms = statistics.median(times["plain randn + cast + float64 copy"])
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, x {SHAPE} bf16, "
          f"median of {args.repeats} interleaved repeats of {args.draws} draws")
    print()
    print("| draw | ms per replicate | / plain | / (plain + float64 copy) |")
    print("| --- | --- | --- | --- |")
    for key, v in times.items():
        ms = statistics.median(v)
        ratios = f"{ms / plain_ms:.3f} | {ms / plain64_ms:.3f}" if not key.startswith("part") else "- | -"
        print(f"| {key} | {ms:.3f} | {ratios} |")


if __name__ == "__main__":
    main()
