"""The variance gate as it stands, judged again on the per-replicate errors a control-suite JSON stored
(``kcert controls --json``): which outputs' verdicts a change of the gate moves, on the same data.

Each output is judged at the replicates the stored run ended with, over the planned looks its stopping
rule names; a run under the changed gate could take further looks (more replicates) after a WARN, which
a replay cannot: a WARN here is "WARN at the stored run's last look", not the suite's verdict.

Usage: python benchmarks/variance_replay.py CONTROLS_JSON [--changed-only]
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

from kcert.gates.variance import judge_errors
from kcert.stats.thresholds import VarianceThresholds


def stored_outputs(path: str):
    """(control row, variance output record) for every variance output of every certificate in ``path``."""
    with open(path) as f:
        controls = json.load(f)["controls"]
    for row in controls:
        cert = row.get("certificate") or {}
        for out in cert.get("gates", {}).get("variance", {}).get("outputs", []):
            yield row, out


def replay(row: dict, out: dict):
    """The gate on one stored output's errors, in harm units, at its stored replicates and planned looks."""
    e = out["errors"]
    eps = np.asarray(e["epsilon"], float)
    a, b = np.asarray(e["prod"], float) / eps, np.asarray(e["ref"], float) / eps
    looks = re.search(r"over (\d+) planned", out["stopping_rule"])
    return judge_errors(a, b, out["horizon"], VarianceThresholds(), row["certificate"]["provenance"]["seed"],
                        tuple(out["looks"]), int(looks.group(1)) if looks else 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("controls_json")
    p.add_argument("--changed-only", action="store_true")
    args = p.parse_args(argv)
    print("| control | kind | half | family | output | R | stored | replayed | reason (replayed) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    moved = {"positive": 0, "negative": 0}
    for row, out in stored_outputs(args.controls_json):
        v = replay(row, out)
        changed = v.verdict.value != out["verdict"]
        moved[row["kind"]] += changed
        if changed or not args.changed_only:
            print(f"| {row['name']} | {row['kind']} | {row['half']} | {row['family']} | {out['output']} | "
                  f"{out['replicates']} | {out['verdict']} | {v.verdict.value} | {v.reason[:120]} |", flush=True)
    print(f"\noutputs whose variance verdict moved: {moved['positive']} positive, {moved['negative']} negative")


if __name__ == "__main__":
    main()
