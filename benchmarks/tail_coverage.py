"""Coverage and error rates of the variance gate's tail-ratio bound, by simulation.

The gate compares prod's and ref's per-replicate errors (in harm units) through their T-call return
levels: ``A_T = max(0, r_prod - 1) / r_ref`` and U, its profile-likelihood upper bound
(kcert.gates.variance.judge_errors, kcert.stats.tail_ratio). This script measures, with the gate as
shipped:

1. **Known laws.** Both sides draw errors from one law (the six laws of the earlier coverage study:
   exponential, half-normal, lognormal s = 0.5, GPD xi = +0.1, GPD xi = -0.2, exponential with 60 %
   zeros), independently (the bound's model) or through a Gaussian copula with correlation 0.8
   (shared inputs). Errors are scaled far above the one-unit slack, so the rule is equivariant in
   prod's scale and one set of runs gives every rate: coverage P(U >= A_T) (nominal: one-sided
   1 - alpha with alpha = 0.00135/3 over three planned looks, or 0.00135 at one look), false PASS at a
   true A_T = 2.05 (P(2.05 U_1 <= 2)), false FAIL at a true A_T = 5 (the estimate above 10), PASS rate
   at A_T = 1 and 1.2.
2. **Shape mismatch.** prod's law heavier in shape than ref's (GPD xi = +0.1 against exponential,
   exponential against half-normal): the common-shape assumption does not hold; measured coverage.
3. **Real kernel pairs** (``--real``): per-replicate errors of benign pairs from the control suite
   (benchmarks/data/real_errors.npz, made by ``--collect``), resampled with replacement in pairs; the
   share of resamples that PASS, WARN and FAIL at R = 1024 (their truth is "not amplified": prod no
   worse than ref on the data).

Usage: python benchmarks/tail_coverage.py [--runs 1000] [--workers 2] [--seed 0] [--looks 3]
       [--replicates 1024 4096] [--laws] [--mismatch] [--real] [--collect | --collect-from CONTROLS_JSON]
"""

from __future__ import annotations

import argparse
import math
import os
import time
import zlib
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy import stats

T = 6.25e5
SCALE = 1e6  # errors in harm units far above the slack of 1: the rule is then equivariant in prod's scale
DATA = os.path.join(os.path.dirname(__file__), "data", "real_errors.npz")

# law -> (isf: upper-tail probability -> value, share of exact zeros)
LAWS = {
    "exponential": (lambda p: stats.expon.isf(p), 0.0),
    "half-normal": (lambda p: stats.halfnorm.isf(p), 0.0),
    "lognormal s=0.5": (lambda p: stats.lognorm.isf(p, 0.5), 0.0),
    "GPD xi=+0.1": (lambda p: stats.genpareto.isf(p, 0.1), 0.0),
    "GPD xi=-0.2": (lambda p: stats.genpareto.isf(p, -0.2), 0.0),
    "exponential, 60% zeros": (lambda p: stats.expon.isf(p), 0.6),
}
MISMATCH = (("GPD xi=+0.1", "exponential"), ("exponential", "half-normal"), ("lognormal s=0.5", "half-normal"))
REAL = ("compiled_hf_llama_mlp", "compiled_hf_mean_cross_entropy", "compiled_attention", "compiled_hf_rotary",
        "hf_attention_eager_vs_sdpa", "hf_qwen2_attention_eager_vs_sdpa", "hf_mistral_attention_eager_vs_sdpa",
        "hf_gemma_attention_eager_vs_sdpa",
        "compiled_token_cross_entropy", "llama3_scaling_clamped", "cos_sin_float32_cache")


def _pair(rng, n, law_a, law_b, rho):
    z = rng.standard_normal((2, n))
    z[1] = rho * z[0] + math.sqrt(1.0 - rho * rho) * z[1]
    out = []
    for law, row in ((law_a, z[0]), (law_b, z[1])):
        isf, zeros = LAWS[law]
        x = isf(stats.norm.sf(row))
        if zeros:
            x[rng.random(n) < zeros] = 0.0
        out.append(SCALE * x)
    return out


def true_ratio(law_a: str, law_b: str) -> float:
    (isf_a, z_a), (isf_b, z_b) = LAWS[law_a], LAWS[law_b]
    return isf_a(1.0 / (T * (1 - z_a))) / isf_b(1.0 / (T * (1 - z_b)))


def _one(args):
    """One run of the gate's decision statistics: the interval U rests on and the common-shape estimate
    FAIL rests on (kcert.gates.variance.judge_errors adds diagnostics around them, which cost time and
    change no verdict at these error scales)."""
    law_a, law_b, rho, r, run, seed, looks = args
    from kcert.stats.thresholds import VarianceThresholds
    from kcert.stats.tail_ratio import exceedances_of, tail_ratio_interval

    from kcert.gates.variance import fail_estimate

    t = VarianceThresholds()
    key = [seed, run, r, int(rho * 100)] + [list(LAWS).index(law_a), list(LAWS).index(law_b)]
    rng = np.random.default_rng(key)
    a, b = _pair(rng, r, law_a, law_b, rho)
    sides = [exceedances_of(x, t.threshold_quantile, t.min_exceedances) for x in (a, b)]
    iv = tail_ratio_interval(*sides, T, t.alpha / looks, slack=t.slack, heterogeneity_level=t.heterogeneity_level)
    return iv.upper, fail_estimate(iv, t), iv.model != "common shape"


def _rates(rows, truth):
    u = np.array([x[0] for x in rows]) / truth
    est = np.array([x[1] for x in rows]) / truth
    separate = np.mean([x[2] for x in rows])
    return {"coverage": np.mean(u >= 1.0), "misses": int(np.sum(u < 1.0)), "median": np.median(u),
            "false_pass": np.mean(2.05 * u <= 2.0), "false_fail": np.mean(5.0 * est > 10.0),
            "pass_1": np.mean(u <= 2.0), "pass_12": np.mean(1.2 * u <= 2.0), "separate": separate}


def laws_table(runs, workers, seed, looks, replicates, pairs, title):
    alpha = 0.00135 / looks
    print(f"\n{title}: {runs} runs per row, T = {T:g}, alpha = 0.00135/{looks} per bound "
          f"(nominal coverage {1 - alpha:.5%}), seed {seed}\n")
    print("| prod law | ref law | dependence | R | coverage of U (misses) | median U / A_T | false PASS at A_T = 2.05 "
          "| false FAIL at A_T = 5 | PASS rate at A_T = 1 | PASS rate at A_T = 1.2 | separate shapes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with ProcessPoolExecutor(workers) as pool:
        for law_a, law_b, rho in pairs:
            truth = true_ratio(law_a, law_b)
            for r in replicates:
                rows = list(pool.map(_one, [(law_a, law_b, rho, r, i, seed, looks) for i in range(runs)], chunksize=4))
                m = _rates(rows, truth)
                dep = "independent" if rho == 0 else f"copula rho {rho:g}"
                print(f"| {law_a} | {law_b} | {dep} | {r} | {m['coverage']:.2%} ({m['misses']}) | {m['median']:.2f} | "
                      f"{m['false_pass']:.4f} | {m['false_fail']:.4f} | {m['pass_1']:.3f} | {m['pass_12']:.3f} | "
                      f"{m['separate']:.2f} |", flush=True)


def collect(names=REAL, replicates=2048):
    """Certify the named controls once (seed 0) and keep their per-replicate errors in harm units."""
    import kcert
    from kcert.controls.registry import all_controls

    controls = {c.name: c for c in all_controls()}
    arrays = {}
    for name in names:
        cert = kcert.certify(controls[name].build(), replicates=replicates, max_replicates=replicates, seed=0,
                             algebra_proof=False)
        for v in cert.variance:
            arrays[f"{name}|{v.output}|prod"] = v.error_prod / v.epsilon
            arrays[f"{name}|{v.output}|ref"] = v.error_ref / v.epsilon
        print(f"collected {name}: {[v.output for v in cert.variance]}", flush=True)
    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    np.savez_compressed(DATA, **arrays)


def collect_from(path, names=REAL):
    """The same arrays from a ``kcert controls --json`` file (every replicate the suite ran), no new run."""
    import json

    with open(path, encoding="utf-8") as f:
        controls = {c["name"]: c for c in json.load(f)["controls"]}
    arrays = {}
    for name in names:
        cert = controls[name]["certificate"]
        for v in cert["gates"]["variance"]["outputs"]:
            e = v["errors"]
            eps = np.array(e["epsilon"], dtype=float)
            for side in ("prod", "ref"):
                arrays[f"{name}|{v['output']}|{side}"] = np.array(e[side], dtype=float) / eps
        print(f"collected {name}: {[v['output'] for v in cert['gates']['variance']['outputs']]}", flush=True)
    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    np.savez_compressed(DATA, **arrays)


def _real_one(args):
    key, r, run, seed, looks = args
    from kcert.stats.thresholds import VarianceThresholds
    from kcert.gates.variance import judge_errors

    data = np.load(DATA)
    a, b = data[f"{key}|prod"], data[f"{key}|ref"]
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    rng = np.random.default_rng([seed, run, r, zlib.crc32(key.encode())])  # str hash() is salted per process
    idx = rng.integers(0, a.size, r)
    v = judge_errors(a[idx], b[idx], T, VarianceThresholds(bootstrap=2), seed=run, planned_looks=looks)
    return v.verdict.value, v.upper_bound


def real_table(runs, workers, seed, looks, r=1024):
    data = np.load(DATA)
    keys = sorted({k.rsplit("|", 1)[0] for k in data.files})
    print(f"\nreal kernel pairs, resampled in pairs with replacement: {runs} runs of R = {r}, alpha = 0.00135/{looks}\n")
    print("| pair | output | prod median / max (harm ULP) | ref median / max | prod closer | PASS | WARN | FAIL | median U |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with ProcessPoolExecutor(workers) as pool:
        for key in keys:
            a, b = data[f"{key}|prod"], data[f"{key}|ref"]
            keep = np.isfinite(a) & np.isfinite(b)
            a, b = a[keep], b[keep]
            rows = list(pool.map(_real_one, [(key, r, i, seed, looks) for i in range(runs)], chunksize=4))
            verdicts = [x[0] for x in rows]
            us = [x[1] for x in rows if x[1] is not None]
            name, output = key.split("|")
            print(f"| {name} | {output} | {np.median(a):.2f} / {a.max():.2f} | {np.median(b):.2f} / {b.max():.2f} | "
                  f"{np.mean(a < b):.2f} | {verdicts.count('PASS') / runs:.3f} | {verdicts.count('WARN') / runs:.3f} | "
                  f"{verdicts.count('FAIL') / runs:.3f} | {np.median(us) if us else float('nan'):.2f} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--looks", type=int, default=3, help="planned looks alpha is split over (the default run: 3)")
    p.add_argument("--replicates", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--laws", action="store_true", help="known laws, same law on both sides")
    p.add_argument("--dependent", action="store_true", help="known laws through a copula with correlation 0.8")
    p.add_argument("--mismatch", action="store_true", help="prod's law heavier in shape than ref's")
    p.add_argument("--real", action="store_true", help="resampled real kernel pairs (needs --collect once)")
    p.add_argument("--collect", action="store_true", help="certify the real pairs and save their errors")
    p.add_argument("--collect-from", metavar="CONTROLS_JSON",
                   help="save the real pairs' errors from a `kcert controls --json` file instead of certifying")
    args = p.parse_args(argv)
    started = time.time()
    if args.collect:
        collect()
    if args.collect_from:
        collect_from(args.collect_from)
    if args.laws:
        laws_table(args.runs, args.workers, args.seed, args.looks, args.replicates,
                   [(law, law, 0.0) for law in LAWS], "same law on both sides, independent")
    if args.dependent:
        laws_table(args.runs, args.workers, args.seed, args.looks, args.replicates,
                   [(law, law, 0.8) for law in LAWS], "same law on both sides, copula correlation 0.8")
    if args.mismatch:
        laws_table(args.runs, args.workers, args.seed, args.looks, args.replicates,
                   [(a, b, 0.0) for a, b in MISMATCH], "prod's law heavier in shape than ref's")
    if args.real:
        real_table(args.runs, args.workers, args.seed, args.looks)
    print(f"\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
