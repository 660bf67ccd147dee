"""What compiling prod costs a certification: a torch.compile'd RMSNorm certified in a fresh process
with an empty inductor cache (cold), again with the cache the first run left (warm), and the eager
kernel (no compilation), each in a fresh process, ``--repeats`` times interleaved; wall seconds of
the certification alone (imports excluded), median and range.

    python benchmarks/compile_cost.py [--repeats 3] [--replicates 64]

The cache folder is a fresh temporary one per cold run (``TORCHINDUCTOR_CACHE_DIR``); docs/torch-compile.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time, torch, kcert
torch.set_num_threads(1)
def rms_norm(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
prod = torch.compile(rms_norm) if sys.argv[1] == "compiled" else rms_norm
case = kcert.Case(name="rms", ref=rms_norm, prod=prod, inputs={"x": kcert.Gaussian((2, 256, 1024), shift=0.1)},
                  weights={"w": kcert.Gaussian((1024,), shift=1.0, std=0.1)})
t = time.perf_counter()
cert = kcert.certify(case, replicates=int(sys.argv[2]), seed=0)
print(time.perf_counter() - t, cert.verdict.value, "|".join(cert.notes))
"""


def run(kind: str, replicates: int, cache: str) -> tuple[float, str]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(replicates)], capture_output=True, text=True,
                         env=env, check=True).stdout.strip().splitlines()[-1]
    seconds, rest = out.split(" ", 1)
    return float(seconds), rest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--replicates", type=int, default=64)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"cold": [], "warm": [], "eager": []}
    note = ""
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="kcert-inductor-") as cache:
            t, note = run("compiled", args.replicates, cache)
            times["cold"].append(t)
            times["warm"].append(run("compiled", args.replicates, cache)[0])
        times["eager"].append(run("eager", args.replicates, tempfile.gettempdir())[0])
    print(f"R = {args.replicates}, {args.repeats} repeats, load average {os.getloadavg()[0]:.1f}; note: {note}")
    print("| prod | median s | range s |")
    print("| --- | --- | --- |")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v):.1f} | {min(v):.1f}-{max(v):.1f} |")


if __name__ == "__main__":
    main()
