"""A defect on a kernel's last partial tile against the profile rule (docs/method.md, "The working precision's own
bias"), constructed (not a reported bug): a Gemma RMSNorm whose last ``hidden % 64`` channels, the tail its blocks
of 64 do not cover, form (1 + w) in bf16 (the arithmetic of transformers PR #29402's bug, confined to the tail),
certified with kcert's defaults. For each tail width it
prints the bucket-wise verdict, the FAILing buckets' ratio to ref's own bias profile, the swap test's p, and the
verdict of the swap test alone (the rule as first written) and of the amended rule kcert applies.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/profile_rule_tail.py [-R 1024] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

import kcert
from kcert.catalog import norms as N
from kcert.controls.norms import gemma_rms_norm_bf16_gain
from kcert.gates.bias import rejudge

BLOCK = 64


def case(hidden: int) -> kcert.Case:
    body = hidden - hidden % BLOCK

    def prod(x, w, eps=N.GEMMA_EPS):
        good, bad = N.gemma_rms_norm(x, w, eps), gemma_rms_norm_bf16_gain(x, w, eps)
        return torch.cat([good[..., :body], bad[..., body:]], dim=-1)

    return N.GEMMA_RMSNORM.case(f"gemma_norm_tail_{hidden - body}", prod, shape=(64, hidden))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-R", "--replicates", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"R = {args.replicates}, seed {args.seed}, bf16, 64 rows; the tail's channels are the defect's")
    print("| tail channels | bucket-wise | FAILing buckets | ratio to ref's profile | swap p | swap test alone | "
          "amended rule (kcert) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for tail in (1, 2, 3, 4, 6, 8, 16):
        cert = kcert.certify(case(512 + tail), args.replicates, seed=args.seed)
        b = cert.bias[0]
        bucket_wise = rejudge(b, dataclasses.replace(b.thresholds, profile_alpha=None)).verdict.value
        e = b.ref_profile
        if e is None:
            print(f"| {tail} | {bucket_wise} | 0 | - | - | {bucket_wise} | {b.verdict.value} |")
            continue
        swap_only = rejudge(b, dataclasses.replace(b.thresholds, profile_ratio=float("inf"))).verdict.value
        p = min(s.swap_p for s in e.statistics)
        print(f"| {tail} | {bucket_wise} | {e.buckets} | {e.lowest_ratio:.3g}-{e.highest_ratio:.3g} | {p:.2g} | "
              f"{swap_only} | {b.verdict.value} |")


if __name__ == "__main__":
    main()
