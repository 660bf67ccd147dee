"""The algebra gate's symbolic proof on every control: outcome, work units spent, seconds.

The proof's budget is deterministic (work units: symbolic elements read and written by the evaluator,
expression nodes simplified or evaluated; kcert.execution.symbolic.Deadline), so where a proof stops
does not depend on the machine. This script prints, per control, what the proof reached, how many
units it spent and how long it took here, and the units per second: the figures behind
``PROOF_BUDGET`` (docs/method.md, Gate 1).

    python benchmarks/proof_budget.py [--family F] [--budget UNITS]

``--budget`` runs with another budget (default: kcert's), e.g. a very large one to see what each
proof would spend unbounded.
"""

from __future__ import annotations

import argparse
import time

import torch

from kcert.controls.registry import all_controls
from kcert.execution import probes
from kcert.execution import proof as symbolic
from kcert.execution.algebra import evaluate_algebra
from kcert.gates.algebra import judge_algebra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append")
    parser.add_argument("--control", action="append")
    parser.add_argument("--budget", type=int, default=None, help="work units (default: kcert's PROOF_BUDGET)")
    args = parser.parse_args()
    if args.budget is not None:
        symbolic.PROOF_BUDGET = args.budget
    spent: list = []
    original = symbolic.Deadline

    class Recorded(original):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            spent.append(self)

    symbolic.Deadline = Recorded
    cpu = torch.device("cpu")
    print(f"budget {symbolic.PROOF_BUDGET:,} units, time guard {symbolic.PROOF_BUDGET_S:g} s")
    print("| control | outcome | reason | units | seconds | units/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for control in all_controls():
        if args.family and control.family not in args.family:
            continue
        if args.control and control.name not in args.control:
            continue
        try:
            case = control.build()
        except Exception as exc:  # noqa: BLE001 - an unavailable control: say so and go on
            print(f"| {control.name} | (not built: {type(exc).__name__}) | | | | |")
            continue
        weights = probes.draw_weights(case, 0, cpu)
        spent.clear()
        t = time.perf_counter()
        a = judge_algebra(evaluate_algebra(case, weights, 0, cpu))
        total = time.perf_counter() - t
        p = a.proof
        if p is None or not spent:
            print(f"| {control.name} | (no proof: {a.level}) | | | {total:.2f} | |")
            continue
        units = spent[-1].spent
        rate = units / p.seconds if p.seconds > 0 else float("nan")
        print(f"| {control.name} | {p.outcome} | {p.reason} | {units:,} | {p.seconds:.2f} | {rate:,.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
