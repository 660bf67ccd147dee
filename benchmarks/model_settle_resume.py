"""Settling a variance WARN by resuming the rows' checkpoints, against starting them over (docs/model.md,
"Settling a variance WARN"). Three ``kcert model`` commands on one zoo pair (benchmarks/model_zoo_pairs.py), one
after another, timed whole (each its own process, the start included):

1. ``first``: the chosen modules at kcert's default looks (R, up to 4R), with ``--checkpoint`` and ``--no-settle``
   (since 2026-12-05 ``kcert model`` lets rows held back go on by itself: docs/model.md, "Rows held back go on");
2. ``settle``: the command ``first`` printed for the rows it held back for lack of evidence, as printed (their
   modules, ``--max-replicates`` 4x the last look, ``--checkpoint ... --resume``);
3. ``fresh``: the same command without ``--checkpoint``/``--resume``: the rows started over with the larger cap.

It prints each command's wall time, each row's verdict, figure and replicates in ``settle`` and ``fresh``, and
whether their certificates are equal but for the settle's note on the level (the one difference a resume with a
raised cap makes: docs/method.md, "Stopping"), and the module rows by verdict before and after the settle (the
first run's rows, the settled ones at their new verdicts). Without MODULES it runs the default selection with
the end-to-end row; ``--ranks N`` runs each command under torchrun; ``--no-fresh`` leaves the third command out.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_settle_resume.py llama_eager_vs_sdpa \\
        model.layers.0.self_attn --json benchmarks/data/model_settle_resume.json
    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_settle_resume.py llama_eager_vs_sdpa \\
        --ranks 2 --no-fresh --json benchmarks/data/model_settle_resume_whole.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kcert.report.stable import stable_dict

HERE = Path(__file__).resolve().parent
EXTENDED = "looks extended on resume"


def _run(words: list[str], env: dict, ranks: int, report: Path) -> float:
    """Run ``kcert WORDS --json REPORT`` (under torchrun with ``ranks`` > 1); the wall time. Any verdict writes the
    report (torchrun turns a WARN's exit code into its own failure), an error does not."""
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
              if ranks > 1 else [sys.executable])
    start = time.perf_counter()
    done = subprocess.run([*launch, "-m", "kcert", *words, "--json", str(report)], env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    if not report.exists():
        raise SystemExit(f"kcert {shlex.join(words)} exited {done.returncode} without a report:\n{done.stderr[-3000:]}")
    return wall


def _settle_command(report: Path) -> list[str] | None:
    """The settle command the first run printed, as its JSON report holds it (``settle_command``): the words after
    the program; None where there is none (no row held back or undecided)."""
    command = _report(report).get("settle_command")
    return None if command is None else shlex.split(command)[1:]


def _report(path: Path) -> dict:
    report = json.loads(path.read_text())
    return report[0] if isinstance(report, list) else report


def _rows(path: Path) -> dict[tuple[str, str], dict]:
    return {(r["module"], r["direction"]): r for r in _report(path)["rows"]}


def _comparable(certificate: dict) -> dict:
    stable = stable_dict(certificate)
    stable["notes"] = [n for n in stable.get("notes", []) if not n.startswith(EXTENDED)]
    return stable


def _tally(rows: dict) -> dict:
    """Module rows (the end-to-end row is reported, not counted: docs/model.md, "Study") by verdict."""
    counts: dict[str, int] = {}
    for (module, _), row in rows.items():
        if module:
            counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return counts


def spelled(words: list[str]) -> str:
    """The command as a record names it: the repository's files relative to its root."""
    return ("kcert " + shlex.join(words)).replace(str(HERE.parent) + os.sep, "")


def _engine() -> str:
    """The checkout's commit when the run started (read before anything ran, so a later commit does not leak in)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _not_pass(rows: dict) -> list[dict]:
    return [{"module": m, "direction": d, "verdict": r["verdict"], "gate": r["deciding_gate"], "figure": r["figure"]}
            for (m, d), r in rows.items() if r["verdict"] not in ("PASS", "SKIPPED")]


def _nothing_to_settle(args, engine: str, first: list[str], first_wall: float, before: dict) -> None:
    result = {"pair": args.pair, "modules": args.modules or "default selection, end to end", "ranks": args.ranks,
              "engine": engine, "commands": {"first": spelled(first), "settle": None},
              "wall_s": {"first": round(first_wall, 1)}, "module_rows_first": _tally(before),
              "module_rows_after_settle": _tally(before), "rows": [], "not_pass_after_settle": _not_pass(before)}
    print(f"{args.pair}: first {first_wall:.0f} s; it printed no settle command (no row held back or undecided)")
    print(f"  module rows: {result['module_rows_first']}")
    for r in result["not_pass_after_settle"]:
        print(f"  {r['module'] or '(model)'} {r['direction']} {r['verdict']} ({r['gate']}): {r['figure']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pair", help="a zoo pair, e.g. llama_eager_vs_sdpa")
    p.add_argument("modules", nargs="?", default=None,
                   help="qualified module names, comma-separated (default: the default selection and the end-to-end row)")
    p.add_argument("--json", metavar="OUT", help="write the figures")
    p.add_argument("-R", "--replicates", type=int, default=1024, help="R of the first look (default kcert's, 1024)")
    p.add_argument("--ranks", type=int, default=1, help="run each command under torchrun with this many ranks")
    p.add_argument("--no-fresh", action="store_true", help="leave out the fresh run (the rows started over)")
    args = p.parse_args()
    engine = _engine()
    env = {**os.environ, "KCERT_ZOO_PAIRS": args.pair, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    chosen = ["--no-end-to-end", *[w for m in args.modules.split(",") for w in ("--modules", m)]] if args.modules else []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        first = ["model", str(HERE / "model_zoo_pairs.py"), "--case", args.pair, "--threads", "1",
                 "--replicates", str(args.replicates), *chosen,
                 "--checkpoint", str(work / "ck.npz"), "--quiet",
                 "--no-settle"]  # the two steps a user took before rows held back went on in one run (the default)
        first_wall = _run(first, env, args.ranks, work / "first.json")
        settle = _settle_command(work / "first.json")
        if settle is None:  # nothing to settle: the first run's rows are the result
            before = _rows(work / "first.json")
            _nothing_to_settle(args, engine, first, first_wall, before)
            return
        at = settle.index("--checkpoint")
        fresh = settle[:at] + settle[at + 3:]  # without --checkpoint PATH --resume
        assert settle[at + 2] == "--resume", settle
        settle_wall = _run([*settle, "--quiet"], env, args.ranks, work / "settle.json")
        fresh_wall = None
        if not args.no_fresh:
            fresh_wall = _run([*fresh, "--quiet"], env, args.ranks, work / "fresh.json")
        before, settled = _rows(work / "first.json"), _rows(work / "settle.json")
        started_over = None if args.no_fresh else _rows(work / "fresh.json")

    rows = []
    for key, row in settled.items():
        mine = row["certificate"]
        entry = {"module": key[0], "direction": key[1], "first": before[key]["verdict"],
                 "first_figure": before[key]["figure"],
                 "first_replicates": before[key]["certificate"]["provenance"]["replicates"],
                 "settle": row["verdict"], "figure": row["figure"], "replicates": mine["provenance"]["replicates"],
                 "resumed_from": (mine["provenance"].get("resumed") or {}).get("replicates"),
                 "level_note": next((n for n in mine.get("notes", []) if n.startswith(EXTENDED)), None)}
        if started_over is not None:
            theirs = started_over[key]["certificate"]
            entry.update(fresh=started_over[key]["verdict"], equal_but_the_note=_comparable(mine) == _comparable(theirs))
        rows.append(entry)
    after = {**before, **settled}  # the first run's rows, the settled ones at their settled verdicts

    wall = {"first": round(first_wall, 1), "settle": round(settle_wall, 1)}
    result = {"pair": args.pair, "modules": args.modules or "default selection, end to end", "ranks": args.ranks,
              "engine": engine, "commands": {"first": spelled(first), "settle": spelled(settle)}, "wall_s": wall,
              "module_rows_first": _tally(before), "module_rows_after_settle": _tally(after), "rows": rows,
              "not_pass_after_settle": _not_pass(after)}
    line = f"{args.pair} {result['modules']}: first {first_wall:.0f} s, settle (resumed) {settle_wall:.0f} s"
    if fresh_wall is not None:
        wall["fresh"] = round(fresh_wall, 1)
        result["commands"]["fresh"] = spelled(fresh)
        result["settle_over_fresh"] = round(settle_wall / fresh_wall, 3)
        result["first_and_settle_over_fresh"] = round((first_wall + settle_wall) / fresh_wall, 3)
        line += (f", fresh {fresh_wall:.0f} s: settle / fresh {result['settle_over_fresh']}, first + settle / fresh "
                 f"{result['first_and_settle_over_fresh']}")
    print(line)
    print(f"  module rows: first {result['module_rows_first']}, after the settle {result['module_rows_after_settle']}")
    for r in result["not_pass_after_settle"]:
        print(f"  after the settle: {r['module'] or '(model)'} {r['direction']} {r['verdict']} ({r['gate']}): {r['figure']}")
    for r in rows:
        versus = f", fresh {r['fresh']}; equal but the note: {r['equal_but_the_note']}" if "fresh" in r else ""
        print(f"  {r['module'] or '(model)'} {r['direction']}: first {r['first']} ({r['first_replicates']}; "
              f"{r['first_figure']}), settle "
              f"{r['settle']} ({r['replicates']} replicates, from {r['resumed_from']}){versus}; {r['figure']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
