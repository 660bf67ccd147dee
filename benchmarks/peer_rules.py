"""What the peer-rule table costs (docs/kernelbench.md, "Peer rules"): each case certified with and without
``peer_rules``, and the table's own time (``PeerRulesResult.seconds``: 5 re-runs of ref, prod and the float64
oracle on the run's first draws, and the four rules).

    python benchmarks/peer_rules.py            # R = 1024, seed 0, one torch thread
    python benchmarks/peer_rules.py --replicates 256 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import kcert
from kcert.catalog import norms, softmax
from kcert.controls.shapes import blocked_matmul


def cases() -> list[kcert.Case]:
    rms = norms.RMSNORM.case("rmsnorm bf16 (1, 64, 512)", norms.rms_norm, shape=(1, 64, 512))
    sm = kcert.Case(name="softmax float32 (16, 1024)", ref=lambda x: torch.softmax(x, -1),
                    prod=lambda x: (lambda e: e / e.sum(-1, keepdim=True))(torch.exp(x - x.amax(-1, keepdim=True))),
                    inputs={"x": kcert.Gaussian((16, 1024), shift=0.1)}, dtype=torch.float32)
    mm = kcert.Case(name="matmul float32 (128, 256) x (256, 128)", ref=torch.matmul,
                    prod=lambda input, other: blocked_matmul(input, other),
                    inputs={"input": kcert.Gaussian((128, 256))}, weights={"other": kcert.Gaussian((256, 128))},
                    dtype=torch.float32)
    return [rms, sm, mm, softmax.SOFTMAX.case("catalogue softmax bf16", softmax.softmax)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| case | certify without (s) | with (s) | the table itself (s) | share of the run |")
    print("| --- | --- | --- | --- | --- |")
    for case in cases():
        kcert.certify(case, replicates=64, max_replicates=64, algebra_proof=False)  # warm-up: imports, compiles
        off, on, own = [], [], []
        for _ in range(args.repeats):
            for flag, store in ((False, off), (True, on)):
                started = time.perf_counter()
                cert = kcert.certify(case, replicates=args.replicates, max_replicates=args.replicates,
                                     algebra_proof=False, peer_rules=flag)
                store.append(time.perf_counter() - started)
                if flag:
                    own.append(cert.peer_rules.seconds)
        a, b, c = statistics.median(off), statistics.median(on), statistics.median(own)
        print(f"| {case.name} | {a:.2f} | {b:.2f} | {c:.3f} | {100 * c / b:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
