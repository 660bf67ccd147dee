"""The model study of issue 25: ``kcert.certify_model`` on the zoo's defects and benign pairs (model_zoo.py).

For each pair (one at a time; results cached per pair in ``--out``, so an interrupted study resumes
where it stopped), certify ref against prod with the default selection, backward on, the end-to-end row
with the LM loss, at one replicate count R for every pair (chosen before the study, ``--replicates``) and
seed 0, and record the localized module (``first_failure``), every FAIL and WARN row and the wall time.

The bar, fixed before any result (issue 25, item 7):
- a defect is localized exactly: ``first_failure`` is the injected module, and every FAILing module row
  is that module or an ancestor of it (an ancestor FAILs because it includes it); a backward-only defect
  (prod's forward equal to ref's, its gradient wrong) FAILs in the backward direction only;
- a benign pair has no module row FAIL and at most 5 % of its module rows WARN.
The end-to-end row is reported but not part of the bar. Pairs are split into a tuning and a validation
half by name (model_zoo.Pair.half, as the control suite); both halves are reported separately.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_study.py --replicates R \\
        [--pairs NAME ...] [--half tuning|validation] [--out benchmarks/data/model_study] \\
        [--markdown docs/model-study.md]

``--vocab V`` builds every pair with a vocabulary of V tokens instead of the zoo's 512 (a record notes its
``vocab``; keep such records in their own ``--out``): the study's tables are at 512, and docs/model.md ("Study")
says what a larger vocabulary changes. The zoo draws its weights in one seeded stream, so the weights drawn
after the embedding table change with V too.

Under ``torchrun --nproc-per-node N`` (the script as torchrun's program) the ranks share each row's replicates,
as ``torchrun ... -m kcert model`` does; rank 0 prints and writes (a record notes its ``ranks``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

import host
import kcert
import model_zoo

WARN_SHARE = 0.05
SEED = 0


def _ancestor_or_self(parent: str, child: str) -> bool:
    return parent == child or child.startswith(parent + ".")


def row_record(row) -> dict:
    return {"module": row.module, "kind": row.kind, "prod_kind": row.prod_kind, "direction": row.direction,
            "order": row.order, "verdict": row.verdict.value, "gate": row.deciding_gate, "figure": row.figure,
            "skipped": row.skipped_reason,
            "replicates": row.certificate.provenance.replicates if row.certificate is not None else None}


def _commit() -> str | None:
    """The checkout's commit when this process started: the engine's code the pairs run on is what it imported
    then (read at the start, a study whose checkout moves while it runs would record a commit it did not run)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


STARTED_AT = _commit()


def run_pair(p: model_zoo.Pair, replicates: int, backward: bool, max_replicates: int | None,
             verbose: bool = True, settle: bool | None = None) -> dict:
    """Certify pair ``p`` and return its record (JSON-ready)."""
    ref, prod = model_zoo.models(p, SEED)
    start = time.perf_counter()

    def on_event(kind, detail):
        if kind in ("row", "settle") and verbose:
            going = f" held back at {detail['from']}: on to {detail['to']}" if kind == "settle" else ""
            print(f"  {time.perf_counter() - start:6.0f} s  row {detail['index'] + 1}/{detail['rows']} "
                  f"{detail['module'] or '(model)'} {detail['direction']}{going}", file=sys.stderr, flush=True)

    cert = kcert.certify_model(ref, prod, model_zoo.inputs(p.arch), loss=model_zoo.lm_loss, backward=backward,
                               name=p.name, replicates=replicates, seed=SEED, on_event=on_event,
                               settle=settle, **({"max_replicates": max_replicates} if max_replicates else {}))
    wall = time.perf_counter() - start
    first = cert.first_failure
    return {"pair": p.name, "arch": p.arch, "kind": p.kind, "half": p.half, "injected": p.module,
            "backward_only": p.backward_only, "source": p.source, "what": p.what, "replicates": replicates,
            "max_replicates": max_replicates, "settle_max_replicates": cert.provenance.get("settle_max_replicates"),
            "backward": backward, "commit": STARTED_AT,
            "seed": SEED, "vocab": model_zoo.VOCAB, "wall_s": wall, "host": host.describe(),
            "verdict": cert.verdict.value,
            "first_failure": None if first is None else {"module": first.module, "direction": first.direction},
            "unmatched": [list(u) for u in cert.unmatched], "rows": [row_record(r) for r in cert.rows]}


def _cap(rec: dict) -> str:
    """The looks' cap, and the one rows held back went on to (records since the settle was the default)."""
    cap = rec.get("max_replicates") or 4 * rec["replicates"]
    return f"{cap}; held back: {rec['settle_max_replicates']}" if rec.get("settle_max_replicates") else str(cap)


def judge(rec: dict) -> dict:
    """The bar applied to one pair's record: met or not, and why."""
    mod_rows = [r for r in rec["rows"] if r["direction"] != "end to end"]
    fails = [r for r in mod_rows if r["verdict"] == "FAIL"]
    warns = [r for r in mod_rows if r["verdict"] == "WARN"]
    skipped = [r for r in mod_rows if r["verdict"] == "SKIPPED"]
    out = {"module_rows": len(mod_rows), "fail_rows": len(fails), "warn_rows": len(warns),
           "skipped_rows": len(skipped)}
    if rec["kind"] == "benign":
        share = len(warns) / max(len(mod_rows), 1)
        out["met"] = not fails and share <= WARN_SHARE
        out["why"] = f"{len(fails)} FAIL, {len(warns)}/{len(mod_rows)} WARN ({share:.0%})"
        return out
    target = rec["injected"]
    first = rec["first_failure"]
    stray = [f"{r['module']} ({r['direction']})" for r in fails if not _ancestor_or_self(r["module"], target)]
    localized = first is not None and first["module"] == target
    why = []
    if not localized:
        why.append(f"first failure {first['module'] + ' ' + first['direction'] if first else 'none'}")
    if stray:
        why.append("FAIL outside the module: " + ", ".join(stray[:4]) + (" ..." if len(stray) > 4 else ""))
    if rec["backward_only"]:
        fwd = [r for r in fails if r["direction"] == "forward"]
        if fwd:
            why.append(f"{len(fwd)} forward rows FAIL (prod's forward equals ref's)")
        if first is not None and first["direction"] != "backward":
            why.append("localized in the forward direction")
    out["met"] = not why
    out["why"] = "; ".join(why) if why else (
        f"localized ({first['direction']}); FAIL rows: " + ", ".join(
            sorted({f"{r['module'] or '(model)'} {r['direction']}" for r in fails})))
    return out


def _cell(rows: list[dict], of: int | None = None, most: int = 4) -> str:
    """The rows' modules (direction initial), or only their count when there are more than ``most``."""
    if of is not None and len(rows) > most:
        return f"{len(rows)}/{of}"
    return ", ".join(f"`{r['module']}` {r['direction'][0]}" for r in rows) or "-"


def markdown(records: list[dict], pending: list[model_zoo.Pair]) -> str:
    lines = []
    for half in ("tuning", "validation"):
        recs = [r for r in records if r["half"] == half]
        d = [r for r in recs if r["kind"] == "defect"]
        b = [r for r in recs if r["kind"] == "benign"]
        dm = sum(judge(r)["met"] for r in d)
        bm = sum(judge(r)["met"] for r in b)
        bw = sum(judge(r)["warn_rows"] for r in b)
        bn = sum(judge(r)["module_rows"] for r in b)
        bf = sum(judge(r)["fail_rows"] for r in b)
        lines.append(f"- {half} half: defects localized exactly {dm}/{len(d)}; benign pairs meeting the bar "
                     f"{bm}/{len(b)} (module rows: {bf} FAIL, {bw}/{bn} WARN)")
    if pending:
        lines.append("- not run (no result in the output directory): " + ", ".join(p.name for p in pending))
    lines += ["", "| pair | kind | half | injected at | localized (first failure) | FAIL module rows | "
              "WARN module rows | end to end | rows | R (cap) | backward | wall | bar |", "|" + " --- |" * 13]
    for r in records:
        j = judge(r)
        first = r["first_failure"]
        mod_rows = [x for x in r["rows"] if x["direction"] != "end to end"]
        e2e = next((x["verdict"] for x in r["rows"] if x["direction"] == "end to end"), "-")
        loc = f"`{first['module'] or '(model)'}` ({first['direction']})" if first else "none"
        lines.append(
            f"| `{r['pair']}` | {r['kind']} | {r['half']} | {('`' + r['injected'] + '`') if r['injected'] else '-'} | "
            f"{loc} | {_cell([x for x in mod_rows if x['verdict'] == 'FAIL'])} | "
            f"{_cell([x for x in mod_rows if x['verdict'] == 'WARN'], len(mod_rows))} | {e2e} | {len(mod_rows)} "
            f"({j['skipped_rows']} skipped) | {r['replicates']} ({_cap(r)}) | "
            f"{'yes' if r.get('backward', True) else 'no'} | {_wall(r)} | "
            f"{'met' if j['met'] else 'MISSED: ' + j['why']} |")
    lines.append("")
    lines.append("Directions: f forward, b backward. A FAIL of an ancestor of the injected module is allowed "
                 "(it includes the module).")
    return "\n".join(lines) + "\n"


def _wall(rec: dict) -> str:
    """The wall time, the engine's commit and, where recorded, the host's bf16 product time (benchmarks/host.py):
    the records of one table may come from several engines and hosts."""
    ms = (rec.get("host") or {}).get("product_ms", {}).get("bfloat16")
    said = [x for x in (rec.get("commit"), None if ms is None else f"bf16 {ms:.3g} ms") if x]
    return f"{rec['wall_s']:.0f} s" + (f" ({', '.join(said)})" if said else "")


def markers(name: str = "model_study") -> tuple[str, str]:
    """The comments a generated table sits between (``--marker``: several tables in one file)."""
    return f"<!-- {name}: begin (generated) -->", f"<!-- {name}: end -->"


def write_markdown(path: Path, table: str, marker: str = "model_study") -> None:
    """Write the table between the BEGIN and END markers of ``path`` (docs/model.md's Study section), or,
    for a file without the markers, the whole file."""
    BEGIN, END = markers(marker)
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        path.write_text(head + BEGIN + "\n" + table + rest[rest.index(END):])
    else:
        path.write_text("# The model study (generated by benchmarks/model_study.py)\n\n" + table)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", "-R", type=int, required=True)
    ap.add_argument("--max-replicates", type=int, default=None,
                    help="cap of the variance gate's adaptive looks (default kcert's, 4 R)")
    ap.add_argument("--no-settle", dest="settle", action="store_false", default=None,
                    help="rows held back for lack of evidence stop at the cap (the default before 2026-12-05)")
    ap.add_argument("--backward", choices=("all", "backward-only-defects"), default="all",
                    help="backward rows for every pair, or only for the defects whose forward is right")
    ap.add_argument("--pairs", nargs="*", default=None)
    ap.add_argument("--half", choices=("tuning", "validation"), default=None)
    ap.add_argument("--out", default="benchmarks/data/model_study")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--marker", default="model_study", help="the name of the generated block in --markdown")
    ap.add_argument("--report-only", action="store_true", help="run nothing; tabulate the cached results")
    ap.add_argument("--vocab", type=int, default=model_zoo.VOCAB, help="the models' vocabulary (default: the zoo's)")
    args = ap.parse_args(argv)
    model_zoo.use_vocab(args.vocab)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from kcert.execution import distributed

    with distributed.process_group("cpu") as comm:
        _study(args, comm)


def _study(args, comm) -> None:
    """Under torchrun every rank certifies the same pairs (sharing each row's replicates); rank 0 writes."""
    lead = comm.rank == 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in model_zoo.PAIRS if (args.pairs is None or p.name in args.pairs)
              and (args.half is None or p.half == args.half)]
    unknown = set(args.pairs or ()) - {p.name for p in model_zoo.PAIRS}
    if unknown:
        raise SystemExit(f"model_study: unknown pairs {sorted(unknown)}")
    for p in chosen:
        path = out / f"{p.name}.json"
        if path.exists() or args.report_only:
            continue
        if lead:
            print(f"{p.name} ({p.kind}, {p.half}) ...", flush=True)
        rec = run_pair(p, args.replicates, args.backward == "all" or p.backward_only, args.max_replicates, lead,
                       args.settle)
        rec["ranks"] = comm.world
        if lead:
            path.write_text(json.dumps(rec, indent=1))
        comm.barrier()  # every rank sees the file before it looks at the next pair
        if not lead:
            continue
        j = judge(rec)
        print(f"  {rec['verdict']} first failure {rec['first_failure']} in {rec['wall_s']:.0f} s: "
              f"{'met' if j['met'] else 'MISSED'} ({j['why']})", flush=True)
    if not lead:
        return
    records = [json.loads((out / f"{p.name}.json").read_text()) for p in model_zoo.PAIRS
               if (out / f"{p.name}.json").exists()]
    records = [r for r in records if r["replicates"] == args.replicates]
    pending = [p for p in model_zoo.PAIRS if p.name not in {r["pair"] for r in records}]
    table = markdown(records, pending)
    print(table)
    if args.markdown:
        write_markdown(Path(args.markdown), table, args.marker)
    if args.json:
        Path(args.json).write_text(json.dumps({"records": records, "judged": {r["pair"]: judge(r) for r in records}},
                                              indent=1))


if __name__ == "__main__":
    main()
