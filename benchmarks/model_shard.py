"""What torchrun's ranks should share in ``kcert model`` (docs/model.md, "Checkpoints, time and ranks"): one
pair of the zoo (benchmarks/model_zoo.py, through benchmarks/model_zoo_pairs.py) certified three ways, one
after the other in this run, each as its own command line:

- one process;
- ``torchrun --nproc-per-node 2``, ``--shard replicates`` (each row's replicates shared; the default);
- ``torchrun --nproc-per-node 2``, ``--shard rows`` (whole rows from one queue, costliest first).

It prints each run's wall time (the whole command, torchrun's start included, and the engine's own
``wall_time_s``), their ratios to the one-process run, and whether the three JSON reports are the same
rows (every row's certificate compared without date, wall time, timings and thread count; the model
provenance without its wall time, ranks and shard). ``--repeats K`` alternates the order of the three runs
over K rounds and reports medians.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_shard.py --pair llama_eager_vs_sdpa \\
        --modules 'model.layers.0*' -R 64 [--repeats 1] [--json benchmarks/data/model_shard.json]
    python benchmarks/model_shard.py --table benchmarks/data/model_shard_*.json --markdown docs/model.md

(``--table`` writes the runs' JSON files as one table between ``<!-- model_shard: begin/end -->`` markers.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAIRS_FILE = HERE / "model_zoo_pairs.py"
MODES = ("one process", "2 ranks, shard replicates", "2 ranks, shard rows")


def command(mode: str, args, out: Path) -> list[str]:
    words = ["-m", "kcert", "model", str(PAIRS_FILE), "-R", str(args.replicates), "--quiet", "--json", str(out)]
    if args.max_replicates:
        words += ["--max-replicates", str(args.max_replicates)]
    for pattern in args.modules or ():
        words += ["--modules", pattern]
    if args.leaves:
        words.append("--leaves")
    if args.no_backward:
        words.append("--no-backward")
    if mode == MODES[0]:
        return [sys.executable, *words]
    shard = "rows" if mode == MODES[2] else "replicates"
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *words,
            "--shard", shard]


def comparable(path: Path) -> dict:
    from kcert.report.stable import stable_model_dict

    return stable_model_dict(json.loads(path.read_text()), "torch_threads")


def table(results: list[dict]) -> str:
    lines = ["| pair | selection | rows | R (looks capped) | one process | 2 ranks, shared replicates | "
             "2 ranks, shared rows | reports the same |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        chosen = "leaves" if r["leaves"] else ", ".join(f"`{m}`" for m in r["modules"] or ()) or "default"
        chosen += "" if r["backward"] else " (no backward)"
        m = r["modes"]

        def cell(mode):
            return f"{m[mode]['median_wall_s']:.0f} s ({m[mode]['ratio_to_one_process']:.2f}x)"

        lines.append(f"| `{r['pair']}` | {chosen} | {r['rows']} | {r['replicates']} ({r['max_replicates']}) | "
                     f"{m[MODES[0]]['median_wall_s']:.0f} s | {cell(MODES[1])} | {cell(MODES[2])} | "
                     f"{'yes' if r['identical_reports'] else 'NO'} |")
    return "\n".join(lines)


def write_table(paths: list[str], markdown: str) -> None:
    results = sorted((json.loads(Path(p).read_text()) for p in paths), key=lambda r: (r["replicates"], r["rows"]))
    begin, end = "<!-- model_shard: begin -->", "<!-- model_shard: end -->"
    doc = Path(markdown).read_text()
    if begin not in doc or end not in doc:
        sys.exit(f"{markdown}: no {begin} ... {end} markers")
    head, rest = doc.split(begin, 1)
    Path(markdown).write_text(head + begin + "\n" + table(results) + "\n" + end + rest.split(end, 1)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="llama_eager_vs_sdpa")
    ap.add_argument("--modules", action="append")
    ap.add_argument("--leaves", action="store_true")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("-R", "--replicates", type=int, default=64)
    ap.add_argument("--max-replicates", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", nargs="+", metavar="JSON", help="write these runs' table into --markdown, run nothing")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    if args.table:
        if not args.markdown:
            sys.exit("--table needs --markdown FILE")
        write_table(args.table, args.markdown)
        return
    env = {**os.environ, "KCERT_ZOO_PAIRS": args.pair, "OMP_NUM_THREADS": "1"}
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    engine: dict[str, list[float]] = {m: [] for m in MODES}
    reports: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            order = MODES if k % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                out = Path(tmp) / f"{MODES.index(mode)}-{k}.json"
                start = time.perf_counter()
                done = subprocess.run(command(mode, args, out), env=env, capture_output=True, text=True)
                walls[mode].append(time.perf_counter() - start)
                if not out.exists():
                    sys.exit(f"{mode}: no report (exit {done.returncode}):\n{done.stderr[-3000:]}")
                engine[mode].append(json.loads(out.read_text())["provenance"]["wall_time_s"])
                reports.setdefault(mode, comparable(out))
                print(f"round {k + 1}, {mode}: {walls[mode][-1]:.1f} s (engine {engine[mode][-1]:.1f} s), "
                      f"verdict {reports[mode]['verdict']}", flush=True)
    base = statistics.median(walls[MODES[0]])
    same = all(reports[m] == reports[MODES[0]] for m in MODES)
    result = {"pair": args.pair, "modules": args.modules, "leaves": args.leaves, "backward": not args.no_backward,
              "replicates": args.replicates, "max_replicates": args.max_replicates, "repeats": args.repeats,
              "rows": len(reports[MODES[0]]["rows"]), "identical_reports": same, "cpu": platform.processor(),
              "cores": os.cpu_count(),
              "modes": {m: {"wall_s": walls[m], "engine_s": engine[m], "median_wall_s": statistics.median(walls[m]),
                            "ratio_to_one_process": statistics.median(walls[m]) / base} for m in MODES}}
    print(f"\n{args.pair}, {result['rows']} rows, R = {args.replicates}, medians of {args.repeats}:")
    for m in MODES:
        r = result["modes"][m]
        print(f"  {m:28s} {r['median_wall_s']:7.1f} s  {r['ratio_to_one_process']:.2f}x")
    print(f"  the three reports are the same rows: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
