"""Does a certificate predict training? The study of docs/training.md (issue 16).

For each control below: certify it (kcert's defaults, the control's declared replicates, seed 0),
then ``kcert.training.compare`` it (the default model: hidden 128, 2 layers, batch 16 x 64 tokens,
300 AdamW steps, seeds 0..7), and tabulate kcert's verdict, what it says training should show
(FAIL: "training differs", PASS: "indistinguishable"), what training showed, and the predicted
and measured drift of the norm gains. Verdicts are read from the certificates at run time.

``layernorm_stats_low_precision`` (float16) is left out: float16 matrix products on this CPU cost
about 10x bfloat16's (about 200 s per 300-step run against 18 s), more than the study's budget.

Runs that are the same computation (a reference kernel shared by several controls of one
operator, a mirror pair) are trained once (``compare(cache=...)``). ``--workers 2`` splits the
seeds over two processes (each on one thread): their checkpoints are merged and every comparison
is then rebuilt from the merged file (``resume``), so the result is the one a single process
gives, bit for bit.

Writes docs/img/training_*.png, replaces the generated tables of docs/training.md (between the
``<!-- study:... -->`` markers) with ``--write-docs``, and prints the tables and the timings
(wall and CPU seconds per control and in total).

Usage: python benchmarks/training.py [--steps 300] [--seeds 8] [--workers 1] [--only NAME ...]
       [--checkpoints DIR] [--write-docs] [--out docs/img] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import re
import tempfile
import time
from pathlib import Path

import numpy as np

# (control, its role in the study)
STUDY = (
    ("gemma_one_plus_w_bf16", "bias negative"),
    ("bf16_truncation_not_rne", "bias negative"),
    ("hf_double_rounding_te1132", "bias negative"),
    ("mean_square_in_bf16_outliers", "bias negative"),
    ("silu_one_minus_sigmoid_bf16", "bias negative"),
    ("inv_freq_rounded_bf16", "bias negative"),
    ("splitk_partials_bf16", "variance negative"),
    ("llama_kernel_on_gemma_weights", "algebra negative (anchor)"),
    ("single_rounding_prod_vs_hf_double", "positive (bias attributed to ref)"),
    ("gemma_rms_norm_fused_rewrite", "positive"),
    ("swiglu_fused_silu_mul", "positive"),
    ("splitk_fp32_workspace", "positive"),
    ("neox_complex_formulation", "positive"),
)
PLOTTED = ("bf16_truncation_not_rne", "gemma_one_plus_w_bf16", "hf_double_rounding_te1132", "llama_kernel_on_gemma_weights")
ROOT = Path(__file__).resolve().parent.parent


def _controls(names):
    from kcert.controls.registry import all_controls

    known = {c.name: c for c in all_controls()}
    missing = [n for n in names if n not in known]
    if missing:
        raise SystemExit(f"unknown controls: {missing}")
    return [known[n] for n in names]


def _config(steps: int):
    from kcert.training import TrainingConfig

    return TrainingConfig(steps=steps)


def _train_part(names, seeds, steps, folder) -> float:
    """A worker: train ``seeds`` of every control, one checkpoint per control; returns CPU seconds."""
    import torch

    from kcert.training import compare

    torch.set_num_threads(1)
    started = time.process_time()
    cache: dict = {}
    for control in _controls(names):
        compare(control.build(), seeds=seeds, config=_config(steps), predict=False, cache=cache,
                checkpoint=str(Path(folder) / f"{control.name}.part{seeds[0]}.json"), resume=True)
    return time.process_time() - started


def _merge(folder: Path, name: str, parts: list[list[int]]) -> None:
    """Fold the workers' checkpoints of one control into ``name.json`` (the seeds are disjoint)."""
    path = folder / f"{name}.json"
    merged = json.loads(path.read_text()) if path.exists() else None
    for seeds in parts:
        doc = json.loads((folder / f"{name}.part{seeds[0]}.json").read_text())
        if merged is None:
            merged = doc
        else:
            merged["seeds"].update(doc["seeds"])
    path.write_text(json.dumps(merged))


def run_study(names, steps: int, seeds: int, workers: int, checkpoints: str | None):
    """(control, role, certificate, comparison, wall s, cpu s) per control, and the totals.
    ``checkpoints``: a folder that keeps every finished seed (a rerun trains only what is missing;
    clear it when a kernel or the model changed)."""
    import torch

    from kcert.certification import certify
    from kcert.training import compare

    roles = dict(STUDY)
    controls = _controls(names)
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kcert-training-") as tmp:
        folder = Path(checkpoints or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        worker_cpu = 0.0
        if workers > 1:
            parts = [list(range(seeds))[i::workers] for i in range(workers)]
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                worker_cpu = sum(pool.starmap(_train_part, [(names, p, steps, str(folder)) for p in parts]))
            for control in controls:
                _merge(folder, control.name, parts)
        cache: dict = {}
        for control in controls:
            t0, c0 = time.perf_counter(), time.process_time()
            case = control.build()
            cert = certify(case, control.replicates, seed=0)
            certified = time.perf_counter() - t0
            result = compare(case, seeds=seeds, config=_config(steps), certificate=cert, cache=cache,
                             checkpoint=str(folder / f"{control.name}.json"), resume=True)
            rows.append((control, roles.get(control.name, control.kind), cert, result,
                         time.perf_counter() - t0, certified))
            print(f"{control.name}: {cert.verdict.value} -> {result.verdict.value} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    totals = {"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu_started + worker_cpu,
              "workers": workers, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "load": (load_start, os.getloadavg()[0])}
    return rows, totals


# --- tables ------------------------------------------------------------------------------------------


def _g(x, digits=2):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}g}"


def _agrees(result) -> str:
    expected = result.expected_from_certificate
    got = result.verdict.value
    if expected is None or expected.startswith("review"):
        return "(WARN: no prediction)"
    return "yes" if expected == got else "**no**"


def verdict_table(rows) -> str:
    out = ["| control | role | kcert (algebra / bias / variance) | kcert says training | training shows | verdict predicted it? "
           "| final loss prod - ref [95% CI] (seed spreads) | loss curve prod - ref | mean gain drift [95% CI] "
           "| drift pattern p | arms apart |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for control, role, cert, r, _, _ in rows:
        g = cert.gates
        f, c, m = r.final_loss, r.loss_curve, r.drift.mean
        spreads = "" if math.isnan(f.in_seed_spreads) else f" ({f.in_seed_spreads:+.2g})"
        out.append(
            f"| `{control.name}` | {role} | **{cert.verdict.value}** ({g['algebra'].value} / {g['bias'].value} / "
            f"{g['variance'].value}) | {r.expected_from_certificate} | **{r.verdict.value}** | {_agrees(r)} "
            f"| {f.mean:+.2g} [{_g(f.low)}, {_g(f.high)}]{spreads} | {c.mean:+.2g} (p {_g(r.adjusted_p['loss_curve'])}) "
            f"| {m.mean:+.2g} [{_g(m.low)}, {_g(m.high)}] (p {_g(r.adjusted_p['mean_drift'])}) "
            f"| {_g(r.adjusted_p['drift'])} | {_g(float(np.median([s.distance for s in r.runs])))} |")
    return "\n".join(out)


def prediction_table(rows) -> str:
    out = ["| control | significant buckets (certificate) | mean relative gain error | predicted drift RMS "
           "(channels) | measured coherent drift RMS | seed noise RMS | slope measured / predicted [95% CI] "
           "| gains travelled (ULPs) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for control, _, cert, r, _, _ in rows:
        p = r.prediction
        if not p.available:
            out.append(f"| `{control.name}` | {r.certificate.significant} | - | not derived ({r.slot} slot) | - | - | - | - |")
            continue
        if p.channels == 0:
            out.append(f"| `{control.name}` | {r.certificate.significant} | - | 0 (no significant bucket) | - | - | - | - |")
            continue
        s = p.slope
        out.append(f"| `{control.name}` | {r.certificate.significant} | {p.mean_relative_error:+.2g} "
                   f"| {_g(p.predicted_rms)} ({p.channels}) | {_g(p.coherent_rms)} | {_g(p.noise_rms)} "
                   f"| {s.mean:+.2g} [{_g(s.low)}, {_g(s.high)}] | {_g(p.moved_ulps)} |")
    return "\n".join(out)


def timing_table(rows, totals) -> str:
    """Per control: the runs it added (a run shared with an earlier control, or a mirror pair's, is
    counted once, where it was first trained) and their wall seconds as recorded while they ran,
    and the certificate's seconds; then the totals of this invocation."""
    out = ["| control | runs trained (of 16) | training s (as recorded) | certificate s |", "| --- | --- | --- | --- |"]
    seen: set = set()
    trained_total = 0.0
    for control, _, _, r, _, certified in rows:
        new = [arm for run in r.runs for arm in (run.ref, run.prod)
               if (arm.arm, float(arm.seconds), float(np.nansum(arm.train_loss))) not in seen]
        seen.update((arm.arm, float(arm.seconds), float(np.nansum(arm.train_loss)))
                    for run in r.runs for arm in (run.ref, run.prod))
        seconds = sum(arm.seconds for arm in new)
        trained_total += seconds
        out.append(f"| `{control.name}` | {len(new)} | {seconds:.0f} | {certified:.0f} |")
    out.append(f"| **total** | | **{trained_total:.0f}** | |")
    return "\n".join(out) + (
        f"\n\nThis invocation: {totals['wall_s'] / 60:.1f} min wall, {totals['cpu_s'] / 60:.1f} min of CPU over all "
        f"processes ({totals['workers']} worker(s), one thread each).")


# --- figures -----------------------------------------------------------------------------------------


def summary_figure(rows) -> bytes:
    """Per control: the final-loss, loss-curve and mean-gain-drift differences in seed-to-seed
    spreads (95 % intervals), coloured by what training showed; labelled with kcert's verdict."""
    from matplotlib.lines import Line2D

    from kcert.report import training_plots as plots

    fig = plots._figure(13, 0.4 * len(rows) + 1.4)
    left, middle, right = fig.subplots(1, 3, sharey=True)
    colours = {"training differs": plots.PROD, "indistinguishable at this horizon": "#1a7f37",
               "inconclusive": "#9a6700"}
    labels = []
    for i, (control, _, cert, r, _, _) in enumerate(rows[::-1]):
        colour = colours[r.verdict.value]
        labels.append(f"{control.name} (kcert {cert.verdict.value})")
        for ax, stat in ((left, r.final_loss), (middle, r.loss_curve), (right, r.drift.mean)):
            spread = stat.seed_spread if stat.seed_spread > 0 else 1.0
            ax.errorbar(stat.mean / spread, i, xerr=[[(stat.mean - stat.low) / spread],
                                                     [(stat.high - stat.mean) / spread]],
                        fmt="o", color=colour, capsize=2, markersize=4)
    for ax, title in ((left, "final loss"), (middle, "mean loss-curve difference"), (right, "mean norm-gain drift")):
        ax.set_xlabel("prod - ref, in seed-to-seed spreads (95% CI)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.axvline(0, color=plots.GREY, linewidth=0.8)
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_title(title, fontsize=9)
        plots._style(ax)
    left.set_yticks(range(len(labels)), labels, fontsize=8)
    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=f"training: {v}") for v, c in colours.items()]
    right.legend(handles=handles, frameon=False, fontsize=7, loc="lower right")
    return plots._png(fig)


def _t_path(differences: np.ndarray) -> np.ndarray:
    """Paired t statistic over seeds at every evaluation (differences: (seeds, evaluations))."""
    k = differences.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = differences.mean(axis=0) / (differences.std(axis=0, ddof=1) / np.sqrt(k))
    return np.where(np.isfinite(t), t, 0.0)


def _mean_gain(arm) -> np.ndarray:
    """The mean over every norm channel's gain at each evaluation of one arm."""
    gains = [v for k, v in sorted(arm.norm_trajectory.items()) if k.endswith("_w")]
    return np.concatenate(gains, axis=1).mean(axis=1)


def horizon_figure(rows) -> bytes:
    """The paired t statistic of the held-out loss and of the mean gain drift at every evaluation:
    a coherent effect grows like sqrt(steps), noise does not (the argument kcert rests on)."""
    from kcert.report import training_plots as plots

    fig = plots._figure(10, 4.2)
    left, right = fig.subplots(1, 2)
    for control, role, cert, r, _, _ in rows:
        if not all(run.ref.finite and run.prod.finite for run in r.runs):
            continue
        steps = r.runs[0].ref.eval_steps
        loss = np.stack([run.prod.eval_loss - run.ref.eval_loss for run in r.runs])
        drift = np.stack([_mean_gain(run.prod) - _mean_gain(run.ref) for run in r.runs])
        style = "-" if "negative" in role else "--"
        colour = plots.PROD if cert.verdict.value == "FAIL" else ("#1a7f37" if cert.verdict.value == "PASS" else "#9a6700")
        for ax, series in ((left, loss), (right, drift)):
            ax.plot(steps, _t_path(series), style, color=colour, linewidth=1, alpha=0.8, marker="o", markersize=2)
        right.annotate(control.name, (steps[-1], _t_path(drift)[-1]), fontsize=6, color=colour,
                       xytext=(3, 0), textcoords="offset points", va="center")
    for ax, title in ((left, "held-out loss, prod - ref"), (right, "mean norm-gain drift, prod - ref")):
        ax.set_yscale("symlog", linthresh=3)
        for level in (-2.36, 2.36):  # t_{0.975, 7}
            ax.axhline(level, color=plots.GREY, linestyle=":", linewidth=0.8)
        ax.set_xlabel("step")
        ax.set_ylabel("paired t over seeds")
        ax.set_title(f"{title} (solid: negatives; red: kcert FAIL)", fontsize=9)
        plots._style(ax)
    return plots._png(fig)


def write_figures(rows, out: Path) -> list[Path]:
    from kcert.report import training_plots as plots

    out.mkdir(parents=True, exist_ok=True)
    written = [out / "training_summary.png", out / "training_horizon.png"]
    written[0].write_bytes(summary_figure(rows))
    written[1].write_bytes(horizon_figure(rows))
    for control, _, _, r, _, _ in rows:
        if control.name in PLOTTED:
            for kind, draw in (("loss", plots.loss_curves), ("drift", plots.drift)):
                path = out / f"training_{kind}_{control.name}.png"
                path.write_bytes(draw(r))
                written.append(path)
    return written


SECTIONS = ("verdicts", "prediction", "timing")


def _marker(key: str, text: str, path: Path) -> re.Pattern:
    pattern = re.compile(rf"(<!-- study:{key} -->\n)(?:.*?\n)?(<!-- /study:{key} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no <!-- study:{key} --> ... <!-- /study:{key} --> markers")
    return pattern


def write_docs(sections: dict[str, str], path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for key, body in sections.items():
        pattern = _marker(key, text, path)
        text = pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)
    path.write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the seeds (one thread each)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these controls only")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--write-docs", action="store_true", help="replace the generated tables in docs/training.md")
    ap.add_argument("--json", metavar="PATH", help="write every comparison as JSON (kcert.training-comparison/1)")
    ap.add_argument("--checkpoints", metavar="DIR",
                    help="keep every finished seed here; a rerun trains only what is missing (clear it when a "
                         "kernel, the model or kcert changed)")
    args = ap.parse_args()
    names = args.only or [n for n, _ in STUDY]
    if args.write_docs:  # before hours of training, not after
        docs = ROOT / "docs" / "training.md"
        for key in SECTIONS:
            _marker(key, docs.read_text(encoding="utf-8"), docs)
    rows, totals = run_study(names, args.steps, args.seeds, args.workers, args.checkpoints)
    command = f"python benchmarks/training.py --steps {args.steps} --seeds {args.seeds} --workers {args.workers}"
    sections = {
        "verdicts": verdict_table(rows),
        "prediction": prediction_table(rows),
        "timing": timing_table(rows, totals) + f"\n\n`{command}` on {totals['machine']} (1-minute load average "
                                               f"{totals['load'][0]:.1f} at the start, {totals['load'][1]:.1f} at the end).",
    }
    for key, body in sections.items():
        print(f"\n## {key}\n\n{body}")
    figures = write_figures(rows, Path(args.out))
    print("\nfigures: " + ", ".join(str(p) for p in figures))
    if args.json:
        from kcert.report.training import to_dict

        Path(args.json).write_text(json.dumps([to_dict(r) for _, _, _, r, _, _ in rows], indent=1))
    if args.write_docs:
        write_docs(sections, ROOT / "docs" / "training.md")


if __name__ == "__main__":
    main()
