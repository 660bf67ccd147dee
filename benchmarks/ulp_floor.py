"""Measure the bias effects (in true ULPs) that fix the bias gate's ULP floor c.

The floor must sit above the coherent sub-ULP effects of known-good rewrites (double vs single
rounding, fused epilogues) and below the Gemma (1 + w)-in-bf16 defect. Prints one row per pair:
buckets judged, FAIL/WARN buckets, the largest raw and sign-aligned effect, prod's own largest
bias against the oracle, and the verdicts. Run: python benchmarks/ulp_floor.py [--replicates R]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import kcert
from kcert import demo
from kcert.gates.bias import rejudge
from kcert.stats.bias import REPORT_RULES

EPS = 1e-6
D = 256


def _normalised(x):
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)


def llama_single_rounding(x, w):  # TransformerEngine-style: gain in float32, one rounding
    return (_normalised(x) * w.float()).to(x.dtype)


def llama_double_rounding(x, w):  # HF-style: normalised activations rounded, then gain in bf16
    return w * _normalised(x).to(x.dtype)


def addmm_unfused(x, W, b):  # GEMM output rounded, bias added in bf16
    return (x.float() @ W.float()).to(x.dtype) + b


def addmm_fused(x, W, b):  # bias added in the float32 epilogue, one rounding
    return (x.float() @ W.float() + b.float()).to(x.dtype)


def swiglu_unfused(g, u):
    return torch.nn.functional.silu(g.float()).to(g.dtype) * u


def swiglu_fused(g, u):
    return (torch.nn.functional.silu(g.float()) * u.float()).to(g.dtype)


def _norm_case(name, ref, prod):
    return kcert.Case(name=name, ref=ref, prod=prod, inputs={"x": kcert.Gaussian((2, 64, D), shift=0.1)},
                      weights={"w": kcert.Gaussian((D,), shift=1.0, std=0.02)})


def pairs():
    linear = dict(inputs={"x": kcert.Gaussian((64, D), shift=0.1)},
                  weights={"W": kcert.Gaussian((D, D), std=D**-0.5), "b": kcert.Gaussian((D,), std=0.5)})
    glu = dict(inputs={"g": kcert.Gaussian((64, D), shift=0.1), "u": kcert.Gaussian((64, D), shift=0.1)})
    return [
        ("defect", demo.bf16_gain),
        ("good", demo.correct),
        ("good", _norm_case("double_vs_single_rounding (prod single)", llama_double_rounding, llama_single_rounding)),
        ("TE#1132", _norm_case("single_vs_double_rounding (prod double)", llama_single_rounding, llama_double_rounding)),
        ("good", kcert.Case(name="addmm fused epilogue", ref=addmm_unfused, prod=addmm_fused, **linear)),
        ("good", kcert.Case(name="swiglu fused", ref=swiglu_unfused, prod=swiglu_fused, **glu)),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--replicates", type=int, default=1024)
    args = p.parse_args()
    print("| kind | pair | FAIL / WARN buckets | max raw ULP | max sign-aligned ULP | max prod-oracle ULP "
          "| bias (kcert) | bias (report's rules) | verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, case in pairs():
        cert = kcert.certify(case, replicates=args.replicates, max_replicates=args.replicates)
        b = cert.bias[0]
        raw, sa = b.tests
        prod_bias = np.nanmax(np.abs(np.concatenate([raw.prod_bias_ulp, sa.prod_bias_ulp])))
        print(f"| {kind} | {case.name} | {b.count(kcert.Verdict.FAIL)} / {b.count(kcert.Verdict.WARN)} of {b.buckets} "
              f"| {raw.effect_ulp.max():.3f} | {sa.effect_ulp.max():.3f} | {prod_bias:.3f} | {b.verdict.value} "
              f"| {rejudge(b, REPORT_RULES).verdict.value} | {cert.verdict.value} |")


if __name__ == "__main__":
    main()
