"""Evidence for ``kcert kernelbench``: every candidate of examples/kernelbench/ certified with default options,
with what the peer rules said on the same samples and the adequacy check (docs/kernelbench.md).

    python benchmarks/kernelbench.py                      # every problem; prints the markdown table
    python benchmarks/kernelbench.py --write docs/kernelbench.md   # and replaces the table in that page
    python benchmarks/kernelbench.py --only 06_softmax 08_online_softmax --workers 2

Each candidate runs as its own ``kcert kernelbench PROBLEM.py CANDIDATE.py --json ...`` process with the
command's defaults (so start-up and the timing are what a user gets). Candidates are named by what they
are: ``correct*.py`` (a correct rewrite: must not FAIL), ``wrong_*.py`` (a realistic defect: must FAIL),
``fake_*.py`` (a kernel that computes nothing: must FAIL, or the problem be flagged degenerate).

Per candidate: kcert's verdict (the worse of its two probes) and where its FAIL came from; each peer rule's
verdict under the problem's own inputs (``get_inputs()``, what those rules are run on in practice) and
under kcert's signed probe; the adequacy check (fakes rejected of those that apply; "degenerate" when the
reference is); the wall time. The headline counts, per rule, the wrong candidates it lets through and the
correct ones it rejects.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernelbench"
RULES = ("assert_close", "kernelbench", "flashattention", "dynamo_same")
RULE_NAMES = {"assert_close": "assert_close", "kernelbench": "KernelBench", "flashattention": "FlashAttention",
              "dynamo_same": "dynamo same"}
BEGIN, END = "<!-- kernelbench table: begin -->", "<!-- kernelbench table: end -->"


def kind_of(candidate: Path) -> str:
    name = candidate.stem
    if name.startswith("correct"):
        return "correct"
    if name.startswith("fake"):
        return "fake"
    return "wrong"


def candidates(only: list[str]) -> list[tuple[Path, Path]]:
    out = []
    for folder in sorted(p for p in EXAMPLES.iterdir() if (p / "problem.py").is_file()):
        if only and not any(o in folder.name for o in only):
            continue
        for c in sorted(folder.glob("*.py")):
            if c.name != "problem.py":
                out.append((folder / "problem.py", c))
    return out


def run_one(problem: Path, candidate: Path, extra: list[str], threads: int | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="kcert-kb-") as tmp:
        report = Path(tmp) / "cert.json"
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "kcert", "kernelbench", str(problem), str(candidate), "--json",
                               str(report), *extra], capture_output=True, text=True, cwd=ROOT,
                              env=_thread_env(threads))
        wall = time.perf_counter() - started
        certs = json.loads(report.read_text()) if report.exists() else []
    if isinstance(certs, dict):
        certs = [certs]
    return {"problem": problem.parent.name, "candidate": candidate.stem, "kind": kind_of(candidate),
            "exit": proc.returncode, "wall": wall, "certs": certs,
            "error": _error(proc, certs)}


def _thread_env(threads: int | None) -> dict | None:
    """The child's environment with torch's intra-op threads fixed (None: inherited). On a machine shared
    with other jobs, two threads' parallel regions wait on each other's time slices: one thread is faster."""
    if threads is None:
        return None
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def _error(proc: subprocess.CompletedProcess, certs: list) -> str:
    """The last stderr line of a run that gave no certificate (a usage error, or a crash with a traceback)."""
    if certs and proc.returncode != 2:
        return ""
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}, no certificate"


def _probe(cert: dict) -> str:
    return "problem" if "(problem probe)" in cert["case"] else "kcert"


def summarise(r: dict) -> dict:
    """The row of one candidate: kcert's verdict, where it FAILed, the rules per probe, adequacy."""
    certs = {_probe(c): c for c in r["certs"]}
    order = {"PASS": 0, "WARN": 1, "FAIL": 2}
    verdicts = [c["verdict"] for c in certs.values()]
    kcert = max(verdicts, key=order.get) if verdicts else "ERROR"
    where = []
    for probe, c in certs.items():
        failing = [g for g, v in c["gates"].items() if v["verdict"] == "FAIL"]
        if failing:
            where.append(f"{probe}: {'+'.join(failing)}")
        sweep = c.get("shape_sweep")
        if sweep and sweep["verdict"] == "FAIL" and not failing:
            where.append(f"{probe}: sweep")
    rules = {}
    for probe, c in certs.items():
        pr = c.get("peer_rules") or {}
        for rule in pr.get("rules", []):
            rules.setdefault(rule["rule"], {})[probe] = rule["verdict"]
    fakes, degenerate = {}, False
    for c in certs.values():
        ad = c.get("adequacy")
        if not ad:
            continue
        degenerate |= bool(ad["degenerate"])
        for f in ad["fakes"]:
            if f["status"] != "not applicable":
                fakes[f["name"]] = fakes.get(f["name"], False) or f["status"] == "rejected"
    notes = [c.get("description", "") for c in certs.values()]
    return {"kcert": kcert if not r["error"] else "ERROR", "where": "; ".join(where), "rules": rules,
            "fakes_rejected": sum(fakes.values()), "fakes": len(fakes), "degenerate": degenerate,
            "shrunk": "shrunk" in (notes[0] if notes else ""), **r}


def is_miss(s: dict) -> bool:
    """The issue's bar: a wrong candidate FAILs, a correct one does not, a fake FAILs or its problem is
    flagged degenerate."""
    if s["kind"] == "correct":
        return s["kcert"] == "FAIL"
    if s["kind"] == "fake":
        return s["kcert"] != "FAIL" and not s["degenerate"]
    return s["kcert"] != "FAIL"


def table(rows: list[dict]) -> str:
    head = ("| problem | candidate | kind | kcert | FAIL from | " + " | ".join(RULE_NAMES[r] for r in RULES)
            + " | fakes rejected | s |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for s in rows:
        cells = []
        for rule in RULES:
            v = s["rules"].get(rule, {})
            cells.append(f"{v.get('problem', '-')} / {v.get('kcert', '-')}")
        fakes = f"{s['fakes_rejected']}/{s['fakes']}" + (" degenerate" if s["degenerate"] else "")
        kcert = f"**{s['kcert']}**" if is_miss(s) else s["kcert"]
        if s["error"]:
            kcert += f" ({s['error'][:80]})"
        lines.append(f"| {s['problem']} | {s['candidate']} | {s['kind']} | {kcert} | {s['where'] or '-'} | "
                     + " | ".join(cells) + f" | {fakes} | {s['wall']:.0f} |")
    return "\n".join(lines)


def headline(rows: list[dict]) -> str:
    wrong = [s for s in rows if s["kind"] in ("wrong", "fake")]
    correct = [s for s in rows if s["kind"] == "correct"]
    lines = ["| rule | wrong or fake candidates it passes (of %d) | correct candidates it rejects (of %d) |"
             % (len(wrong), len(correct)), "| --- | --- | --- |"]

    def count(rule, probe, group, verdict_is_fail):
        n = 0
        for s in group:
            v = s["kcert"] if rule == "kcert" else s["rules"].get(rule, {}).get(probe)
            if v is None:
                continue
            n += (v == "FAIL") == verdict_is_fail
        return n

    for rule in RULES:
        for probe, label in (("problem", "on the problem's inputs"), ("kcert", "on kcert's probe")):
            lines.append(f"| {RULE_NAMES[rule]} {label} | {count(rule, probe, wrong, False)} | "
                         f"{count(rule, probe, correct, True)} |")
    lines.append(f"| **kcert** (both probes, sweep, adequacy) | {count('kcert', None, wrong, False)} | "
                 f"{count('kcert', None, correct, True)} |")
    return "\n".join(lines)


def write(path: Path, text: str) -> None:
    page = path.read_text()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} section to replace")
    before, rest = page.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    path.write_text(f"{before}{BEGIN}\n{text}\n{END}{after}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="problem folders whose name contains one of these")
    parser.add_argument("--workers", type=int, default=1, help="candidates certified at once (default 1)")
    parser.add_argument("--write", metavar="PAGE", help="replace the table section of this markdown page")
    parser.add_argument("--threads", type=int, help="torch threads per candidate (OMP_NUM_THREADS; default inherited)")
    parser.add_argument("--json", metavar="OUT", help="write every row (with the certificates' summaries) as JSON")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: options passed to kcert kernelbench")
    args = parser.parse_args()
    extra = [a for a in args.extra if a != "--"]
    todo = candidates(args.only)
    print(f"{len(todo)} candidates of {len({p for p, _ in todo})} problems; workers {args.workers}", file=sys.stderr)
    started = time.perf_counter()
    rows = []
    with futures.ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        jobs = {pool.submit(run_one, p, c, extra, args.threads): (p, c) for p, c in todo}
        for job in futures.as_completed(jobs):
            s = summarise(job.result())
            rows.append(s)
            print(f"  {s['problem']}/{s['candidate']} ({s['kind']}): {s['kcert']} {s['where']} {s['error']} "
                  f"[{s['wall']:.0f} s]", file=sys.stderr, flush=True)
    rows.sort(key=lambda s: (s["problem"], s["kind"] != "correct", s["candidate"]))
    total = time.perf_counter() - started
    walls = sorted(s["wall"] for s in rows)
    median = walls[len(walls) // 2] if walls else 0.0
    text = (f"{len(rows)} candidates of {len({s['problem'] for s in rows})} problems, `kcert kernelbench` with "
            f"default options, seed 0; wall time per candidate median {median:.0f} s, max {max(walls, default=0):.0f} s, "
            f"{total / 60:.0f} min in all ({args.workers} at a time"
            f"{f', {args.threads} torch thread' + ('s' if args.threads != 1 else '') if args.threads else ''}).\n\n{headline(rows)}\n\n{table(rows)}")
    print(text)
    if args.write:
        write(Path(args.write), text)
    if args.json:
        slim = [{k: v for k, v in s.items() if k != "certs"} for s in rows]
        Path(args.json).write_text(json.dumps(slim, indent=1))
    misses = [s for s in rows if is_miss(s)]
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
