"""The evidence behind kcert's thresholds, split by the controls' tuning and validation halves.

Reads the JSON of a control-suite run (``kcert controls --json controls.json``) and prints, for each
half (``Control.half``: fixed by the name's SHA-256), the figures each threshold separates:

- the bias gate's ULP floor ``c`` (0.25) and its "negligible" fraction (a significant bias of prod's
  own under ``fraction * c`` is not prod's defect): prod's own bias (against the oracle, in harm ULPs) on
  the significant buckets of every positive, against the effects of the negatives the bias gate FAILs;
- the variance gate's lines 2 and 10: U of every positive output against the estimate of A_T of every
  negative output the variance gate FAILs or WARNs.

A threshold is chosen on the tuning half; the validation half is reported with it fixed.

Usage: python benchmarks/tuning_halves.py controls.json
"""

from __future__ import annotations

import argparse
import json
import math


def _num(x):
    if isinstance(x, str):
        return {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}[x]
    return x


def bias_rows(row):
    """(largest |prod own bias| over significant non-FAIL buckets, largest effect over FAIL buckets)."""
    own, fail = 0.0, 0.0
    for out in row["certificate"]["gates"]["bias"]["outputs"]:
        z_star = out["thresholds"]["z_star"]
        for stat in out["statistics"].values():
            for i, verdict in enumerate(stat["verdict"]):
                z = _num(stat["z"][i])
                if abs(z) <= z_star:
                    continue
                if verdict == "FAIL":
                    fail = max(fail, _num(stat["effect_ulp"][i]))
                elif stat["prod_bias_ulp"] is not None:
                    own = max(own, abs(_num(stat["prod_bias_ulp"][i])))
    return own, fail


def variance_rows(row):
    out = []
    for v in row["certificate"]["gates"]["variance"]["outputs"]:
        tr = v.get("tail_ratio")
        if tr is None:
            continue
        out.append((v["output"], _num(tr["upper"]), _num(tr["common_shape_estimate"]), v["verdict"]))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("controls_json")
    args = p.parse_args(argv)
    rows = [r for r in json.load(open(args.controls_json))["controls"] if r["certificate"] is not None]
    for half in ("tuning", "validation"):
        sel = [r for r in rows if r["half"] == half]
        pos = [r for r in sel if r["kind"] == "positive"]
        neg = [r for r in sel if r["kind"] == "negative"]
        print(f"\n## {half} half: {len(neg)} negatives, {len(pos)} positives\n")
        own = sorted(((bias_rows(r)[0], r["name"]) for r in pos), reverse=True)
        print("positives, prod's own bias on significant non-FAIL buckets (harm ULP), largest first:")
        for value, name in own[:8]:
            if value > 0:
                print(f"  {value:.4f}  {name}")
        fails = sorted((bias_rows(r)[1], r["name"]) for r in neg if r["gates"]["bias"] == "FAIL")
        print("negatives the bias gate FAILs, their largest FAIL-bucket effect (ULP), smallest first:")
        for value, name in fails[:6]:
            print(f"  {value:.4f}  {name}")
        us = sorted(((u, f"{r['name']}/{o}") for r in pos for o, u, _, _ in variance_rows(r)), reverse=True)
        print("positives, variance U, largest first:")
        for value, name in us[:6]:
            print(f"  {value:.3g}  {name}")
        ests = sorted((e, f"{r['name']}/{o} ({v})") for r in neg for o, _, e, v in variance_rows(r) if v != "PASS")
        print("negatives the variance gate flags, common-shape estimate of A_T, smallest first:")
        for value, name in ests[:6]:
            print(f"  {value:.3g}  {name}")


if __name__ == "__main__":
    main()
