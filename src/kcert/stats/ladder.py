"""The precision ladder's arithmetic (docs/method.md, Gate 1, "The precision ladder").

prod runs at several precisions (rungs) on the same real inputs; each rung's error against the
float64 oracle is known, for prod and, where it ran, for ref. Rounding error falls with the format's
unit roundoff; an algebraic difference leaves a floor that no finer format lowers. Per output:

1. **Yardstick** at a rung: the error a correct implementation makes there, ``max(ref's error,
   u * a)``: ``u`` the unit roundoff of the output's dtype at that rung, ``a`` ref's error in unit
   roundoffs at the next coarser rung where ref ran (at least 1). At float64 ref is often the oracle
   itself (error 0): the coarser rung's amplification carries the function's conditioning down.
2. **Resolved rungs.** A rung is resolved when prod's error there is at most ``1/M`` of the yardstick
   of every coarser rung: prod demonstrably computes beyond each coarser precision (a kernel that
   works in float32 whatever its inputs is not resolved at float64: its float64 outputs carry float32
   errors). The judged rung is the finest resolved rung (the coarsest rung counts as resolved).
3. **Verdict.** ``K = prod's error / yardstick`` at the judged rung. ``K <= M``: the error there is
   rounding; an algebraic difference, if any, is below the *resolution* ``M * yardstick`` (relative
   to the output's peak). ``K > M``: a floor that rounding at that precision does not explain, with
   at least two rungs run: FAIL (WARN under the identity test's fail floor of 1e-9 relative, which
   only a float64 rung reaches).
4. **Resolving power.** A PASS is an algebra test only when prod's error at the judged rung is at
   least ``M`` times below the working precision's unit roundoff: the agreement shown is finer than
   anything the bias and variance gates see. Otherwise (one bfloat16 rung; a float32 kernel that
   computes float64 inputs in float32 in a float32 case) the outcome is "not resolved". A single
   rung with ``K > M`` is "not resolved" too: nothing separates a floor from a lower internal
   precision there.

``M = ROUNDING_MULTIPLE = 16`` (measured in docs/method.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}
ROUNDING_MULTIPLE = 16.0  # M: how far below a coarser yardstick a rung resolves; K above it is a floor
FAIL_FLOOR = 1e-9  # as the identity test: a smaller unexplained floor WARNs

PASS, FAIL, WARN, UNRESOLVED = "PASS", "FAIL", "WARN", "not resolved"


@dataclass(frozen=True)
class Rung:
    """One precision's errors for one output, relative to the oracle's peak. ``output_dtype``: the
    dtype prod returned that output in at this rung (a float32 loss from bfloat16 inputs)."""

    dtype: str
    output_dtype: str
    prod_error: float
    ref_error: float | None  # None: ref did not run at this precision

    @property
    def unit_roundoff(self) -> float:
        return UNIT_ROUNDOFF[self.output_dtype]


@dataclass(frozen=True)
class LadderDecision:
    outcome: str  # PASS, FAIL, WARN or "not resolved"
    judged: int  # index of the judged rung in the rungs given
    yardsticks: tuple[float, ...]  # per rung
    amplification: float  # K at the judged rung
    resolution: float  # M * yardstick at the judged rung


def yardsticks(rungs: list[Rung]) -> tuple[float, ...]:
    """Per rung: max(ref's error, u * ref's amplification at the next coarser rung where ref ran)."""
    out = []
    carried = 1.0
    for r in rungs:
        u = r.unit_roundoff
        ref = 0.0 if r.ref_error is None else r.ref_error
        out.append(max(ref, u * carried))
        if r.ref_error is not None:
            carried = max(1.0, r.ref_error / u)
    return tuple(out)


def decide(rungs: list[Rung], working_dtype: str, multiple: float = ROUNDING_MULTIPLE,
           fail_floor: float = FAIL_FLOOR) -> LadderDecision:
    """The ladder's decision for one output; ``rungs`` coarse to fine, finite prod errors."""
    if not rungs:
        raise ValueError("the ladder needs at least one rung")
    ys = yardsticks(rungs)
    judged = 0
    for i in range(1, len(rungs)):
        if rungs[i].prod_error <= min(ys[:i]) / multiple:
            judged = i
    e, y = rungs[judged].prod_error, ys[judged]
    k = e / y if y > 0 else (0.0 if e == 0 else math.inf)
    resolution = multiple * y
    if k > multiple:
        outcome = UNRESOLVED if len(rungs) < 2 else (FAIL if e >= fail_floor else WARN)
    elif e * multiple < UNIT_ROUNDOFF.get(working_dtype, 0.0):
        outcome = PASS
    else:
        outcome = UNRESOLVED
    return LadderDecision(outcome, judged, ys, k, resolution)
