"""torch threads for a certification: 1 against more, on an idle machine and on a loaded one.

Times the replicate phase (ref, prod, the float64 oracle and kcert's reduction, ``Runner.run``) of a
few cases at each thread count, interleaved (1, 2, 1, 2, ...) so that both see the same machine, median
of ``--repeats``; once with the machine as it is ("alone") and once while a competing process keeps
one core busy ("loaded", a pure-Python busy loop, as another job on a shared CI runner would). The
ratio is time(N threads) / time(1 thread): above 1, more threads are slower. The default of
``kcert certify --threads`` rests on these figures (docs/benchmarks.md, "Threads").

Run: python benchmarks/threads.py [--replicates R] [--repeats N] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import torch

import kcert
from kcert.execution.runner import Runner


def _rms_ref(hidden_states, weight):
    x = hidden_states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return weight * x.to(hidden_states.dtype)


def _rms_prod(hidden_states, weight):
    x = hidden_states.float()
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight.float(), eps=1e-6).to(hidden_states.dtype)


def _gemm_ref(x, w):
    return (x.float() @ w.float().T).to(x.dtype)


def _gemm_prod(x, w):
    return torch.nn.functional.linear(x, w)


def cases() -> list[kcert.Case]:
    return [
        kcert.Case(name="rmsnorm (4, 128, 512) bf16", ref=_rms_ref, prod=_rms_prod,
                   inputs={"hidden_states": kcert.Gaussian((4, 128, 512), shift=0.1)},
                   weights={"weight": kcert.Gaussian((512,), shift=1.0, std=0.05)}, dtype=torch.bfloat16),
        kcert.Case(name="linear (256, 1024) x (1024, 1024) bf16", ref=_gemm_ref, prod=_gemm_prod,
                   inputs={"x": kcert.Gaussian((256, 1024))}, weights={"w": kcert.Gaussian((1024, 1024), std=0.03)},
                   dtype=torch.bfloat16),
    ]


def _busy(stop) -> None:
    while not stop.is_set():
        pass


def time_replicates(case: kcert.Case, threads: int, replicates: int) -> float:
    torch.set_num_threads(threads)
    runner = Runner(case, seed=0)
    runner.run(0, 1)  # warm-up: first-call costs (allocations, the compiled reduction's cache)
    start = time.perf_counter()
    runner.run(1, 1 + replicates)
    return time.perf_counter() - start


def measure(case: kcert.Case, counts: list[int], replicates: int, repeats: int) -> dict[int, float]:
    times: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(repeats):
        for n in counts:
            times[n].append(time_replicates(case, n, replicates))
    return {n: statistics.median(t) for n, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, torch's default {torch.get_num_threads()} threads; "
          f"{args.replicates} replicates per timing, median of {args.repeats}, thread counts interleaved")
    header = " | ".join(f"{n} thread{'s' * (n > 1)} s" for n in args.threads)
    ratios = " | ".join(f"{n} / 1" for n in args.threads if n != 1)
    print(f"| case | machine | load avg | {header} | {ratios} |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in args.threads) + " | "
          + " | ".join("---" for n in args.threads if n != 1) + " |")
    for case in cases():
        for machine in ("alone", "loaded"):
            stop = multiprocessing.Event()
            load = None
            if machine == "loaded":
                load = multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
                load.start()
                time.sleep(1.0)
            try:
                medians = measure(case, args.threads, args.replicates, args.repeats)
                average = os.getloadavg()[0]
            finally:
                if load is not None:
                    stop.set()
                    load.join()
            cells = " | ".join(f"{medians[n]:.2f}" for n in args.threads)
            rel = " | ".join(f"{medians[n] / medians[1]:.2f}" for n in args.threads if n != 1 and 1 in medians)
            print(f"| {case.name} | {machine} | {average:.1f} | {cells} | {rel} |", flush=True)


if __name__ == "__main__":
    main()
