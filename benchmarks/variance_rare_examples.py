"""The variance gate on two defects whose prod error stays within one harm unit in almost every replicate
(docs/method.md, Gate 3, "prod within the slack"):

- ``gelu_input_clamped``: a bf16 GELU that clamps its input at 4.8 (a lookup-table or polynomial kernel's
  range guard). Inputs above 4.8 are rare under the probe (a few replicates in 1024 reach them, at about
  one bf16 ULP); at the horizon, inputs near 5.5 make the error some 20 ULP.
- ``rms_norm_bf16_sum_of_squares``: a float32 RMSNorm whose sum of squares is accumulated in bf16 (per
  block of 256 squares added in float32, the running sum rounded to bf16, as a kernel with a bf16
  accumulator does), judged in bf16 harm units: its errors reach most of a bf16 ULP where ref's are
  float32 roundings.

Both prods are within one harm unit of the oracle in (nearly) every replicate, where the gate used to
PASS without a fit; ref's errors are far smaller. The algebra gate FAILs both (a different real
function): the script prints the variance gate's own verdict and evidence, which is what an opaque prod
(no real mode, no algebra gate) would rest on.

Usage: python benchmarks/variance_rare_examples.py [--replicates 1024] [--seed 0]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import kcert
from kcert.case import Axes, Case, Gaussian

BF16, F32 = torch.bfloat16, torch.float32
EPS = 1e-6
BLOCK = 256


def gelu_clamped(x):
    """GELU of the input clamped at 4.8 (the kernel's range guard)."""
    return F.gelu(x.clamp(max=4.8))


def rms_norm_ref(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rms_norm_bf16_accumulator(x, w):
    """RMSNorm whose running sum of squares is a bf16 register: each block of 256 squares is summed in
    float32 and added to the bf16 accumulator, which rounds."""
    acc = torch.zeros(x.shape[:-1] + (1,), dtype=BF16)
    for start in range(0, x.shape[-1], BLOCK):
        acc = (acc.float() + x[..., start:start + BLOCK].pow(2).sum(-1, keepdim=True)).to(BF16)
    return x * torch.rsqrt(acc.float() / x.shape[-1] + EPS) * w


def cases() -> list[Case]:
    gelu = Case(name="gelu_input_clamped", ref=F.gelu, prod=gelu_clamped, inputs={"x": Gaussian((8, 256))},
                buckets=Axes(-1), dtype=BF16)
    rms = Case(name="rms_norm_bf16_sum_of_squares", ref=rms_norm_ref, prod=rms_norm_bf16_accumulator,
               inputs={"x": Gaussian((8, 1024))}, weights={"w": Gaussian((1024,), shift=1.0, std=0.05)},
               buckets=Axes(-1), dtype=F32)
    return [gelu, rms]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicates", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print("| case | output | R | prod median / max (harm ULP) | ref median / max | variance | U | observed ratio "
          "| diagnostics |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case in cases():
        cert = kcert.certify(case, replicates=args.replicates, seed=args.seed, algebra_proof=False, peer_rules=False)
        for v in cert.variance:
            pq, rq = v.error_summary("prod"), v.error_summary("ref")
            obs = getattr(v, "observed", None)
            print(f"| {case.name} | {v.output} | {v.replicates} | {pq[0.5]:.3g} / {pq[1.0]:.3g} | "
                  f"{rq[0.5]:.3g} / {rq[1.0]:.3g} | {v.verdict.value} | "
                  f"{'-' if v.upper_bound is None else f'{v.upper_bound:.3g}'} | "
                  f"{'-' if obs is None else f'{obs.ratio:.3g}'} | {', '.join(d.code for d in v.diagnostics)} |",
                  flush=True)
            print(f"<!-- {v.reason} -->")


if __name__ == "__main__":
    main()
