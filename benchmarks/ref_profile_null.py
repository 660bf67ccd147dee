"""How far apart two equally biased sides' profiles fall by chance (docs/method.md, "The working precision's
own bias"): the null behind the diagnostic ``fail_against_ref_profile`` and the reason it is not a rule.

Two sides carry own biases on G buckets drawn independently from one law (prod's and ref's rounding biases of
equal quality landing on different buckets); the diagnostic's figure for prod's worst bucket is the ratio of the
two profiles' largest magnitudes (kcert.stats.bias.rank_matched_ref_bias at rank 1). Printed: P(ratio > lambda)
for laws with a light (normal), exponential-like (Laplace) and heavy (Student t3) tail, by G. A rule that
downgraded a FAIL whose ratio is at most lambda would still FAIL equally good sides at these rates, and a lambda
that keeps them rare at small G or heavy tails lets defects of a few times ref's bias through (docs/method.md).

    python benchmarks/ref_profile_null.py [--runs 20000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

from kcert.stats.bias import rank_matched_ref_bias

LAWS = {
    "normal": lambda rng, size: rng.standard_normal(size),
    "laplace": lambda rng, size: rng.laplace(size=size),
    "t3": lambda rng, size: rng.standard_t(3, size),
}
LAMBDAS = (1.0, 1.5, 2.0, 3.0, 4.0)
BUCKETS = (1, 4, 16, 64, 256, 1024)


def worst_ratio(prod: np.ndarray, ref: np.ndarray) -> float:
    """prod's largest own bias over ref's own bias at the same rank (the largest), through the library's
    function, so the printed null is the diagnostic's."""
    matched = rank_matched_ref_bias(prod, ref, np.ones(prod.size, bool))
    worst = int(np.argmax(np.abs(prod)))
    return float(np.abs(prod[worst]) / matched[worst])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"P(prod's largest own bias > lambda x ref's largest), two sides of one law, {args.runs} runs per row\n")
    print("| law | G | " + " | ".join(f"lambda {l:g}" for l in LAMBDAS) + " |")
    print("|---|---|" + "---|" * len(LAMBDAS))
    for name, draw in LAWS.items():
        for g in BUCKETS:
            ratios = np.array([worst_ratio(draw(rng, g), draw(rng, g)) for _ in range(args.runs)])
            print(f"| {name} | {g} | " + " | ".join(f"{np.mean(ratios > l):.4f}" for l in LAMBDAS) + " |")


if __name__ == "__main__":
    main()
