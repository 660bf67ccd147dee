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

from dataclasses import replace

from ..certificate import (
    AlgebraOutputResult,
    AlgebraProofResult,
    AlgebraResult,
    LadderOutputResult,
    LadderResult,
    LadderRungResult,
)
from ..diagnostics import diagnostic
from ..execution.evidence import AlgebraEvidence, LadderMeasurement
from ..stats import ladder as ladder_stats
from ..stats.identity import FAIL_FLOOR, ROUNDING_SHRINK, shrink
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
            res = [o.resolution for o in result.ladder.outputs if o.outcome == ladder_stats.UNRESOLVED]
            if res:
                limit += f"; the precision ladder resolved no finer than {max(res):.2g} relative"
        return replace(result, untested_accepted=True, untested_limit=limit,
                       reason=f"{result.reason} [accepted: {limit}]")
    return result


def _judge(evidence: AlgebraEvidence) -> AlgebraResult:
    points, wide_points = evidence.points, evidence.wide_points
    if evidence.unavailable:
        skipped = AlgebraResult(Verdict.SKIPPED, "; ".join(evidence.unavailable), "skipped", points, wide_points,
                                evidence.ref, evidence.prod)
        if evidence.no_oracle is not None:
            return replace(skipped, reason=f"{skipped.reason}; no precision ladder either: no float64 oracle "
                                           f"({evidence.no_oracle})")
        if evidence.ladder is None:
            return skipped  # prod runs in real mode; ref has no oracle: nothing to compare prod with
        return _judge_ladder(evidence.ladder, evidence.dtype, skipped)

    outputs = []
    for o in evidence.outputs:
        d64, d32 = o.discrepancy_float64, o.discrepancy_float32
        if d64 == 0 or shrink(d64, d32) >= ROUNDING_SHRINK:
            v = Verdict.PASS
        elif d64 >= FAIL_FLOOR:
            v = Verdict.FAIL
        else:
            v = Verdict.WARN
        outputs.append(AlgebraOutputResult(o.name, d64, d32, v))
    verdict = Verdict.worst(o.verdict for o in outputs)
    worst = max(outputs, key=lambda o: (o.verdict.severity, o.discrepancy_float64))
    if verdict is Verdict.PASS and worst.discrepancy_float64 == 0:
        reason = (f"identical in float64 real mode (float32: {worst.discrepancy_float32:.3g}) on "
                  f"{points + wide_points} points: same real function")
    elif verdict is Verdict.PASS:
        reason = (f"real-mode discrepancy {worst.discrepancy_float64:.3g} (float64) vs {worst.discrepancy_float32:.3g} "
                  f"(float32): shrinks like rounding; same real function on {points + wide_points} points")
    else:
        reason = (f"{worst.output}: real-mode relative discrepancy {worst.discrepancy_float64:.3g} in float64 and "
                  f"{worst.discrepancy_float32:.3g} in float32 (shrink {worst.shrink:.3g}, rounding gives "
                  f">= {ROUNDING_SHRINK:.3g}): ref and prod compute different real functions")
    diags = (diagnostic("ill_conditioned_identity", reason),) if verdict is Verdict.WARN else ()
    identity = AlgebraResult(verdict, reason, "identity test", points, wide_points, evidence.ref,
                             evidence.prod, tuple(outputs), FAIL_FLOOR, ROUNDING_SHRINK, diags)
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
                       diagnostics=identity.diagnostics + (diagnostic("proof_disagrees_with_identity", detail),))
    if attempt.outcome == "proved":
        detail = f"{identity.reason}; yet {attempt.note}"
        return replace(identity, proof=attempt, reason=detail,
                       diagnostics=identity.diagnostics + (diagnostic("proof_disagrees_with_identity", detail),))
    return replace(identity, proof=attempt,
                   reason=f"{identity.reason} [symbolic proof not reached ({attempt.reason}): {attempt.note}]")


def _judge_ladder(m: LadderMeasurement, working: str, skipped: AlgebraResult) -> AlgebraResult:
    """The precision ladder for a prod real mode cannot run (docs/method.md, "The precision ladder");
    ``working``: the case's dtype."""
    accepted = [r for r in m.rungs if r.accepted]
    outputs = []
    for j, name in enumerate(m.outputs):
        dtypes = [r.output_dtypes[j] for r in accepted]
        if not accepted or any(d not in ladder_stats.UNIT_ROUNDOFF for d in dtypes):
            outputs.append(LadderOutputResult(name, "not compared" if accepted else ladder_stats.UNRESOLVED))
            continue
        rungs = [ladder_stats.Rung(r.dtype, r.output_dtypes[j], r.prod_error[j], r.ref_error[j]) for r in accepted]
        d = ladder_stats.decide(rungs, working)
        outputs.append(LadderOutputResult(name, d.outcome, rungs[d.judged].dtype, d.amplification, d.resolution,
                                          d.yardsticks, rungs[d.judged].prod_error))
    ladder = LadderResult(
        tuple(LadderRungResult(r.dtype, r.accepted, r.reason, r.prod_error, r.ref_error, r.output_dtypes, r.ref_reason)
              for r in m.rungs),
        tuple(outputs), m.oracle, m.grid, working, m.points, m.wide_points, ladder_stats.ROUNDING_MULTIPLE)
    judged = [o for o in outputs if o.outcome != "not compared"]
    verdict = Verdict.worst(o.verdict for o in judged) if judged else Verdict.SKIPPED
    resolved = [o for o in judged if o.outcome != ladder_stats.UNRESOLVED]
    tried = ", ".join(f"{r.dtype} ({'accepted' if r.accepted else r.reason})" for r in m.rungs)
    unresolved = [o for o in judged if o.outcome == ladder_stats.UNRESOLVED]
    if not accepted:
        reason = f"{skipped.reason}; the precision ladder could not run: prod accepted no precision tried: {tried}"
    elif not resolved:
        reason = f"no algebra test could run: {skipped.reason}; and the precision ladder " \
                 f"({', '.join(ladder.accepted)}) does not resolve below {working}"
    else:
        worst = max(resolved, key=lambda o: (o.verdict.severity, o.amplification))
        if worst.verdict is Verdict.PASS:
            reason = (f"precision ladder ({ladder.text}): at {worst.judged} prod agrees with the float64 oracle to "
                      f"{worst.error:.2g} relative, {worst.amplification:.3g}x the rounding yardstick "
                      f"(<= {ladder.rounding_multiple:g}): rounding; a floor above {worst.resolution:.2g} relative "
                      f"would have failed ({worst.output}, {m.points + m.wide_points} points)")
        else:
            reason = (f"{worst.output}: precision ladder ({ladder.text}): prod's error stops at a floor "
                      f"{worst.amplification:.3g}x the rounding yardstick at {worst.judged} "
                      f"(> {ladder.rounding_multiple:g}) that no finer precision lowers: prod and ref compute "
                      f"different real functions (or prod computes below its inputs' precision, e.g. TF32 dots: "
                      f"docs/method.md)")
    if accepted and unresolved:
        o = max(unresolved, key=lambda o: o.resolution)
        refused = "; ".join(f"{r.dtype}: {r.reason}" for r in m.rungs if not r.accepted)
        reason += (f"; not resolved for {', '.join(u.output for u in unresolved)}: prod's error did not fall "
                   f"{ladder.rounding_multiple:g}x below {working}'s unit roundoff at any precision (judged at "
                   f"{o.judged}, K = {o.amplification:.3g})" + (f"; not used: {refused}" if refused else "")
                   + "; give Case(prod_math=...), let prod accept finer inputs (float32, float64), or accept the "
                   "untested algebra explicitly (Case(accept_untested_algebra=True), --accept-untested-algebra)")
    level = "precision ladder" if resolved else "skipped"
    return AlgebraResult(verdict, reason, level, m.points, m.wide_points, f"oracle: {m.oracle}",
                         f"prod at {', '.join(ladder.accepted) or 'no precision'}", ladder=ladder)

