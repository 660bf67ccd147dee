"""What kcert costs on top of running the kernels (issue: "a full certification at most 1.15x the
time of evaluating ref, prod and the float64 oracle R times"), and against a plain implementation.

For each case, side by side and interleaved, median of ``--repeats``:

(a) ``kcert.certify(case, replicates=R, max_replicates=R)``: everything (algebra gate, replicates,
    bias and variance gates, L0);
(r) the runner's replicate loop alone, as certify runs it (``Runner.run(0, R)``: draws, kernels,
    bucket labels, the per-replicate reduction and the accumulators);
(b) only drawing the probes (``kcert.execution.probes``, the runner's own rounding) and evaluating
    ref, prod and the oracle (real mode, as the runner does) R times on the same draws: the floor;
    in the same run, the seconds of one read of the outputs (``torch.sum`` of ref's, prod's and the
    oracle's, each once: the memory traffic any reduction of them pays) are timed apart, giving the
    second floor, (b) + one read;
(c) a plain implementation: a Python loop that stores every output of ref, prod and the oracle,
    then per-bucket means and z with numpy over the stored stack, and the variance tail with
    ``scipy.stats.genpareto.fit`` in a 1000-resample bootstrap. Its loop is run on fewer replicates
    (``--plain-replicates``, capped by ``--plain-memory``) and its bootstrap on fewer resamples
    (``--plain-resamples``, on the K of the first R replicates, which the plain loop would compute
    identically); both are scaled linearly to R replicates and 1000 resamples, and the table says so.
    It runs in every repeat, after (a): the speed-up is the median over repeats of (c) against
    (a) projected to R = 1024, each pair taken in the same repeat.

The per-replicate overhead is (r) / (b), timed side by side. The fixed part of (a), (a) - (r) in
the same repeat (the algebra gate's real-mode evaluations, the gates' statistics), does not grow
with R, so the ratio at the issue's R = 1024 follows from ``(fixed + 1024 * (r) / R) / (1024 *
(b) / R)`` in each repeat (the table gives the median over repeats), and the speed-up over (c)
compares both projected to R = 1024. (An earlier version
timed the fixed part in a separate run and subtracted it from (a): at small R on a shared machine
that difference of two large, noisy times was meaningless.) ``--batched`` adds, for the cases
whose kernels allow ``independent_leading_axis`` (here RMSNorm), a column with the batched certification.
``--torch-reduction`` adds (r) once more with the compiled reduction switched off (``KCERT_NO_FUSED=1``,
the torch path that runs without ``kcert[fast]`` or on an accelerator), timed in the same repeats.

Run: python benchmarks/overhead.py [--replicates R] [--repeats N] [--cases rmsnorm rope ...] [--threads T]
[--device cuda] [--size issue|daily]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import platform
import statistics
import time

import numpy as np
import scipy.stats
import torch

import kcert
from kcert.case import Labels
from kcert.catalog import attention as att
from kcert.catalog import moe
from kcert.catalog import norms
from kcert.catalog import rope
from kcert.controls import attention as c_att
from kcert.controls import moe as c_moe
from kcert.controls import norms as c_norms
from kcert.controls import rope as c_rope
from kcert.execution import probes
from kcert.execution.outputs import bucket_labels, make_layout
from kcert.execution.realmode import run_real
from kcert.execution.runner import Runner, as_outputs

ROUTER = dict(moe.QWEN2_MOE, norm_topk_prob=True)
DEVICE = torch.device("cpu")  # --device: where the probes, kernels and oracle run
BATCHABLE = {"rmsnorm"}  # kernels that treat a leading axis independently (the others index fixed axes)


def rms_norm_closed_1024(x, w, eps=norms.LLAMA_EPS):
    """F.rms_norm with its width closed over, as a module built for hidden size 1024 calls it."""
    return torch.nn.functional.rms_norm(x, [1024], w, eps)


def build_cases(size: str = "issue") -> dict[str, kcert.Case]:
    """The issue's four shapes ("issue"), each a catalogue reference against a positive control's
    kernel, and the daily-use issue's RMSNorm (2, 256, 1024) whose prod closes over its width; or
    ("daily") the four at daily-use sizes (RoPE (1, 8, 256, 128), attention (1, 8, 256, 64), router
    1024 x 64, RMSNorm (2, 256, 1024)), small enough to certify at R = 1024 in seconds."""
    daily = size == "daily"
    seq, heads = (256, 8) if daily else (1024, 32)
    rms_name = "rmsnorm_2x256x1024" if daily else "rmsnorm_8x1024x2048"
    rms = (norms.RMSNORM.case(rms_name, rms_norm_closed_1024, shape=(2, 256, 1024),
                              description="F.rms_norm(x, [1024], w) vs the catalogue RMSNorm") if daily else
           norms.RMSNORM.case(rms_name, c_norms.rms_norm_builtin, shape=(8, 1024, 2048),
                              description="F.rms_norm vs the catalogue RMSNorm"))
    cases = {
        "rmsnorm": rms,
        "rope": rope.ROPE_LLAMA2.case(
            f"rope_1x{heads}x{seq}x128", functools.partial(c_rope.rope_neox_complex, frequencies=rope.LLAMA2.frequencies),
            output_names=("q", "k"), batch=1, heads=heads, kv_heads=heads, seq=seq,
            description="NeoX RoPE as a complex product vs transformers' rotation (Llama 2)"),
        "attention": att.ATTENTION.case(f"causal_attention_1x8x{seq}x64", c_att._sdpa_causal_gqa, batch=1, heads=8,
                                        kv_heads=8, seq=seq, head_dim=64,
                                        description="F.scaled_dot_product_attention vs eager causal attention"),
        "router": moe.SOFTMAX_TOPK_ROUTER.case(
            f"router_{4 * seq}x64", functools.partial(c_moe._fused_topk_softmax, **ROUTER),
            ref=functools.partial(moe.softmax_topk_router, **ROUTER), tokens=4 * seq, n_experts=64,
            description="vLLM-style fused top-k softmax vs HF Mixtral/Qwen-MoE routing (64 experts, top-8)"),
    }
    if not daily:
        cases["rmsnorm_2x256x1024"] = build_cases("daily")["rmsnorm"]
    return cases


def oracle_outputs(case: kcert.Case, exact: dict) -> tuple:
    """The oracle's outputs as the runner computes them: the case's oracle, else ref in float64 real mode."""
    if case.oracle is not None:
        return as_outputs(case.oracle(**exact), "oracle", "")
    return as_outputs(run_real(lambda: case.ref(**exact), dtype=torch.float64, name="ref"), "oracle", "")


def read_once(outputs) -> float:
    """Seconds to read every tensor of ``outputs`` once (``torch.sum``: the memory traffic any
    reduction of them must pay)."""
    t = CLOCK()
    for x in outputs:
        x.sum()
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)
    return CLOCK() - t


def evaluate_only(case: kcert.Case, replicates: int, seed: int = 0) -> float:
    """(b): the runner's draws and kernel calls, nothing else; then one read of the outputs, whose
    seconds are returned (to be subtracted from the call's: (b) and (b) + one read in one run)."""
    weights = probes.draw_weights(case, seed, DEVICE)
    reading = 0.0
    for r in range(replicates):
        draw = probes.draw_inputs(case, seed, r, DEVICE)
        working = {**draw.working, **weights.working}
        exact = {**draw.exact, **weights.exact}
        with torch.no_grad():
            a = as_outputs(case.ref(**working), "ref", "")
            b = as_outputs(case.prod(**working), "prod", "")
            o = oracle_outputs(case, exact)
        reading += read_once((*a, *b, *o))
    return reading


def replicate_loop(case: kcert.Case, replicates: int, seed: int = 0) -> None:
    """(r): what certify does per replicate, nothing else."""
    Runner(case, seed, device=DEVICE).run(0, replicates)


@dataclasses.dataclass
class PlainTiming:
    replicates: int
    loop_s: float
    stats_s: float
    resamples: int
    bootstrap_s: float


def plain(case: kcert.Case, replicates: int, k: np.ndarray, resamples: int, seed: int = 0) -> PlainTiming:
    """(c): store everything, then numpy statistics, then a loop of scipy GPD fits."""
    weights = probes.draw_weights(case, seed, DEVICE)
    t0 = CLOCK()
    stored = []
    for r in range(replicates):
        draw = probes.draw_inputs(case, seed, r, DEVICE)
        working = {**draw.working, **weights.working}
        exact = {**draw.exact, **weights.exact}
        with torch.no_grad():
            a = as_outputs(case.ref(**working), "ref", "")
            b = as_outputs(case.prod(**working), "prod", "")
            o = oracle_outputs(case, exact)
        labels = []
        for i, x in enumerate(a):
            spec = case.bucket_spec(i, len(a))
            labels.append(bucket_labels(spec, draw.working, weights.working, x, "").cpu().numpy().copy()
                          if isinstance(spec, Labels) else None)
        stored.append(([x.double().cpu().numpy() for x in a], [x.double().cpu().numpy() for x in b],
                       [x.cpu().numpy() for x in o], labels))
    t1 = CLOCK()
    for i in range(len(stored[0][0])):
        ref = np.stack([s[0][i] for s in stored])
        prod = np.stack([s[1][i] for s in stored])
        oracle = np.stack([s[2][i] for s in stored])
        diff = prod - ref
        spec = case.bucket_spec(i, len(stored[0][0]))
        if isinstance(spec, Labels):
            lab = np.stack([s[3][i] for s in stored]).reshape(replicates, -1)
            g = int(lab.max()) + 1
            flat = diff.reshape(replicates, -1)
            means = np.stack([np.bincount(lab[r], flat[r], g) / np.maximum(np.bincount(lab[r], minlength=g), 1)
                              for r in range(replicates)])
        else:
            axes = make_layout(0, "", torch.from_numpy(ref[0]), torch.from_numpy(prod[0]), spec, "").bucket_axes
            rest = tuple(a + 1 for a in range(ref.ndim - 1) if a not in axes)
            means = diff.mean(axis=rest).reshape(replicates, -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.sqrt(replicates) * means.mean(0) / means.std(0, ddof=1)
        e_prod = np.abs(prod - oracle).reshape(replicates, -1).max(1)
        e_ref = np.abs(ref - oracle).reshape(replicates, -1).max(1)
        del z, e_prod, e_ref
    t2 = CLOCK()
    positive = k[np.isfinite(k) & (k > 0)]
    if positive.size < 30:  # too few to fit: time the fits on a stand-in sample of R/10 exceedances
        positive = np.random.default_rng(1).exponential(1.0, 10 * max(k.size // 10, 30))
    u = np.quantile(positive, 0.9)
    y = positive[positive > u] - u
    rng = np.random.default_rng(0)
    for _ in range(resamples):
        scipy.stats.genpareto.fit(rng.choice(y, y.size), floc=0)
    t3 = CLOCK()
    return PlainTiming(replicates, t1 - t0, t2 - t1, resamples, t3 - t2)


CLOCK = time.perf_counter  # --clock cpu: time.process_time, the process's CPU seconds (robust to other jobs)


def timed(fn) -> float:
    t = CLOCK()
    fn()
    if DEVICE.type == "cuda":  # kernels are asynchronous: wait for them before reading the clock
        torch.cuda.synchronize(DEVICE)
    return CLOCK() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=["rmsnorm", "rope", "attention", "router"])
    ap.add_argument("--size", choices=("issue", "daily"), default="issue",
                    help="the issue's shapes, or daily-use ones (build_cases)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="torch device for probes, kernels and oracle (e.g. cuda)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: elapsed seconds; cpu: the process's CPU seconds (on a machine shared with other "
                         "jobs, wall-clock ratios of work timed at different moments mostly measure the load)")
    ap.add_argument("--plain-replicates", type=int, default=8)
    ap.add_argument("--plain-memory", type=float, default=2.0, help="GiB the plain loop may store")
    ap.add_argument("--plain-resamples", type=int, default=50)
    ap.add_argument("--batched", action="store_true", help="also time certify with independent_leading_axis=True")
    ap.add_argument("--torch-reduction", action="store_true",
                    help="also time the replicate loop with the compiled reduction off (KCERT_NO_FUSED=1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    global DEVICE, CLOCK
    DEVICE = torch.device(args.device)
    if args.clock == "cpu":
        CLOCK = time.process_time
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available on this machine")
    cases = build_cases(args.size)
    unknown = set(args.cases) - set(cases)
    if unknown:
        ap.error(f"--cases: unknown {sorted(unknown)}; choose from {sorted(cases)}")
    R = args.replicates
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else (platform.processor() or platform.machine())
    print(f"{where}, torch {torch.__version__}, {args.threads} thread(s), "
          f"R = {R}, median of {args.repeats} repeats, interleaved, {args.clock} clock")
    rows = []
    for name in args.cases:
        case = cases[name]
        batched_case = dataclasses.replace(case, independent_leading_axis=True)
        t = {"a": [], "r": [], "b": [], "b_read": [], "batched": [], "torch": [], "plain": [], "speedup": []}
        cert = None
        evaluate_only(case, 1)  # warm-up: allocator, real-mode dispatch
        replicate_loop(case, 1)
        for _ in range(args.repeats):
            reading = []
            elapsed = timed(lambda: reading.append(evaluate_only(case, R)))
            t["b"].append(elapsed - reading[0])  # the floor
            t["b_read"].append(elapsed)  # the floor and one read of the outputs
            t["r"].append(timed(lambda: replicate_loop(case, R)))
            if args.torch_reduction:
                os.environ["KCERT_NO_FUSED"] = "1"
                try:
                    t["torch"].append(timed(lambda: replicate_loop(case, R)))
                finally:
                    del os.environ["KCERT_NO_FUSED"]
            start = CLOCK()
            cert = kcert.certify(case, replicates=R, max_replicates=R, device=DEVICE)
            t["a"].append(CLOCK() - start)
            if args.batched and name in BATCHABLE:
                t["batched"].append(timed(lambda: kcert.certify(batched_case, replicates=R, max_replicates=R, device=DEVICE)))
            # (c) in the same repeat, so that its speed-up is a ratio of figures taken side by side
            bytes_per = sum(np.prod(acc.shape) * 18 for acc in cert.outputs)  # two float64 copies + oracle
            plain_r = int(max(2, min(args.plain_replicates, R, args.plain_memory * 2**30 // bytes_per)))
            p = plain(case, plain_r, np.concatenate([v.amplification for v in cert.variance]), args.plain_resamples)
            t["plain"].append((p.loop_s + p.stats_s) * 1024 / plain_r + p.bootstrap_s * 1000 / p.resamples)
            t["speedup"].append(t["plain"][-1] / ((t["a"][-1] - t["r"][-1]) + 1024 * t["r"][-1] / R))
        med = {key: statistics.median(v) for key, v in t.items() if v}
        per_r = statistics.median(r / b for r, b in zip(t["r"], t["b"]))  # each repeat side by side
        per_torch = statistics.median(r / b for r, b in zip(t["torch"], t["b"])) if t["torch"] else None
        fixed = max(med["a"] - med["r"], 0.0)
        plain_1024 = med["plain"]
        certify_1024 = fixed + 1024 * med["r"] / R
        # per repeat, side by side, then the median
        at_1024 = statistics.median(((a - r) + 1024 * r / R) / (1024 * b / R) for a, r, b in zip(t["a"], t["r"], t["b"]))
        at_1024_read = statistics.median(((a - r) + 1024 * r / R) / (1024 * b / R)
                                         for a, r, b in zip(t["a"], t["r"], t["b_read"]))
        per_r_read = statistics.median(r / b for r, b in zip(t["r"], t["b_read"]))
        rows.append((name, med, per_r, fixed, at_1024, p, plain_1024, certify_1024, cert.verdict.value, per_torch,
                     med["speedup"], at_1024_read, per_r_read))
        print(f"{name}: (a) {med['a']:.1f} s, (r) {med['r']:.1f} s, (b) {med['b']:.1f} s, per replicate (r)/(b) "
              f"{per_r:.3f} (against (b) + one read {per_r_read:.3f}), fixed {fixed:.1f} s, (a)/(b) at R=1024 "
              f"{at_1024:.3f} (against (b) + one read {at_1024_read:.3f}); at R=1024 plain {plain_1024:.0f} s "
              f"(loop at {plain_r} replicates, {p.resamples} resamples, scaled), certify {certify_1024:.0f} s"
              + (f"; batched {med['batched']:.1f} s" if "batched" in med else "")
              + (f"; per replicate with the torch reduction {per_torch:.3f}" if per_torch is not None else ""), flush=True)
    print()
    print("| case | (b) evaluate s | (b) + one read s | (r) replicate loop s | per-replicate (r)/(b) | "
          "per-replicate (r)/((b) + one read) | (a) certify s | fixed part s | "
          "**(a)/(b) at R = 1024** | **(a)/((b) + one read) at R = 1024** | (c) plain at R = 1024, s | "
          "certify at R = 1024, s | speed-up over plain |"
          + (" batched certify s |" if args.batched else "") + (" per replicate, torch reduction |" if args.torch_reduction else ""))
    print("| --- " * (13 + args.batched + args.torch_reduction) + "|")
    for (name, med, per_r, fixed, at_1024, p, plain_1024, certify_1024, verdict, per_torch, speedup, at_1024_read,
         per_r_read) in rows:
        print(f"| {cases[name].name} ({verdict}) | {med['b']:.2f} | {med['b_read']:.2f} | {med['r']:.2f} | {per_r:.3f} | "
              f"{per_r_read:.3f} | {med['a']:.1f} | {fixed:.1f} | **{at_1024:.3f}** | **{at_1024_read:.3f}** | "
              f"{plain_1024:.0f} (loop at {p.replicates}, {p.resamples} fits) | {certify_1024:.0f} | "
              f"{speedup:.1f}x |"
              + ((f" {med['batched']:.1f} |" if "batched" in med else " - |") if args.batched else "")
              + (f" {per_torch:.3f} |" if per_torch is not None else ""))

if __name__ == "__main__":
    main()
