"""One zoo pair's rows for one module, forward and backward, at kcert's default R, with the zoo's vocabulary
changed (docs/model.md, "Study": whether a row's verdict comes from the 512 fixed embedding rows the zoo's
vocabulary gives every norm; benchmarks/model_vocab_bias.py computes that bias exactly for the norms alone).

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_vocab_row.py PAIR MODULE --vocab 8192

The zoo draws its weights in one seeded stream, so another vocabulary also changes the weights drawn after the
embedding table: a verdict that moves is consistent with the vocabulary's bias, not a proof of it.
"""

from __future__ import annotations

import argparse
import time

import torch

import kcert
import model_zoo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pair")
    ap.add_argument("module")
    ap.add_argument("--vocab", type=int, default=model_zoo.VOCAB)
    ap.add_argument("--findings-shown", type=int, default=4)
    args = ap.parse_args()
    model_zoo.VOCAB = args.vocab  # read by model_zoo.inputs and the configs below
    model_zoo._COMMON["vocab_size"] = args.vocab
    torch.set_num_threads(1)
    pair = model_zoo.pair(args.pair)
    ref, prod = model_zoo.models(pair)
    start = time.perf_counter()
    cert = kcert.certify_model(ref, prod, model_zoo.inputs(pair.arch), modules=kcert.Modules(names=[args.module]),
                               backward=True, end_to_end=False)
    for row in cert.rows:
        print(f"{row.module} {row.direction} (vocabulary {ref.config.vocab_size}): {row.verdict.value} "
              f"({row.deciding_gate or 'no gate decides'}; {row.figure}; R {row.certificate.provenance.replicates})")
        for bias in row.certificate.bias:
            for f in bias.findings()[:args.findings_shown]:
                print(f"    {bias.output} {f.label} {f.statistic}: {f.verdict.value}, {f.reason}; prod - ref "
                      f"{f.effect_ulp:.3f} ULP")
    print(f"{args.pair}: {len(cert.rows)} rows in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
