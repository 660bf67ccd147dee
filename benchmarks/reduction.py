"""The per-replicate reduction alone, compiled (kcert[fast]) against the torch chunks, on the outputs
of one replicate of each case of ``benchmarks/overhead.py`` (the issue's four shapes).

For each output: ``summarize`` with the compiled path and with ``KCERT_NO_FUSED=1`` (the torch
path, as without numba or on an accelerator), interleaved, median of ``--repeats``; printed in ns
per output element and as a ratio. Also checks that both give the same ULP histogram and error
norms and sums equal to 1e-12 of each row's scale, so a speed figure never comes from a wrong
result. With ``--device cuda`` the compiled path is the Triton kernel (``kcert.execution.fused_triton``)
and the script also checks that its summary equals, bit for bit, the numba kernel's on the same
outputs copied to the CPU (the equality ``tests/test_fused_triton.py`` shows in Triton's interpreter).

Run: python benchmarks/reduction.py [--repeats 7] [--cases rmsnorm rope ...] [--threads 1] [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from overhead import build_cases

from kcert.case import Labels
from kcert.execution import fused, probes
from kcert.execution.outputs import Workspace, bucket_labels, summarize
from kcert.execution.runner import Runner


def one_replicate(case, device=torch.device("cpu")):
    """(layout, ref, prod, oracle, labels) for every output of replicate 1."""
    runner = Runner(case, 0, device)
    runner.run(0, 1)  # fixes the layouts
    draw = probes.draw_inputs(case, 0, 1, runner.device)
    working = {**draw.working, **runner.weights.working}
    exact = {**draw.exact, **runner.weights.exact}
    ref, prod, oracle = runner._kernels(working, exact, 1, runner.where(1))
    out = []
    for layout, a, b, o in zip(runner.layouts, ref, prod, oracle or [None] * len(ref)):
        labels = (bucket_labels(layout.spec, draw.working, runner.weights.working, a, "benchmark")
                  if isinstance(layout.spec, Labels) else None)
        out.append((layout, a, b, o, labels))
    return out


def timed(fn, device=torch.device("cpu")) -> float:
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def assert_same_bits(x, y, where: str) -> None:
    """Two ReplicateSummary equal in every bit (sums, presence, norms, ULP counts)."""
    same = (x.sums.tobytes() == y.sums.tobytes() and (x.present == y.present).all()
            and (x.oracle_present == y.oracle_present).all() and (x.ulp_histogram == y.ulp_histogram).all()
            and [x.e_prod, x.e_ref, x.peak] == [y.e_prod, y.e_ref, y.peak])
    assert same, f"{where}: the accelerator's summary differs from the CPU kernel's"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cases", nargs="+", default=["rmsnorm", "rope", "attention", "router"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the kernels and the reduction run (e.g. cuda)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available on this machine")
    if not fused.available():
        ap.error("the compiled reduction is not available: pip install 'kcert[fast]' (and unset KCERT_NO_FUSED)")
    torch.set_num_threads(args.threads)
    cases = build_cases()
    print(f"torch {torch.__version__}, numba {fused.numba.__version__}, {args.threads} thread(s), "
          f"median of {args.repeats}, interleaved, device {device} ({fused.kernel_for(device)})"
          + (f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""))
    print("| case | output | elements | buckets | compiled ns/element | torch ns/element | torch / compiled |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.cases:
        for layout, a, b, o, labels in one_replicate(cases[name], device):
            compiled_ws, torch_ws = Workspace(), Workspace()
            results = {}

            def compiled():
                results["compiled"] = summarize(layout, a, b, o, labels, compiled_ws)

            def torch_path():
                os.environ["KCERT_NO_FUSED"] = "1"
                try:
                    results["torch"] = summarize(layout, a, b, o, labels, torch_ws)
                finally:
                    del os.environ["KCERT_NO_FUSED"]

            compiled(), torch_path()  # warm-up: compilation, scratch buffers
            times = {"compiled": [], "torch": []}
            for _ in range(args.repeats):
                times["compiled"].append(timed(compiled, device))
                times["torch"].append(timed(torch_path, device))
            x, y = results["compiled"], results["torch"]
            if device.type != "cpu":
                on_cpu = summarize(layout, a.cpu(), b.cpu(), o.cpu() if o is not None else None,
                                   labels.cpu() if labels is not None else None)
                assert_same_bits(x, on_cpu, f"{name} {layout.name}")
            scale = np.abs(y.sums).max(axis=1, keepdims=True)
            assert (np.abs(x.sums - y.sums) <= 1e-12 * scale).all(), f"{name} {layout.name}: sums differ"
            assert (x.ulp_histogram == y.ulp_histogram).all() and (x.e_prod, x.e_ref, x.peak) == (y.e_prod, y.e_ref, y.peak)
            n = a.numel()
            c, t = (statistics.median(times[k]) / n * 1e9 for k in ("compiled", "torch"))
            ratio = statistics.median(tt / cc for cc, tt in zip(times["compiled"], times["torch"]))
            print(f"| {name} | {layout.name} | {n} | {layout.buckets} | {c:.2f} | {t:.2f} | {ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
