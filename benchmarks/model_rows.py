"""Chosen rows of one zoo pair (benchmarks/model_zoo.py) at kcert's default R and looks, forward only: each
row's verdict, deciding gate, figure and the replicates it planned, and the wall time (issue 25: what the
study's capped R = 64 could not settle). docs/model.md, "At the default R", quotes its results.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_rows.py PAIR MODULE[,MODULE...] \\
        [--backward] [--findings] [--json OUT]

``--backward`` adds each module's backward row (forward only by default). ``--findings`` also prints each
row's bias findings (buckets at WARN or worse, the worst first: the statistic, the reason, the effect of
prod - ref, each side's own bias against the oracle, in ULPs, and prod's own bias over ref's at the same rank
of its profile on the output: docs/method.md, "The working precision's own bias"). ``--vocab V`` builds the
pair with a vocabulary of V tokens instead of the zoo's 512 (docs/model.md, "Study": whether a row's verdict
comes from the few fixed embedding rows a small vocabulary gives every norm); the zoo draws its weights in one
seeded stream, so another vocabulary also changes the weights drawn after the embedding table: a verdict that
moves with it is consistent with the vocabulary's bias, not a proof of it. ``--seed S`` draws the models' weights
and kcert's replicates from S instead of 0 (the profile rule's test on other models, docs/method.md).
``--max-replicates M`` lets the variance gate's looks go on to M replicates (kcert's default stops at 4R): whether
a WARN held back for lack of evidence settles with more (docs/model.md, "Settling a variance WARN"). Each output
whose bias gate FAILs bucket by bucket prints its profile evidence: per FAILing statistic the tested buckets, the
largest ratio to ref's profile, the swap test's p, and whether the profile rule judged it within ref's profile.
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
    p.add_argument("--backward", action="store_true", help="add each module's backward row")
    p.add_argument("--findings", action="store_true", help="print each row's bias findings too")
    p.add_argument("--findings-shown", type=int, default=8, help="at most this many findings per output")
    p.add_argument("--vocab", type=int, default=model_zoo.VOCAB, help="the models' vocabulary (default: the zoo's)")
    p.add_argument("--seed", type=int, default=0, help="the models' weights and kcert's seed (default 0, the study's)")
    p.add_argument("--max-replicates", type=int, default=None,
                   help="the variance gate's looks up to M replicates (default kcert's, 4R)")
    args = p.parse_args()
    model_zoo.use_vocab(args.vocab)
    torch.set_num_threads(1)
    pair = model_zoo.pair(args.pair)
    ref, prod = model_zoo.models(pair, args.seed)
    start = time.perf_counter()
    cert = kcert.certify_model(ref, prod, model_zoo.inputs(pair.arch), modules=kcert.Modules(names=args.modules.split(",")),
                               backward=args.backward, end_to_end=False, seed=args.seed,
                               max_replicates=args.max_replicates)
    wall = time.perf_counter() - start
    rows = [{"module": r.module, "direction": r.direction, "verdict": r.verdict.value, "gate": r.deciding_gate,
             "figure": r.figure, "replicates": r.certificate.provenance.replicates if r.certificate else None} for r in cert.rows]
    for r, row in zip(rows, cert.rows):
        print(f"{r['module']} {r['direction']} (vocabulary {ref.config.vocab_size}): {r['verdict']} "
              f"({r['gate'] or 'no gate decides'}; {r['figure']}; R {r['replicates']})")
        for bias in row.certificate.bias if row.certificate is not None else ():
            e = bias.ref_profile
            if e is not None:
                stats = "; ".join(f"{x.statistic} G {x.tested}, ratio {x.highest_ratio:.3g}, swap p {x.swap_p:.3g}"
                                  for x in e.statistics)
                judged = "within ref's profile (WARN)" if e.within else "the FAIL stands"
                print(f"    profile: {bias.output}: {judged}; {stats}")
        for v in row.certificate.variance if row.certificate is not None else ():
            if v.verdict.value != "PASS" and v.interval is not None:
                iv, paired = v.interval, "-" if v.paired is None else f"{v.paired.ratio_upper:.3g}"
                held = ", ".join(d.code for d in v.diagnostics) or "-"
                print(f"    variance: {v.output}: {v.verdict.value} at {v.replicates} replicates; U {iv.upper:.3g}, one "
                      f"shape per side {iv.separate_upper:.3g}, through the pairs {paired}; {held}")
        if args.findings and row.certificate is not None:
            for bias in row.certificate.bias:
                for f in bias.findings()[:args.findings_shown]:
                    print(f"    {bias.output} {f.label} {f.statistic}: {f.verdict.value}, {f.reason}; prod - ref "
                          f"{f.effect_ulp:.3f} ULP, own bias prod {_ulp(f.prod_bias_ulp)}, ref {_ulp(f.ref_bias_ulp)}, "
                          f"prod's {_ratio(f.ref_profile_ratio)} ref's at its rank")
    print(f"{args.pair}: {len(rows)} rows in {wall:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pair": args.pair, "wall_s": wall, "rows": rows, "report": to_json(cert)}, f, indent=1,
                      default=str)


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.3g}x"


def _ulp(value) -> str:
    return "-" if value is None else f"{value:+.3f} ULP"


if __name__ == "__main__":
    main()
