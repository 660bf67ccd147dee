"""Why a correctly rounded RMSNorm can WARN at layer 0's input norm of the study's zoo (docs/model.md, "Study"):
that norm's input is a function of one token's embedding row, so over random token ids it takes only V
distinct values (the zoo's vocabulary: 512), and a kernel's own rounding error, averaged over V fixed rows,
does not average to zero.

1. For every benign pair whose prod computes that norm in float32 and rounds once (the fused RMSNorm; the
   norms compiled by inductor, every architecture), the exact expectation over uniformly drawn token ids of
   each side's own bias against kcert's oracle (ref's norm in float64 real mode), per channel, raw and
   sign-aligned, in bf16 ULPs at the channel's mean |ref|; the largest over the channels. The bias gate
   attributes a significant bias to ref when prod's own is no larger than ref's or negligible (a quarter of
   the 0.25 ULP floor: 0.0625), so a channel where prod's own exceeds both predicts a WARN (if the
   difference is significant at the run's R). The study's verdict of that row is printed beside it.
2. For the fused RMSNorm and embedding tables of V rows drawn as the zoo draws them (N(0, 0.02), bf16): the
   same expectation, and ``kcert.certify`` of the norm pair fed the rows of random token ids (R = 1024,
   seed 0).

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_vocab_bias.py \\
        [--json benchmarks/data/model_vocab_bias.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

import kcert
import model_zoo
from kcert.execution.realmode import run_real
from kcert.stats.thresholds import BiasThresholds
from kcert.stats.ulp import ulp

NORM = "model.layers.0.input_layernorm"
SINGLE_ROUNDING_PAIRS = ("llama_fused_rmsnorm",) + tuple(f"{a}_compiled_layer0" for a in model_zoo.ARCHS)
VOCABS = (512, 4096, 32768, 131072)
CERTIFIED_VOCABS = (512, 4096, 32768)
_DEFAULTS = BiasThresholds()
NEGLIGIBLE_ULP = _DEFAULTS.negligible_fraction * _DEFAULTS.ulp_floor  # 0.0625: the "negligible" own bias
STUDY = Path(__file__).resolve().parent / "data" / "model_study_r1024"


def norm_inputs(model) -> torch.Tensor:
    """The rows layer 0's input norm receives for every token id, once each (one forward on all the ids)."""
    vocab = model.config.vocab_size
    args, _, _ = model_zoo.module_outputs(model, NORM, {"input_ids": torch.arange(vocab).reshape(-1, model_zoo.SEQ)})
    return args[0].reshape(vocab, -1)


def table(vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(vocab)
    return (torch.randn(vocab, 256, generator=g) * 0.02).to(torch.bfloat16)


def own_bias(ref_norm, prod_norm, rows: torch.Tensor) -> dict:
    """Each side's mean error against the oracle over ``rows`` (every row equally likely), per channel, in
    bf16 ULPs at the channel's mean |ref|: the largest over the channels, and the channels (over both
    statistics) where prod's own bias is above the negligible level and larger than ref's."""
    chunks = rows.split(4096)
    with torch.no_grad():
        ref = torch.cat([ref_norm(c[:, None, :]).squeeze(1) for c in chunks]).double()
        prod = torch.cat([prod_norm(c[:, None, :]).squeeze(1) for c in chunks]).double()
        exact = torch.cat([run_real(ref_norm, c[:, None, :]).squeeze(1) for c in chunks])
    unit = ulp(ref.abs().mean(0).numpy(), "bfloat16")
    sign = torch.sign(ref)
    out, own = {}, {}
    for side, values in (("prod", prod), ("ref", ref)):
        own[side] = ((values - exact).mean(0).numpy() / unit, ((values - exact) * sign).mean(0).numpy() / unit)
        out[side] = {"raw_max_ulp": float(np.abs(own[side][0]).max()),
                     "sign_aligned_max_ulp": float(np.abs(own[side][1]).max())}
    out["prod_above_negligible_and_ref"] = int(sum(((np.abs(p) > NEGLIGIBLE_ULP) & (np.abs(p) > np.abs(r))).sum()
                                                   for p, r in zip(own["prod"], own["ref"])))
    return out


def certified(ref_norm, prod_norm, rows: torch.Tensor, vocab: int) -> dict:
    case = kcert.Case(name=f"rmsnorm_on_embedding_rows_v{vocab}", ref=lambda ids: ref_norm(rows[ids]),
                      prod=lambda ids: prod_norm(rows[ids]), inputs={"ids": kcert.Integers((2, 64), 0, vocab)},
                      dtype=torch.bfloat16)
    cert = kcert.certify(case, replicates=1024, seed=0)
    bias = cert.bias[0]
    return {"verdict": cert.verdict.value, "bias": bias.verdict.value,
            "findings": [{"bucket": f.label, "statistic": f.statistic, "reason": f.reason,
                          "effect_ulp": f.effect_ulp, "prod_bias_ulp": f.prod_bias_ulp, "ref_bias_ulp": f.ref_bias_ulp}
                         for f in bias.findings()]}


def study_verdict(pair: str) -> str | None:
    path = STUDY / f"{pair}.json"
    if not path.exists():
        return None
    rows = json.loads(path.read_text())["rows"]
    return next((r["verdict"] for r in rows if r["module"] == NORM and r["direction"] == "forward"), None)


def _line(rec: dict) -> str:
    p, r = rec["prod"], rec["ref"]
    return (f"prod's own bias max {p['raw_max_ulp']:.3f} raw, {p['sign_aligned_max_ulp']:.3f} sign-aligned ULP; "
            f"ref's {r['raw_max_ulp']:.3f}, {r['sign_aligned_max_ulp']:.3f}; channels where prod's exceeds "
            f"{NEGLIGIBLE_ULP} and ref's: {rec['prod_above_negligible_and_ref']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    zoo, sweep = [], []
    for pair in SINGLE_ROUNDING_PAIRS:
        ref, prod = model_zoo.models(model_zoo.pair(pair))
        rec = {"pair": pair, **own_bias(ref.get_submodule(NORM), prod.get_submodule(NORM), norm_inputs(ref)),
               "study_verdict": study_verdict(pair)}
        rec["predicted"] = "WARN" if rec["prod_above_negligible_and_ref"] else "PASS"
        zoo.append(rec)
        print(f"{pair} ({model_zoo.VOCAB} rows): {_line(rec)}; predicted {rec['predicted']}, the study's row "
              f"{rec['study_verdict'] or 'not run'}", flush=True)
    ref, prod = model_zoo.models(model_zoo.pair("llama_fused_rmsnorm"))
    ref_norm, prod_norm = ref.get_submodule(NORM), prod.get_submodule(NORM)
    for vocab in VOCABS:
        rows = table(vocab)
        rec = {"vocab": vocab, **own_bias(ref_norm, prod_norm, rows)}
        if vocab in CERTIFIED_VOCABS:
            rec["kcert"] = certified(ref_norm, prod_norm, rows, vocab)
        sweep.append(rec)
        verdict = f"; kcert.certify: {rec['kcert']['verdict']}" if "kcert" in rec else ""
        print(f"llama_fused_rmsnorm's norms, a table of {vocab} rows: {_line(rec)}{verdict}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"negligible_ulp": NEGLIGIBLE_ULP, "zoo": zoo, "vocab_sweep": sweep}, f, indent=1)


if __name__ == "__main__":
    main()
