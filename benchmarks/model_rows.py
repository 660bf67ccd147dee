"""Chosen rows of one zoo pair (benchmarks/model_zoo.py) at kcert's default R and looks, forward only: each
row's verdict, deciding gate, figure and the replicates it planned, and the wall time (issue 25: what the
study's capped R = 64 could not settle). docs/model.md, "At the default R", quotes its results.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_rows.py PAIR MODULE[,MODULE...] \\
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import kcert
import model_zoo
from kcert.model.report import to_json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pair", help="a zoo pair, e.g. llama_eager_vs_sdpa")
    p.add_argument("modules", help="qualified module names, comma-separated")
    p.add_argument("--json", metavar="OUT", help="write the rows and the full kcert.model report")
    args = p.parse_args()
    torch.set_num_threads(1)
    pair = model_zoo.pair(args.pair)
    ref, prod = model_zoo.models(pair)
    start = time.perf_counter()
    cert = kcert.certify_model(ref, prod, model_zoo.inputs(pair.arch), modules=kcert.Modules(names=args.modules.split(",")),
                               backward=False, end_to_end=False)
    wall = time.perf_counter() - start
    rows = [{"module": r.module, "verdict": r.verdict.value, "gate": r.deciding_gate, "figure": r.figure,
             "replicates": r.certificate.provenance.replicates if r.certificate else None} for r in cert.rows]
    for r in rows:
        print(f"{r['module']}: {r['verdict']} ({r['gate'] or 'no gate decides'}; {r['figure']}; R {r['replicates']})")
    print(f"{args.pair}: {len(rows)} rows in {wall:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pair": args.pair, "wall_s": wall, "rows": rows, "report": to_json(cert)}, f, indent=1,
                      default=str)


if __name__ == "__main__":
    main()
