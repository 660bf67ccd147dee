"""Gate 1: do ref and prod compute the same real function? (docs/method.md, "Gate 1")

Identity test: evaluate both sides in real mode, in float64 and in float32, on probe draws and on
wider draws. Rounding discrepancies shrink by ~2**29 from float32 to float64; an algebraic
difference does not. Verdict per output:
- PASS when the float64 discrepancy is 0 or shrinks by at least ``rounding_shrink`` (2**19, half
  the 2**29 gap in orders of magnitude, leaving room for conditioning); the float32 discrepancy
  counts as at least 2**-24 (a float32 run that agrees exactly still allows one rounding);
- FAIL when it does not shrink like rounding and its relative size is at least ``fail_floor``;
- WARN when it does not shrink but stays below the floor (a tiny algebraic difference, e.g. a
  truncated constant).

Symbolic proof (execution/proof.py): ref and prod on tensors of real symbols at a small shape S,
``ref - prod`` simplified. "proved at shape S" / "disproved at shape S" (with a witness) when it
decides; otherwise the verdict rests on the identity test and says why the proof was not reached.
Precision ladder (execution/ladder.py, stats/ladder.py): when prod cannot run in real mode (a
Triton launch, a C++/CUDA extension, a custom op, a compiled backward) and no ``prod_math`` is given,
prod (and ref) run at every precision prod accepts on the same real inputs and are compared with the
float64 oracle; an error that stops at a floor no finer precision lowers is an algebraic difference.

``AlgebraResult.level`` names the evidence: "proof", "identity test", "precision ladder" or
"skipped" (no algebra test ran; with ``accept_untested`` the certificate's verdict then rests on the
bias and variance gates, and ``untested_limit`` says what is not tested).

This module only judges: the kernel runs are :func:`kcert.execution.algebra.evaluate_algebra`, whose
:class:`~kcert.execution.evidence.AlgebraEvidence` :func:`judge_algebra` reads.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..certificate import (
    AlgebraOutputResult,
    AlgebraProofResult,
    AlgebraResult,
    LadderOutputResult,
    LadderResult,
    LadderRungResult,
)
from ..diagnostics import Code, diagnostic
from ..execution.evidence import AlgebraEvidence, LadderMeasurement
from ..numbers import fmt
from ..stats import ladder as ladder_stats
from ..stats.identity import FAIL_FLOOR, ROUNDING_SHRINK, shrink
from ..stats.ulp import harm_format
from ..verdict import Verdict


def judge_algebra(evidence: AlgebraEvidence, accept_untested: bool = False,
                  bias_floor_ulp: float | None = None) -> AlgebraResult:
    """Gate 1 on what :func:`kcert.execution.algebra.evaluate_algebra` measured. The identity test is
    the check at the probe's own shapes; when the symbolic proof was tried, the verdict rests on it
    when it decides and agrees (see :func:`_combine` and docs/method.md). When prod could not run in
    real mode the precision ladder is judged instead (:func:`_judge_ladder`). ``accept_untested`` (or
    the case's ``accept_untested_algebra``): a SKIPPED result is marked accepted, with the limit stated
    in terms of the bias gate's ``bias_floor_ulp``."""
    result = _judge(evidence)
    if result.verdict is Verdict.SKIPPED and (accept_untested or evidence.accept_untested):
        floor = f"{bias_floor_ulp:g} ULP" if bias_floor_ulp is not None else "its ULP"
        limit = (f"algebraic differences below the bias gate's floor of {floor} (or that show no coherent bias "
                 f"and no heavier error tail) are not tested")
        if result.ladder is not None:
            res = [o for o in result.ladder.outputs if o.outcome == ladder_stats.UNRESOLVED and o.judged]
            if res:
                o = max(res, key=lambda o: o.resolution_harm)
                limit += (f"; the {_where(o, result.ladder)} bounds them to {_bound(o, result.ladder.working_dtype)}, "
                          f"no floor measured")
        return replace(result, untested_accepted=True, untested_limit=limit,
                       reason=f"{result.reason} [accepted: {limit}]")
    return result


def _judge(evidence: AlgebraEvidence) -> AlgebraResult:
    points, wide_points = evidence.points, evidence.wide_points
    n_points = points + wide_points + evidence.small_points
    if evidence.unavailable:
        skipped = AlgebraResult(verdict=Verdict.SKIPPED, reason="; ".join(evidence.unavailable), level="skipped",
                                points=points, wide_points=wide_points, ref_side=evidence.ref, prod_side=evidence.prod)
        if evidence.no_oracle is not None:
            ref_side = next((u for u in evidence.unavailable if u.startswith("ref ")), "")
            if evidence.prod_opaque:  # nothing about real mode for a prod that is opaque anyway
                prod_side = f"prod is opaque ({evidence.prod_opaque}), so only the precision ladder could test it"
            else:
                prod_side = next((u for u in evidence.unavailable if u.startswith("prod ")), "")
            tried = "; ".join(x for x in (ref_side or f"ref: {evidence.no_oracle}", prod_side) if x)
            return replace(skipped, reason=f"no algebra test could run: no float64 oracle for the precision ladder "
                                           f"to compare prod with: {tried}. What you can do: give the case a "
                                           f"float64 definition of ref's function (Case(oracle=...)); or accept "
                                           f"the untested algebra explicitly (Case(accept_untested_algebra=True), "
                                           f"--accept-untested-algebra)")
        if evidence.ladder is None:
            return skipped  # prod runs in real mode; ref has no oracle: nothing to compare prod with
        return _judge_ladder(evidence.ladder, evidence.dtype, skipped, evidence.training_dtype, evidence.prod_opaque)

    outputs = []
    for o in evidence.outputs:
        d64, d32 = o.discrepancy_float64, o.discrepancy_float32
        if d64 == 0 or shrink(d64, d32) >= ROUNDING_SHRINK:
            v = Verdict.PASS
        elif d64 >= FAIL_FLOOR:
            v = Verdict.FAIL
        else:
            v = Verdict.WARN
        outputs.append(AlgebraOutputResult(output=o.name, discrepancy_float64=d64, discrepancy_float32=d32, verdict=v))
    verdict = Verdict.worst(o.verdict for o in outputs)
    worst = max(outputs, key=lambda o: (o.verdict.severity, o.discrepancy_float64))
    if verdict is Verdict.PASS and worst.discrepancy_float64 == 0:
        reason = (f"identical in float64 real mode (float32: {worst.discrepancy_float32:.3g}) on "
                  f"{n_points} points: same real function")
    elif verdict is Verdict.PASS:
        reason = (f"real-mode discrepancy {worst.discrepancy_float64:.3g} (float64) vs {worst.discrepancy_float32:.3g} "
                  f"(float32): shrinks like rounding; same real function on {n_points} points")
    else:
        reason = (f"{worst.output}: real-mode relative discrepancy {worst.discrepancy_float64:.3g} in float64 and "
                  f"{worst.discrepancy_float32:.3g} in float32 (shrink {worst.shrink:.3g}, rounding gives "
                  f">= {ROUNDING_SHRINK:.3g}): ref and prod compute different real functions")
    diags = (diagnostic(Code.ILL_CONDITIONED_IDENTITY, reason),) if verdict is Verdict.WARN else ()
    identity = AlgebraResult(verdict=verdict, reason=reason, level="identity test", points=points,
                             wide_points=wide_points, ref_side=evidence.ref, prod_side=evidence.prod,
                             outputs=tuple(outputs), fail_floor=FAIL_FLOOR, rounding_shrink=ROUNDING_SHRINK,
                             diagnostics=diags, small_points=evidence.small_points)
    if evidence.proof is None:
        return identity
    return _combine(identity, evidence.proof)


def _combine(identity: AlgebraResult, attempt: AlgebraProofResult) -> AlgebraResult:
    """The verdict from both levels. The proof speaks for shape S only and the identity test for the
    probe's shapes: when they agree the verdict rests on the proof; when the proof decides one way and
    the identity test the other, the kernels behave differently at the two shapes (a size-dependent
    code path), which a person must review: never a silent PASS."""
    v = identity.verdict
    if attempt.outcome == "proved" and v is Verdict.PASS:
        return replace(identity, level="proof", proof=attempt,
                       reason=f"{attempt.note}; the identity test at the probe shape agrees ({identity.reason})")
    if attempt.outcome == "disproved" and v is Verdict.FAIL:
        return replace(identity, level="proof", proof=attempt,
                       reason=f"{attempt.note}; the identity test at the probe shape agrees ({identity.reason})")
    if attempt.outcome == "disproved":
        detail = (f"{attempt.note}; yet the identity test finds the same real function at the probe shape "
                  f"({identity.reason})")
        return replace(identity, verdict=Verdict.WARN, level="proof", proof=attempt, reason=detail,
                       diagnostics=identity.diagnostics + (diagnostic(Code.PROOF_DISAGREES_WITH_IDENTITY, detail),))
    if attempt.outcome == "proved":
        detail = f"{identity.reason}; yet {attempt.note}"
        return replace(identity, proof=attempt, reason=detail,
                       diagnostics=identity.diagnostics + (diagnostic(Code.PROOF_DISAGREES_WITH_IDENTITY, detail),))
    return replace(identity, proof=attempt,
                   reason=f"{identity.reason} [symbolic proof not reached ({attempt.reason}): {attempt.note}]")


def _groups(m: LadderMeasurement) -> dict[str, tuple[int, ...]]:
    """Point indices per group: the probe and wide draws together (the ladder's original points), the
    small-magnitude draws apart (their rounding can be larger or smaller: a floor at one group's points
    must not hide behind the other's)."""
    n = m.points + m.wide_points
    total = len(m.point_names) or n
    groups = {"probe": tuple(range(n))}
    if total > n:
        groups["small"] = tuple(range(n, total))
    return groups


def _group_rungs(accepted, j: int, idx: tuple[int, ...]) -> list[ladder_stats.Rung] | None:
    """Output ``j``'s rungs restricted to the points ``idx`` (None when the per-point errors are missing)."""
    rungs = []
    for r in accepted:
        if not r.prod_point_errors:
            return None
        prod = max(r.prod_point_errors[j][i] for i in idx)
        ref = pair = None
        if r.ref_error[j] is not None and r.ref_point_errors:
            ref = _max_or_none(r.ref_point_errors[j][i] for i in idx)
            if r.pair_point_errors:
                pair = _max_or_none(r.pair_point_errors[j][i] for i in idx)
        rungs.append(ladder_stats.Rung(r.dtype, r.output_dtypes[j], prod, ref, pair))
    return rungs


def _max_or_none(values):
    """The largest value, or None when one is missing (non-finite)."""
    values = list(values)
    return None if any(v is None for v in values) else max(values)


def _judge_output(m: LadderMeasurement, accepted, j: int, name: str, working: str, training: str):
    harm = harm_format(accepted[0].output_dtypes[j], training)
    by_group = {g: rungs for g, idx in _groups(m).items() if (rungs := _group_rungs(accepted, j, idx))}
    if not by_group:  # a measurement without per-point errors: the maxima over all points
        by_group = {"probe": [ladder_stats.Rung(r.dtype, r.output_dtypes[j], r.prod_error[j], r.ref_error[j])
                              for r in accepted]}
    decisions = {g: ladder_stats.decide(rungs, working, harm) for g, rungs in by_group.items()}
    group, d = ladder_stats.combine_groups(decisions)
    rung = accepted[d.judged]
    worst = ""
    if rung.prod_point_errors and m.point_names:
        idx = _groups(m).get(group, ())
        if idx:
            worst = m.point_names[max(idx, key=lambda i: rung.prod_point_errors[j][i])]
    return LadderOutputResult(output=name, outcome=d.outcome, judged=rung.dtype, amplification=d.amplification,
                              resolution=d.resolution, yardsticks=d.yardsticks,
                              error=by_group[group][d.judged].prod_error, internal=accepted[d.internal[d.judged]].dtype,
                              resolution_harm=d.resolution_harm, harm_format=harm, amplifications=d.amplifications,
                              points=group, worst_point=worst, bound=d.bound)


def _judge_ladder(m: LadderMeasurement, working: str, skipped: AlgebraResult, training: str = "bfloat16",
                  opaque: str = "") -> AlgebraResult:
    """The precision ladder for a prod real mode cannot run (docs/method.md, "The precision ladder");
    ``working``: the case's dtype; ``training``: its training format (the harm unit's); ``opaque``: why
    real mode could not follow prod."""
    accepted = [r for r in m.rungs if r.accepted]
    outputs = []
    for j, name in enumerate(m.outputs):
        dtypes = [r.output_dtypes[j] for r in accepted]
        if not accepted or any(d not in ladder_stats.UNIT_ROUNDOFF for d in dtypes):
            outputs.append(LadderOutputResult(output=name,
                                              outcome="not compared" if accepted else ladder_stats.UNRESOLVED))
            continue
        outputs.append(_judge_output(m, accepted, j, name, working, training))
    ladder = LadderResult(
        rungs=tuple(LadderRungResult(dtype=r.dtype, accepted=r.accepted, reason=r.reason, prod_error=r.prod_error,
                                     ref_error=r.ref_error, output_dtypes=r.output_dtypes, ref_reason=r.ref_reason)
                    for r in m.rungs),
        outputs=tuple(outputs), oracle=m.oracle, grid=m.grid, working_dtype=working, points=m.points,
        wide_points=m.wide_points, rounding_multiple=ladder_stats.ROUNDING_MULTIPLE, small_points=m.small_points)
    judged = [o for o in outputs if o.outcome != "not compared"]
    verdict = Verdict.worst(o.verdict for o in judged) if judged else Verdict.SKIPPED
    decided = [o for o in judged if o.outcome != ladder_stats.UNRESOLVED]
    unresolved = [o for o in judged if o.outcome == ladder_stats.UNRESOLVED]
    n_points = m.points + m.wide_points + m.small_points
    prod_is = f"prod ({opaque})" if opaque else "prod (opaque: kcert cannot evaluate it in float64)"
    tried = _tried(m)
    if not accepted:
        reason = (f"no algebra test could run: {prod_is} accepted no precision tried: {tried}. What you can do: "
                  f"{_REMEDIES}")
    elif decided:
        worst = max(decided, key=lambda o: (o.verdict.severity, o.amplification))
        reason = _decided_reason(worst, ladder, n_points, prod_is, tried)
        if unresolved:
            reason += "; " + _unresolved_reason(unresolved, ladder, n_points, prod_is, tried, short=True)
    else:
        reason = _unresolved_reason(unresolved, ladder, n_points, prod_is, tried)
    level = "precision ladder" if decided else "skipped"
    return AlgebraResult(verdict=verdict, reason=reason, level=level, points=m.points, wide_points=m.wide_points,
                         ref_side=f"oracle: {m.oracle}",
                         prod_side=f"prod at {', '.join(ladder.accepted) or 'no precision'}", ladder=ladder,
                         small_points=m.small_points)


_REMEDIES = ("let the kernel take float64 inputs and compute in float64 (then float64 is a finer rung), or run it "
             "where it computes finer than the case's precision (bfloat16 inputs on a GPU, float32 inside); give "
             "its math in torch (Case(prod_math=...)); or accept the bound explicitly "
             "(Case(accept_untested_algebra=True), --accept-untested-algebra)")


def _tried(m: LadderMeasurement) -> str:
    return ", ".join(f"{r.dtype} ({'accepted' if r.accepted else r.reason})" for r in m.rungs)


def _where(o: LadderOutputResult, ladder: LadderResult) -> str:
    """How the judged rung was judged, in words."""
    if len(ladder.accepted) == 1:
        return f"same-precision comparison at {o.judged}"
    if o.verdict not in (Verdict.FAIL, Verdict.WARN) and o.internal == o.judged == ladder.accepted[0]:
        return f"same-precision comparison at {o.judged} (the finer rungs compute at {o.judged} too)"
    saturated = f", computed at {o.internal}" if o.internal != o.judged else ""
    return f"precision ladder at {o.judged} inputs{saturated}"


def _bound(o: LadderOutputResult, working: str) -> str:
    u = ladder_stats.UNIT_ROUNDOFF.get(working)
    harm = f"{fmt(o.resolution_harm, 2)} {o.harm_format} harm ULPs at the output's peak"
    if working == o.harm_format or u is None:
        return f"{o.resolution:.2g} relative ({harm})"
    return f"{o.resolution:.2g} relative ({fmt(o.resolution / u, 2)} {working} ULPs, {harm})"


def _claim(o: LadderOutputResult) -> str:
    if o.bound == "ref":
        return "prod - ref itself bounds any algebraic difference at these points to"
    if o.bound == "oracle":
        return "prod's own error against the oracle bounds any algebraic difference at these points to"
    return "An algebraic difference would have failed above"


def _decided_reason(o: LadderOutputResult, ladder: LadderResult, n_points: int, prod_is: str, tried: str) -> str:
    m = ladder.rounding_multiple
    where = _where(o, ladder)
    group = " (small-magnitude points)" if o.points == "small" else ""
    if o.verdict is Verdict.PASS:
        return (f"{where}: {prod_is} agrees with the float64 oracle to {o.error:.2g} relative at {o.judged}, "
                f"{fmt(o.amplification, 3)}x the rounding of a correct kernel computing at {o.internal} "
                f"(<= {m:g}) on {n_points} points: rounding. {_claim(o)} {_bound(o, ladder.working_dtype)} "
                f"({o.output}; rungs: {tried})")
    at = f" at {o.worst_point}" if o.worst_point else ""
    return (f"{o.output}: {where}{group}: prod's error against the float64 oracle, {o.error:.2g} relative, is "
            f"{fmt(o.amplification, 3)}x the rounding of a correct kernel computing at {o.internal} (> {m:g}), largest"
            f"{at}: a floor that rounding does not explain: prod and ref compute different real functions (or prod "
            f"computes below its inputs' precision, e.g. TF32 dots: docs/method.md; rungs: {tried})")


def _unresolved_reason(unresolved, ladder: LadderResult, n_points: int, prod_is: str, tried: str,
                       short: bool = False) -> str:
    o = max(unresolved, key=lambda o: o.resolution_harm)
    m = ladder.rounding_multiple
    names = ", ".join(u.output for u in unresolved)
    text = (f"no algebra test finer than the bias and variance gates for {names}: tried for {prod_is}: the "
            f"{_where(o, ladder)} on {n_points} points (rungs: {tried}); prod's error is within {m:g}x the rounding "
            f"at every rung (no floor measured), so an algebraic difference is bounded by {_bound(o, ladder.working_dtype)}, "
            f"above the {fmt(ladder_stats.RESOLUTION_HARM_FRACTION, 2)} harm ULP an algebra test needs")
    return text if short else f"{text}. What you can do: {_REMEDIES}"
