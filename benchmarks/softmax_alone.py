"""The zoo's two bf16 softmaxes certified alone, against HF's (float32, rounded once), on attention logits shaped as
the zoo's layer 0 sees them (docs/model.md, "Study": whether ``llama_softmax_bf16`` reproduces its source's defect
where it is injected). Three cases, bf16, the causal mask of the zoo's 64 tokens, R = 1024, seed 0: the zoo's
``bf16_softmax`` (exponentials and their sum rounded to bf16; torch sums in float32), ``online_bf16_softmax`` (bf16
running max and denominator: the control ``softmax_denominator_bf16``'s mechanism) and the same online softmax with
float32 accumulators. It prints each verdict with its gates and the errors against the float64 softmax.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/softmax_alone.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

import kcert
from kcert.catalog.softmax import online_softmax
from kcert.stats.bias import IDENTICAL, NOT_SIGNIFICANT, UNTESTED

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_zoo  # noqa: E402

SHAPE = (2, 4, 64, 64)  # batch, heads, queries, keys: the zoo's layer 0 attention logits


def _causal(scores: torch.Tensor) -> torch.Tensor:
    """The additive causal mask HF's eager attention adds (the dtype's most negative value above the diagonal)."""
    n = scores.shape[-1]
    above = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
    return scores + torch.zeros(n, n, dtype=scores.dtype, device=scores.device).masked_fill(
        above, torch.finfo(scores.dtype).min)


def hf_softmax(scores):
    return torch.softmax(_causal(scores), dim=-1, dtype=torch.float32).to(scores.dtype)


def zoo_bf16_softmax(scores):
    return model_zoo.bf16_softmax(_causal(scores))


def zoo_online_bf16_softmax(scores):
    return model_zoo.online_bf16_softmax(_causal(scores))


def online_float32_softmax(scores):
    return online_softmax(_causal(scores), acc_dtype=torch.float32, lanes=4)


def cases() -> list[kcert.Case]:
    logits = {"scores": kcert.Gaussian(SHAPE, std=2.0)}
    return [kcert.Case(name=name, ref=hf_softmax, prod=prod, inputs=logits, buckets=kcert.Axes(-1),
                       dtype=torch.bfloat16, description=what)
            for name, prod, what in (
                ("zoo_bf16_softmax", zoo_bf16_softmax, "llama_softmax_bf16's softmax"),
                ("online_bf16_softmax", zoo_online_bf16_softmax, "llama_online_softmax_bf16's softmax"),
                ("online_float32_softmax", online_float32_softmax, "the same online softmax, float32 accumulators"))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="OUT", help="write the figures")
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for case in cases():
        cert = kcert.certify(case, 1024, seed=0, peer_rules=False)
        bias, v = cert.bias[0], cert.variance[0]
        quiet = (NOT_SIGNIFICANT, IDENTICAL, UNTESTED)
        flagged = sum(int((~np.isin(t.reason, quiet)).sum()) for t in bias.tests)  # significant, both statistics
        row = {"case": case.name, "what": case.description, "verdict": cert.verdict.value,
               "gates": {g: verdict.value for g, verdict in cert.gates.items()},
               "replicates": cert.provenance.replicates, "bias_buckets_significant": flagged,
               "largest_bias_effect_ulp": round(float(max(t.effect_ulp.max() for t in bias.tests)), 4),
               "largest_error_harm_ulp": {"prod": round(float(v.error_prod_units.max()), 3),
                                          "ref": round(float(v.error_ref_units.max()), 3)}}
        print(f"{case.name}: {row['verdict']} ({', '.join(f'{g} {x}' for g, x in row['gates'].items())}); "
              f"{row['replicates']} replicates; significant bias buckets {flagged}, largest effect "
              f"{row['largest_bias_effect_ulp']} ULP; largest error against float64 (harm ULP) "
              f"{row['largest_error_harm_ulp']}")
        rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": SHAPE, "seed": 0, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
