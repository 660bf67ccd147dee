"""The precision ladder's arithmetic (docs/method.md, Gate 1, "The precision ladder").

prod runs at one or several precisions (rungs) on the same real inputs; each rung's error against the
float64 oracle is known, for prod and, where it ran, for ref at the same precision. Rounding error
falls with the format's unit roundoff; an algebraic difference leaves a floor that no finer format
lowers. Per output:

1. **Own yardstick** at a rung: the error a correct implementation makes when it computes at the
   rung's precision, ``max(ref's error, u * a)``: ``u`` the unit roundoff of the output's dtype at
   that rung, ``a`` ref's error in unit roundoffs at the next coarser rung where ref ran (at least 1).
   At float64 ref is often the oracle itself (error 0): the coarser rung's amplification carries the
   function's conditioning down.
2. **A fixed internal precision is not a floor.** A kernel that computes in float32 whatever its
   inputs (a Triton kernel's ``tl.float32`` upcast, a numpy float32 body) returns float64 outputs with
   float32-sized errors. A rung is *saturated* at a coarser rung ``j`` when prod's error there is not
   at least ``M`` times below both rung ``j``'s yardstick and its unit roundoff: prod does not
   demonstrably compute beyond rung ``j``'s precision. A saturated rung is judged against the largest
   yardstick of the coarser rungs it saturates at (the rounding of a computation at that precision on
   these very inputs), never against its own format's: no correct kernel fails for not beating its
   own internal precision. Comparing with the unit roundoff too matters when the coarser yardstick is
   inflated by the rounding of an input path (large rotary angles computed at float32 on both sides):
   an error a few float32 roundoffs wide at float64 inputs is still a float32 computation.
3. **Every rung is a test.** ``K = prod's error / yardstick`` at every rung; any ``K > M`` is a floor
   that rounding at the precision the rung computes at does not explain: FAIL (WARN under the identity
   test's fail floor of 1e-9 relative, which only a float64 rung reaches). With one rung this is the
   *same-precision comparison*: prod against ref at the working precision, on the same points.
4. **Resolution.** Otherwise an algebraic difference ``f``, if any, is below ``M`` times the yardstick
   (relative to the output's peak): a larger one would have failed. The observations bound it
   directly too: ``prod - oracle = f + prod's rounding`` and, where ref ran at the rung, ``prod - ref
   = f + (prod's rounding - ref's)``; an ``f`` of ``M`` times the smaller of the two observed maxima
   would need the roundings to cancel ``M - 1`` times as much, at every point, in the direction that
   hides it. These direct bounds (floored at the unit roundoff of the precision the rung computes at)
   are what resolve a prod far more accurate than ref (a float64 kernel against a ref that upcasts to
   float32) and a kernel whose error is a rounding ref shares (RoPE angles computed at float32 on both
   sides: each side's error 1.6e-4 relative, prod - ref a few 1e-7). The rung with the finest bound
   is the *judged* one. PASS when that resolution lies far below the harm unit: at most
   :data:`RESOLUTION_HARM_FRACTION` of the harm format's unit roundoff (``resolution / u_harm`` bounds
   the difference in harm ULPs at the output's peak). Otherwise "not resolved": no algebra test finer
   than what the bias and variance gates see.

``M = ROUNDING_MULTIPLE = 16`` and the harm fraction are measured in docs/method.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}
ROUNDING_MULTIPLE = 16.0  # M: how far below a coarser yardstick a rung resolves; K above it is a floor
FAIL_FLOOR = 1e-9  # as the identity test: a smaller unexplained floor WARNs
# A resolution (relative to the output's peak) of at most this fraction of the harm format's unit
# roundoff is an algebra test: the difference it cannot exclude is under a quarter of a harm ULP at the
# peak, the bias gate's own floor (docs/method.md, "The same-precision comparison").
RESOLUTION_HARM_FRACTION = 0.25

PASS, FAIL, WARN, UNRESOLVED = "PASS", "FAIL", "WARN", "not resolved"


@dataclass(frozen=True)
class Rung:
    """One precision's errors for one output, relative to the oracle's peak. ``output_dtype``: the
    dtype prod returned that output in at this rung (a float32 loss from bfloat16 inputs)."""

    dtype: str
    output_dtype: str
    prod_error: float
    ref_error: float | None  # None: ref did not run at this precision
    pair_error: float | None = None  # max |prod - ref| / max |oracle|; None where ref did not run

    @property
    def unit_roundoff(self) -> float:
        return UNIT_ROUNDOFF[self.output_dtype]


@dataclass(frozen=True)
class LadderDecision:
    """The ladder's decision for one output.

    ``judged``: the rung the outcome rests on (the failing rung with the largest K, or the rung with
    the finest resolution). ``yardsticks``: per rung, the yardstick prod was judged against;
    ``internal``: per rung, the index of the coarser rung whose precision that yardstick is (the
    rung's own index when it is not saturated). ``amplifications``: K per rung. ``resolution``: at
    the judged rung, ``M`` times the smallest of the yardstick and the direct bounds, relative to the
    output's peak; ``bound`` says which gave it ("yardstick", "oracle": prod's own error, "ref": the
    observed ``prod - ref``); ``resolution_harm``: the same in units of the harm format's unit roundoff
    (an upper bound in harm ULPs at the peak)."""

    outcome: str  # PASS, FAIL, WARN or "not resolved"
    judged: int
    yardsticks: tuple[float, ...]
    internal: tuple[int, ...]
    amplifications: tuple[float, ...]
    resolution: float
    resolution_harm: float
    bound: str = "yardstick"

    @property
    def amplification(self) -> float:
        """K at the judged rung."""
        return self.amplifications[self.judged]


def own_yardsticks(rungs: list[Rung]) -> tuple[float, ...]:
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


def _ratio(e: float, y: float) -> float:
    return e / y if y > 0 else (0.0 if e == 0 else math.inf)


def decide(rungs: list[Rung], working_dtype: str, harm_dtype: str | None = None,
           multiple: float = ROUNDING_MULTIPLE, fail_floor: float = FAIL_FLOOR,
           harm_fraction: float = RESOLUTION_HARM_FRACTION) -> LadderDecision:
    """The ladder's decision for one output; ``rungs`` coarse to fine, finite prod errors.
    ``harm_dtype``: the format whose unit roundoff is the harm unit (default: the working dtype)."""
    if not rungs:
        raise ValueError("the ladder needs at least one rung")
    own = own_yardsticks(rungs)
    yardsticks, internal = [], []
    for i, r in enumerate(rungs):
        # the coarser precisions prod may compute this rung in: those it does not demonstrably beat
        saturated = [j for j in range(i)
                     if r.prod_error > min(own[j], rungs[j].unit_roundoff) / multiple]
        # prod computes at the coarsest precision it does not demonstrably beat, and is judged against
        # the largest rounding any of those precisions makes on these inputs
        internal.append(min(saturated, default=i))
        yardsticks.append(max([own[j] for j in saturated] + [own[i]]))
    ks = tuple(_ratio(r.prod_error, y) for r, y in zip(rungs, yardsticks))
    harm_u = UNIT_ROUNDOFF.get(harm_dtype or working_dtype, UNIT_ROUNDOFF.get(working_dtype, 0.0))
    failing = [i for i, k in enumerate(ks) if k > multiple]
    # the direct bounds' floor: the unit roundoff of the precision the rung computes at (a saturated
    # rung computes at a coarser one: prod and ref bitwise equal there bound a difference to its rounding)
    floors = [rungs[j].unit_roundoff for j in internal]
    candidates = [{"yardstick": y, "oracle": max(r.prod_error, f),
                   **({"ref": max(r.pair_error, f)} if r.pair_error is not None else {})}
                  for r, y, f in zip(rungs, yardsticks, floors)]
    sources = [min(c, key=lambda k: (c[k], k != "yardstick")) for c in candidates]  # ties: the yardstick
    bounds = [c[k] for c, k in zip(candidates, sources)]
    if failing:
        judged = max(failing, key=lambda i: ks[i])
        outcome = FAIL if rungs[judged].prod_error >= fail_floor else WARN
    else:
        judged = min(range(len(rungs)), key=lambda i: (bounds[i], i))  # ties: the rung computing there
        resolution_harm = multiple * bounds[judged] / harm_u if harm_u > 0 else math.inf
        outcome = PASS if resolution_harm <= harm_fraction else UNRESOLVED
    resolution = multiple * bounds[judged]
    return LadderDecision(outcome, judged, tuple(yardsticks), tuple(internal), ks, resolution,
                          resolution / harm_u if harm_u > 0 else math.inf,
                          "yardstick" if failing else sources[judged])


_SEVERITY = {PASS: 0, UNRESOLVED: 1, WARN: 2, FAIL: 3}


def combine_groups(decisions: dict[str, LadderDecision], resolution_group: str = "probe") -> tuple[str, LadderDecision]:
    """One output's decision over its point groups (each judged on its own: a floor at one group's
    points is not hidden by another group's larger rounding). A FAIL or WARN in any group decides (the
    largest K among the worst); otherwise the outcome and resolution are ``resolution_group``'s: the
    probe's own regime is where the resolution is a claim about the certified inputs."""
    worst = max(decisions, key=lambda g: (_SEVERITY[decisions[g].outcome], decisions[g].amplification))
    if decisions[worst].outcome in (FAIL, WARN) or resolution_group not in decisions:
        return worst, decisions[worst]
    return resolution_group, decisions[resolution_group]
