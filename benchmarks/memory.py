"""Peak memory of a certification as R grows, for a fixed shape (performance issue, item 3:
flat within 10% from R = 1024 to 16384, and at most about three times one replicate's working set).

Each R runs in a fresh process; it records the resident set after imports and case set-up
(baseline) and the peak resident set of the run (ru_maxrss). "One replicate" is the same
measurement with R = 2, i.e. the working set of evaluating ref, prod and the oracle once and
reducing them. Run: python benchmarks/memory.py [--shape 4 128 1024] [--replicates 1024 4096 16384]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, torch
import kcert
from kcert import demo
shape, replicates = tuple(json.loads(sys.argv[1])), int(sys.argv[2])
torch.set_num_threads(1)
case = kcert.Case(name="rmsnorm", ref=demo.gemma_rmsnorm, prod=demo.gemma_rmsnorm_fused,
                  inputs={"x": kcert.Gaussian(shape, shift=0.1)}, weights={"w": kcert.Gaussian(shape[-1:], std=0.02)})
def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
base = rss_mib()
kcert.certify(case, replicates=replicates, max_replicates=replicates, algebra_points=1)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"replicates": replicates, "baseline_mib": base, "peak_mib": peak}))
"""


def run(shape, replicates) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(shape), str(replicates)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs="+", default=[4, 128, 1024])
    ap.add_argument("--replicates", type=int, nargs="+", default=[1024, 4096, 16384])
    args = ap.parse_args()
    one = run(args.shape, 2)
    working = one["peak_mib"] - one["baseline_mib"]
    elements = 1
    for s in args.shape:
        elements *= s
    print(f"shape {tuple(args.shape)} ({elements * 2 / 2**20:.1f} MiB per bf16 tensor); one replicate's working set "
          f"(R = 2, peak - baseline): {working:.1f} MiB")
    print("| R | baseline MiB | peak MiB | peak - baseline MiB | x one replicate |")
    print("| --- | --- | --- | --- | --- |")
    for r in args.replicates:
        m = run(args.shape, r)
        extra = m["peak_mib"] - m["baseline_mib"]
        print(f"| {r} | {m['baseline_mib']:.1f} | {m['peak_mib']:.1f} | {extra:.1f} | {extra / working:.2f} |")


if __name__ == "__main__":
    main()
