"""Batched replicates: the same certificate, fewer kernel calls (Case.independent_leading_axis).

Certifies the catalogue RMSNorm (F.rms_norm against the reference) at a few shapes, unbatched and
batched, interleaved, median of ``--repeats``; checks that both certificates agree field for field
(dates and timings aside) and prints the times and the speed-up.

Run: python benchmarks/batched.py [--replicates R] [--repeats N] [--threads T] [--batch-memory BYTES]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

import kcert
from kcert.catalog import norms
from kcert.controls import norms as c_norms
from kcert.report.stable import stable_dict

SHAPES = ((1, 64, 512), (4, 256, 512), (8, 1024, 2048))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-memory", type=int, default=None)
    ap.add_argument("--shapes", type=int, nargs="*", default=None, help="indices into SHAPES (default: the first two)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), R = {args.replicates}, median of {args.repeats}")
    print("| shape | unbatched s | batched s | speed-up | certificates equal |")
    print("| --- | --- | --- | --- | --- |")
    for index in args.shapes if args.shapes is not None else (0, 1):
        shape = SHAPES[index]
        case = norms.RMSNORM.case(f"rmsnorm_{'x'.join(map(str, shape))}", c_norms.rms_norm_builtin, shape=shape)
        batched_case = dataclasses.replace(case, independent_leading_axis=True)
        times = {"plain": [], "batched": []}
        equal = True
        for _ in range(args.repeats):
            t = time.perf_counter()
            a = kcert.certify(case, replicates=args.replicates, max_replicates=args.replicates)
            times["plain"].append(time.perf_counter() - t)
            t = time.perf_counter()
            b = kcert.certify(batched_case, replicates=args.replicates, max_replicates=args.replicates,
                              batch_memory=args.batch_memory)
            times["batched"].append(time.perf_counter() - t)
            equal &= stable_dict(a) == stable_dict(b)
        p, b = statistics.median(times["plain"]), statistics.median(times["batched"])
        print(f"| {shape} | {p:.2f} | {b:.2f} | {p / b:.2f}x | {'yes' if equal else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
