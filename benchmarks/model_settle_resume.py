"""Settling a variance WARN by resuming the rows' checkpoints, against starting them over (docs/model.md,
"Settling a variance WARN"). Three ``kcert model`` commands on one zoo pair (benchmarks/model_zoo_pairs.py), one
after another, timed whole (each its own process, the start included):

1. ``first``: the chosen modules at kcert's default looks (R, up to 4R), with ``--checkpoint``;
2. ``settle``: the command ``first`` printed for the rows it held back for lack of evidence, as printed (their
   modules, ``--max-replicates`` 4x the last look, ``--checkpoint ... --resume``);
3. ``fresh``: the same command without ``--checkpoint``/``--resume``: the rows started over with the larger cap.

It prints each command's wall time, each row's verdict, figure and replicates in ``settle`` and ``fresh``, and
whether their certificates are equal but for the settle's note on the level (the one difference a resume with a
raised cap makes: docs/method.md, "Stopping").

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_settle_resume.py llama_eager_vs_sdpa \\
        model.layers.0.self_attn --json benchmarks/data/model_settle_resume.json
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


def _run(words: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kcert", *words], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1, 3):  # PASS, FAIL, WARN: a verdict, not an error
        raise SystemExit(f"kcert {shlex.join(words)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, done.stderr


def _settle_command(stderr: str) -> list[str]:
    line = next((l for l in stderr.splitlines() if "only for lack of evidence" in l), None)
    if line is None:
        raise SystemExit("the first run held no row back for lack of evidence: nothing to settle\n" + stderr[-3000:])
    return shlex.split(line[line.index(" kcert model ") + 1:])[1:]  # the words after the program


def _rows(path: Path) -> dict[tuple[str, str], dict]:
    report = json.loads(path.read_text())
    report = report[0] if isinstance(report, list) else report
    return {(r["module"], r["direction"]): r for r in report["rows"]}


def _comparable(certificate: dict) -> dict:
    stable = stable_dict(certificate)
    stable["notes"] = [n for n in stable.get("notes", []) if not n.startswith(EXTENDED)]
    return stable


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pair", help="a zoo pair, e.g. llama_eager_vs_sdpa")
    p.add_argument("modules", help="qualified module names, comma-separated")
    p.add_argument("--json", metavar="OUT", help="write the figures")
    p.add_argument("-R", "--replicates", type=int, default=1024, help="R of the first look (default kcert's, 1024)")
    args = p.parse_args()
    env = {**os.environ, "KCERT_ZOO_PAIRS": args.pair, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        first = ["model", str(HERE / "model_zoo_pairs.py"), "--case", args.pair, "--threads", "1", "--no-end-to-end",
                 "--replicates", str(args.replicates), *[w for m in args.modules.split(",") for w in ("--modules", m)],
                 "--checkpoint", str(work / "ck.npz"), "--json", str(work / "first.json"), "--quiet"]
        first_wall, stderr = _run(first, env)
        settle = _settle_command(stderr)
        at = settle.index("--checkpoint")
        fresh = settle[:at] + settle[at + 3:]  # without --checkpoint PATH --resume
        assert settle[at + 2] == "--resume", settle
        settle_wall, _ = _run([*settle, "--json", str(work / "settle.json"), "--quiet"], env)
        fresh_wall, _ = _run([*fresh, "--json", str(work / "fresh.json"), "--quiet"], env)
        before, settled, started_over = (_rows(work / f"{n}.json") for n in ("first", "settle", "fresh"))

    rows = []
    for key, row in settled.items():
        other = started_over[key]
        mine, theirs = row["certificate"], other["certificate"]
        rows.append({"module": key[0], "direction": key[1], "first": before[key]["verdict"],
                     "first_replicates": before[key]["certificate"]["provenance"]["replicates"],
                     "settle": row["verdict"], "fresh": other["verdict"], "figure": row["figure"],
                     "replicates": mine["provenance"]["replicates"],
                     "resumed_from": (mine["provenance"].get("resumed") or {}).get("replicates"),
                     "level_note": next((n for n in mine.get("notes", []) if n.startswith(EXTENDED)), None),
                     "equal_but_the_note": _comparable(mine) == _comparable(theirs)})
    result = {"pair": args.pair, "modules": args.modules, "commands": {
        "first": "kcert " + shlex.join(first), "settle": "kcert " + shlex.join(settle), "fresh": "kcert " + shlex.join(fresh)},
        "wall_s": {"first": round(first_wall, 1), "settle": round(settle_wall, 1), "fresh": round(fresh_wall, 1)},
        "settle_over_fresh": round(settle_wall / fresh_wall, 3),
        "first_and_settle_over_fresh": round((first_wall + settle_wall) / fresh_wall, 3), "rows": rows}
    print(f"{args.pair} {args.modules}: first {first_wall:.0f} s, settle (resumed) {settle_wall:.0f} s, fresh "
          f"{fresh_wall:.0f} s: settle / fresh {result['settle_over_fresh']}, first + settle / fresh "
          f"{result['first_and_settle_over_fresh']}")
    for r in rows:
        print(f"  {r['module']} {r['direction']}: first {r['first']} ({r['first_replicates']}), settle {r['settle']} "
              f"({r['replicates']} replicates, from {r['resumed_from']}), fresh {r['fresh']}; {r['figure']}; "
              f"equal but the note: {r['equal_but_the_note']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
