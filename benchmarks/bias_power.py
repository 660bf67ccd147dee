"""False alarms and power of the bias gate, by simulation (issue 4, item 5; docs/calibration.md).

Pure statistics: per-replicate bucket differences are drawn with numpy, accumulated with
kcert.stats.moments.MomentAccumulator in blocks of 64 replicates (the runner's block; the
single-replicate Welford path gives the same moments up to float64 rounding) and judged by
kcert.stats.bias.judge_buckets with the gate's thresholds, as kcert.gates.bias does for an output.

1. Null: no bias. G buckets of two elements whose references have opposite signs, so
   the gate's two statistics are the raw mean (e1 + e2) / 2 and the sign-aligned mean (e1 - e2) / 2
   (2G tests per output, as the gate counts them). Noise laws of unit variance: normal, Student
   t(5) (heavy-ish tail), a centred exponential (skewed) and a quantised law ({-1, 0, +1} with
   probabilities 0.1 / 0.8 / 0.1, the shape of one-ULP rounding differences). The ULP floor is set
   not to bind (ulp = 1e-12), so a FAIL is any bucket with |z| > z* and rho > s_min: the worst
   case for the familywise bound 2 * 2G * Phi(-z*) the gate reports (attribution through an oracle
   only removes FAILs, so it is off). For the quantised law the gate's FAIL rate with the ULP at its
   natural size (one step = 1 ULP, so c = 0.25 ULP binds) is reported too.
2. Power: one bucket per injected bias rho = mu / s (s: the per-replicate sd of the
   bucket mean), normal noise, R in {64, 256, 1024, 4096}; detection = FAIL. The predicted
   80 %-power point is rho = (z* + z_0.8) / sqrt(R). A second panel does the same in ULP with
   quantised noise (16 elements per bucket, each difference -1/0/+1 ULP, the bias shifting the
   probabilities), where the ULP floor c = 0.25 separates WARN from FAIL.
3. Harm boundary: R = (z* + z_0.8)^2 T replicates (kcert.stats.power.replicates_needed)
   and rho = T^-1/2, the case the rule R >~ (z* + z_(1-beta))^2 T is stated for, with the gate's
   s_min = T^-1/2 and with s_min = 0.

Writes docs/img/bias_null.png and docs/img/bias_power.png and prints Markdown tables.
Also printed: the exact null rates for Gaussian noise (z is Student t(R-1)) and, with
``--lattice N``, the quantised law's tail on N tests computed from multinomial counts.

Usage: python benchmarks/bias_power.py [--null-runs 300] [--power-runs 1000] [--buckets 256]
       [--replicates 1024] [--lattice 0] [--seed 0] [--out docs/img]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
from scipy.stats import beta, norm
from scipy.stats import t as student_t

from kcert.stats import power
from kcert.stats.bias import FAIL, WARN, judge_buckets
from kcert.stats.thresholds import BiasThresholds
from kcert.stats.moments import MomentAccumulator

BLOCK = 64  # kcert.execution.runner.BLOCK
HORIZON = 6.25e5  # kcert's default T
Z_LADDER = (3.0, 3.5, 4.0, 4.5, 5.0)
TINY_ULP = 1e-12  # the ULP floor never binds


def _laws():
    """name -> sampler(rng, shape) of mean-0, variance-1 element differences."""
    def quantised(rng, shape):
        u = rng.random(shape)
        return (np.where(u < 0.1, -1.0, 0.0) + np.where(u > 0.9, 1.0, 0.0)) / np.sqrt(0.2)

    return {
        "normal": lambda rng, shape: rng.standard_normal(shape),
        "t(5)": lambda rng, shape: rng.standard_t(5, shape) / np.sqrt(5 / 3),
        "skewed (exp - 1)": lambda rng, shape: rng.exponential(1.0, shape) - 1.0,
        "quantised {-1,0,1}": quantised,
    }


def accumulate(values: np.ndarray) -> MomentAccumulator:
    """Moments of (R, G) per-replicate bucket values, added block by block like the runner."""
    acc = MomentAccumulator.zeros(values.shape[1])
    for start in range(0, values.shape[0], BLOCK):
        acc.add(values[start:start + BLOCK])
    return acc


def judge(acc: MomentAccumulator, ulp, thresholds: BiasThresholds, horizon: float = HORIZON, statistic="raw"):
    return judge_buckets(statistic, acc.count, acc.mean, acc.std(), np.broadcast_to(ulp, acc.mean.shape),
                         thresholds, horizon)


def cp_upper(k: int, n: int, level: float = 0.95) -> float:
    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


# ---------------------------------------------------------------- 1. null


def null_study(runs: int, buckets: int, replicates: int, seed: int) -> dict:
    """Per law: familywise FAIL count at each z* of the ladder, all |z|, and (quantised) FAILs at c."""
    out = {}
    for i, (name, draw) in enumerate(_laws().items()):
        rng = np.random.default_rng([seed, 1, i])
        fails = np.zeros(len(Z_LADDER), np.int64)
        at_ulp = 0
        zs = []
        for _ in range(runs):
            e = draw(rng, (replicates, buckets, 2))
            raw = accumulate((e[..., 0] + e[..., 1]) / 2)
            aligned = accumulate((e[..., 0] - e[..., 1]) / 2)
            for j, z_star in enumerate(Z_LADDER):
                th = BiasThresholds(z_star=z_star)
                fails[j] += any((judge(a, TINY_ULP, th, statistic=s).verdict == FAIL).any()
                                for a, s in ((raw, "raw"), (aligned, "sign_aligned")))
            if name.startswith("quantised"):  # one quantisation step is one ULP: c = 0.25 ULP binds
                step = 1 / np.sqrt(0.2)
                at_ulp += any((judge(a, step, BiasThresholds()).verdict == FAIL).any() for a in (raw, aligned))
            zs.append(np.abs(np.concatenate([judge(a, TINY_ULP, BiasThresholds()).z for a in (raw, aligned)])))
        out[name] = {"fails": fails, "z": np.concatenate(zs), "at_ulp": at_ulp}
    return out


def null_tables(res: dict, runs: int, buckets: int, replicates: int) -> str:
    tests = 2 * buckets
    lines = [(f"False FAIL rate per output under the null (G = {buckets} buckets, {tests} tests, R = {replicates}, "
             f"{runs} outputs per law; ULP floor not binding, no attribution). Cells: outputs with any FAIL "
             "(rate; one-sided 95 % upper bound)."), "",
             "| law | " + " | ".join(f"z* = {z:g}" for z in Z_LADDER) + " |",
             "| --- | " + " | ".join("---" for _ in Z_LADDER) + " |",
             "| stated bound 2·2G·Φ(-z*) | " + " | ".join(f"{power.familywise_error_bound(tests, z):.2g}"
                                                       for z in Z_LADDER) + " |"]
    for name, r in res.items():
        cells = [f"{k}/{runs} ({k / runs:.2g}; <= {cp_upper(int(k), runs):.2g})" for k in r["fails"]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", (f"Per-test tail P(|z| > t) pooled over {runs * tests:,} null tests per law, against the normal "
              f"2Φ(-t) the bound uses and Student t(R-1):"), "",
              "| law | " + " | ".join(f"t = {z:g}" for z in Z_LADDER) + " |",
              "| --- | " + " | ".join("---" for _ in Z_LADDER) + " |",
              "| normal 2Φ(-t) | " + " | ".join(f"{2 * norm.sf(z):.2g}" for z in Z_LADDER) + " |",
              f"| Student t({replicates - 1}) | " + " | ".join(f"{2 * student_t.sf(z, replicates - 1):.2g}"
                                                             for z in Z_LADDER) + " |"]
    for name, r in res.items():
        z = r["z"]
        lines.append(f"| {name} | " + " | ".join(f"{np.mean(z > t):.2g} ({int(np.sum(z > t))})" for t in Z_LADDER)
                     + " |")
    q = [n for n in res if n.startswith("quantised")]
    if q:
        lines += ["", (f"Quantised law with its step = 1 ULP (c = 0.25 ULP binds): {res[q[0]]['at_ulp']}/{runs} "
                      "outputs FAIL.")]
    return "\n".join(lines)


# ---------------------------------------------------------------- 2. power


RHO_MULTIPLES = np.array([0.4, 0.55, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0])  # x rho80(R)


def power_study(runs: int, replicate_counts, seed: int) -> dict:
    """Normal noise, one bucket per rho; P(FAIL) per rho for each R."""
    th = BiasThresholds()
    out = {}
    for i, r in enumerate(replicate_counts):
        rng = np.random.default_rng([seed, 2, i])
        rho = RHO_MULTIPLES * power.min_detectable_effect(r, th.z_star, th.power)
        hits = np.zeros(rho.size)
        for _ in range(runs):
            values = rng.standard_normal((r, rho.size)) + rho  # s = 1
            hits += judge(accumulate(values), TINY_ULP, th).verdict == FAIL
        out[r] = (rho, hits / runs)
    return out


ULP_BIAS = np.array([0.0, 0.05, 0.1, 0.15, 0.2, 0.225, 0.25, 0.275, 0.3, 0.35, 0.4, 0.5])
ELEMENTS = 16


def ulp_study(runs: int, replicate_counts, seed: int) -> dict:
    """Quantised noise in ULP: each of 16 elements differs by -1/0/+1 ULP with probabilities
    0.25 - b/2, 0.5, 0.25 + b/2 (a bias of b ULP); P(FAIL) and P(WARN or FAIL) per b."""
    th = BiasThresholds()
    out = {}
    p = np.stack([0.25 - ULP_BIAS / 2, np.full(ULP_BIAS.size, 0.5), 0.25 + ULP_BIAS / 2], axis=1)
    for i, r in enumerate(replicate_counts):
        rng = np.random.default_rng([seed, 3, i])
        fail = alarm = np.zeros(ULP_BIAS.size)
        for _ in range(runs):
            counts = rng.multinomial(ELEMENTS, p, size=(r, ULP_BIAS.size))  # (R, buckets, 3): how many -1, 0, +1
            values = (counts[..., 2] - counts[..., 0]) / ELEMENTS
            v = judge(accumulate(values), 1.0, th).verdict
            fail = fail + (v == FAIL)
            alarm = alarm + (v >= WARN)
        out[r] = (fail / runs, alarm / runs)
    return out


BOUNDARY_MULTIPLES = np.array([0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35, 1.5])  # x T^-1/2


def rule_study(runs: int, horizons, seed: int) -> list[dict]:
    """Around the harm boundary rho = T^-1/2 with R = replicates_needed(T) (one bucket per multiple of
    T^-1/2): P(FAIL) with the gate's s_min = T^-1/2 and with s_min = 0 (the z test alone, which the
    rule describes)."""
    rows = []
    for i, horizon in enumerate(horizons):
        rng = np.random.default_rng([seed, 4, i])
        r = power.replicates_needed(horizon, 5.0, 0.8)
        rho = BOUNDARY_MULTIPLES * horizon ** -0.5
        gate = alone = np.zeros(rho.size)
        for _ in range(runs):
            acc = accumulate(rng.standard_normal((r, rho.size)) + rho)
            gate = gate + (judge(acc, TINY_ULP, BiasThresholds(), horizon).verdict == FAIL)
            alone = alone + (judge(acc, TINY_ULP, BiasThresholds(min_standardized_effect=0.0), horizon).verdict == FAIL)
        rows.append({"T": horizon, "R": r, "rho": rho, "gate": gate / runs, "z_alone": alone / runs})
    return rows


def exact_null_table(buckets: int, z_star: float = 5.0) -> str:
    """Gaussian noise, exactly: z = sqrt(R) mean / s is Student t(R-1), and the raw and sign-aligned
    means of two opposite-sign elements are independent, so P(any FAIL) = 1 - (1 - p)^(2G)."""
    tests = 2 * buckets
    bound = power.familywise_error_bound(tests, z_star)
    lines = [(f"Exact, Gaussian noise, z* = {z_star:g}, G = {buckets} ({tests} tests): the per-test rate is "
             f"P(|t_(R-1)| > z*), not 2Φ(-z*) = {2 * norm.sf(z_star):.3g}; the stated bound is {bound:.3g}."), "",
             "| R | per-test rate | / 2Φ(-z*) | P(any FAIL) per output | / stated bound |",
             "| --- | --- | --- | --- | --- |"]
    for r in (32, 64, 128, 256, 512, 1024, 4096, 16384):
        p = 2 * student_t.sf(z_star, r - 1)
        fwer = -np.expm1(tests * np.log1p(-p))
        lines.append(f"| {r} | {p:.3g} | {p / (2 * norm.sf(z_star)):.2f} | {fwer:.3g} | {fwer / bound:.2f} |")
    return "\n".join(lines)


def lattice_tail(tests: int, replicates: int, seed: int, thresholds=(4.0, 4.5, 5.0)) -> tuple[dict, str]:
    """The quantised law's raw statistic at R replicates from its counts: a bucket mean of two
    {-1, 0, +1} elements takes 5 values, so the R values are a multinomial draw and the moments the
    accumulator would compute follow from the counts (fast enough for 10^7 tests and more)."""
    rng = np.random.default_rng([seed, 5])
    values = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    probs = np.array([0.01, 0.16, 0.66, 0.16, 0.01])
    hits, done = np.zeros(len(thresholds)), 0
    while done < tests:
        c = rng.multinomial(replicates, probs, size=min(2_000_000, tests - done))
        mean = c @ values / replicates
        var = (c @ values**2 / replicates - mean**2) * replicates / (replicates - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.abs(np.sqrt(replicates) * mean / np.sqrt(var))
        hits += [np.sum(z > t) for t in thresholds]
        done += c.shape[0]
    cells = " | ".join(f"{h / done:.3g} ({int(h)}; t(R-1): {2 * student_t.sf(t, replicates - 1):.3g}, "
                       f"2Φ: {2 * norm.sf(t):.3g})" for h, t in zip(hits, thresholds))
    data = {"t": np.array(thresholds), "rate": hits / done, "tests": done}
    return data, (f"Quantised law, raw statistic, {done:,} tests at R = {replicates} from multinomial counts: "
            "P(|z| > t) (events; Student t; normal)\n\n| " + " | ".join(f"t = {t:g}" for t in thresholds)
            + " |\n| " + " | ".join("---" for _ in thresholds) + " |\n| " + cells + " |")


def power_tables(pw: dict, ulp: dict, rule: list[dict], runs: int) -> str:
    z80 = 5.0 + norm.ppf(0.8)
    lines = [(f"Power, normal noise, {runs} outputs per point (binomial se <= {0.5 / np.sqrt(runs):.1%}); "
             f"predicted 80 % point rho80 = (z* + z_0.8)/sqrt(R) = {z80:.3f}/sqrt(R):"), "",
             ("| R | rho80 predicted | P(FAIL) at 0.8·rho80 | at rho80 | at 1.2·rho80 "
             "| empirical 80 % point / predicted |"),
             "| --- | --- | --- | --- | --- | --- |"]
    for r, (rho, p) in pw.items():
        at = {m: p[np.argmin(np.abs(RHO_MULTIPLES - m))] for m in (0.8, 1.0, 1.2)}
        crossing = float(np.interp(0.8, p, RHO_MULTIPLES)) if np.all(np.diff(p) >= -0.05) else float("nan")
        lines.append(f"| {r} | {rho[RHO_MULTIPLES == 1.0][0]:.4g} | {at[0.8]:.3f} | {at[1.0]:.3f} | {at[1.2]:.3f} | "
                     f"{crossing:.3f} |")
    lines += ["", (f"Power in ULP, quantised noise ({ELEMENTS} elements per bucket, sd of the bucket mean "
                  f"{np.sqrt(0.5 / ELEMENTS):.3f} ULP), c = 0.25 ULP; cells P(FAIL) / P(WARN or FAIL):"), "",
              "| R | " + " | ".join(f"b = {b:g}" for b in ULP_BIAS) + " |",
              "| --- | " + " | ".join("---" for _ in ULP_BIAS) + " |"]
    for r, (fail, alarm) in ulp.items():
        lines.append(f"| {r} | " + " | ".join(f"{f:.2f} / {a:.2f}" for f, a in zip(fail, alarm)) + " |")
    lines += ["", ("Around the harm boundary rho = T^-1/2 with R = ceil((z* + z_0.8)^2 T) (kcert.stats.power); cells "
              "P(FAIL) with the gate's s_min = T^-1/2 / with s_min = 0 (the z test alone):"), "",
              "| T | R | " + " | ".join(f"rho = {m:g}·T^-1/2" for m in BOUNDARY_MULTIPLES) + " |",
              "| --- | --- | " + " | ".join("---" for _ in BOUNDARY_MULTIPLES) + " |"]
    for row in rule:
        lines.append(f"| {row['T']:g} | {row['R']} | "
                     + " | ".join(f"{g:.3f} / {a:.3f}" for g, a in zip(row["gate"], row["z_alone"])) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- plots


def plot_null(res: dict, runs: int, buckets: int, replicates: int, path: Path, lattice: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tests = 2 * buckets
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    grid = np.linspace(2.5, 5.2, 100)
    ax1.semilogy(grid, 2 * norm.sf(grid), "k-", lw=1.5, label="2Φ(-t) (the bound's per-test rate)")
    ax1.semilogy(grid, 2 * student_t.sf(grid, replicates - 1), "k--", lw=1, label=f"Student t({replicates - 1})")
    for name, r in res.items():
        z = r["z"]
        t = np.array(Z_LADDER)
        rate = np.array([np.mean(z > x) for x in t])
        ax1.semilogy(t[rate > 0], rate[rate > 0], "o-", ms=4, label=name)
    if lattice is not None:
        ax1.semilogy(lattice["t"], lattice["rate"], "x", color="darkred", ms=8,
                     label=f"quantised, {lattice['tests']:.0e} tests from counts")
    ax1.set(xlabel="threshold t", ylabel="P(|z| > t) per test",
            title=f"per-test tail, {runs * tests:,} null tests per law (R = {replicates})")
    ax1.legend(fontsize=8)
    z = np.array(Z_LADDER)
    ax2.semilogy(z, [power.familywise_error_bound(tests, x) for x in z], "k-", lw=1.5,
                 label="stated bound 2·2G·Φ(-z*)")
    fine = np.linspace(z[0], z[-1], 100)
    ax2.semilogy(fine, -np.expm1(tests * np.log1p(-2 * student_t.sf(fine, replicates - 1))), "k--", lw=1,
                 label="exact for Gaussian noise")
    for name, r in res.items():
        k = r["fails"]
        rate = k / runs
        upper = np.array([cp_upper(int(x), runs) for x in k])
        shown = rate > 0
        lower = np.array([0.0 if x == 0 else float(beta.ppf(0.025, x, runs - x + 1)) for x in k])
        upper2 = np.array([1.0 if x >= runs else float(beta.ppf(0.975, x + 1, runs - x)) for x in k])
        line, = ax2.semilogy(z[shown], rate[shown], "o-", ms=4, label=name)
        ax2.errorbar(z[shown], rate[shown], yerr=[rate[shown] - lower[shown], upper2[shown] - rate[shown]], fmt="none",
                     ecolor=line.get_color(), alpha=0.5, capsize=2)
        ax2.plot(z[~shown], upper[~shown], "v", color=line.get_color(), ms=6)
    ax2.set(xlabel="z*", ylabel="P(any FAIL) per output",
            title=f"any FAIL per output, G = {buckets} ({tests} tests), {runs} outputs/law")
    ax2.legend(fontsize=8, title="bars: 95 % intervals; ▼: upper bound where none was seen", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_power(pw: dict, ulp: dict, rule: list[dict], runs: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    z80 = 5.0 + norm.ppf(0.8)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.4))
    for r, (rho, p) in pw.items():
        line, = ax1.semilogx(rho, p, "o", ms=4, label=f"R = {r}")
        fine = np.geomspace(rho[0], rho[-1], 200)
        ax1.semilogx(fine, norm.sf(5.0 - np.sqrt(r) * fine), "-", lw=1, color=line.get_color())
        ax1.axvline(z80 / np.sqrt(r), color=line.get_color(), ls=":", lw=1)
    ax1.axhline(0.8, color="grey", lw=0.8)
    ax1.set(xlabel="injected bias rho = mu / s", ylabel="P(FAIL)",
            title=f"power vs rho ({runs} outputs per point); lines Φ(√R·rho - z*), dotted rho80 = {z80:.2f}/√R")
    ax1.title.set_fontsize(9)
    ax1.legend(fontsize=8)
    for r, (fail, alarm) in ulp.items():
        line, = ax2.plot(ULP_BIAS, fail, "o-", ms=4, label=f"R = {r}: FAIL")
        ax2.plot(ULP_BIAS, alarm, "s--", ms=3, color=line.get_color(), alpha=0.6, label=f"R = {r}: WARN or FAIL")
    ax2.axvline(0.25, color="k", ls=":", lw=1)
    ax2.text(0.255, 0.05, "c = 0.25 ULP", fontsize=8)
    ax2.set(xlabel="injected bias (ULP)", ylabel="probability",
            title=f"quantised ±1-ULP noise, {ELEMENTS} elements per bucket")
    ax2.title.set_fontsize(9)
    ax2.legend(fontsize=7)
    for row in rule:
        line, = ax3.plot(BOUNDARY_MULTIPLES, row["gate"], "o-", ms=4, label=f"T = {row['T']:g}, R = {row['R']}: gate")
        ax3.plot(BOUNDARY_MULTIPLES, row["z_alone"], "s--", ms=3, color=line.get_color(), alpha=0.6,
                 label=f"T = {row['T']:g}: z test alone (s_min = 0)")
    ax3.axhline(0.8, color="grey", lw=0.8)
    ax3.axvline(1.0, color="k", ls=":", lw=1)
    ax3.set(xlabel="injected bias rho / T^-1/2", ylabel="P(FAIL)",
            title="the rule R = (z* + z_0.8)^2 T at the harm boundary")
    ax3.title.set_fontsize(9)
    ax3.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--null-runs", type=int, default=300)
    p.add_argument("--power-runs", type=int, default=1000)
    p.add_argument("--buckets", type=int, default=256)
    p.add_argument("--replicates", type=int, default=1024, help="R of the null study")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lattice", type=int, default=0, metavar="N",
                   help="also measure the quantised law's tail on N tests from multinomial counts (e.g. 40000000)")
    p.add_argument("--out", default="docs/img", help="folder for bias_null.png and bias_power.png")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {_cpu()}, {os.cpu_count()} cores, numpy {np.__version__}")

    start = time.perf_counter()
    null = null_study(args.null_runs, args.buckets, args.replicates, args.seed)
    print(null_tables(null, args.null_runs, args.buckets, args.replicates))
    print()
    print(exact_null_table(args.buckets))
    lattice = None
    if args.lattice:
        lattice, text = lattice_tail(args.lattice, args.replicates, args.seed)
        print()
        print(text)
    plot_null(null, args.null_runs, args.buckets, args.replicates, out / "bias_null.png", lattice)
    t_null = time.perf_counter() - start

    start = time.perf_counter()
    counts = (64, 256, 1024, 4096)
    pw = power_study(args.power_runs, counts, args.seed)
    ulp = ulp_study(args.power_runs, counts[:3], args.seed)
    rule = rule_study(args.power_runs, (16, 64, 256), args.seed)
    t_power = time.perf_counter() - start
    print()
    print(power_tables(pw, ulp, rule, args.power_runs))
    plot_power(pw, ulp, rule, args.power_runs, out / "bias_power.png")
    print(f"\nwall time: null {t_null:.0f} s, power {t_power:.0f} s; plots in {out}/")


if __name__ == "__main__":
    main()
