"""The report's sentences: a non-PASS certificate's failure message, the variance gate's comparison lines,
from the gates' one-line sentences (:mod:`kcert.results.sentences`: what was compared, how many buckets or
replicates failed, the worst one and where, and what was allowed)."""

from __future__ import annotations

from ..certificate import Certificate, VarianceResult
from ..numbers import fmt
from ..results.gates import gate_sentences  # noqa: F401 (report's words)
from ..results.sentences import bias_sentence, variance_sentence  # noqa: F401 (report's words)
from ..verdict import Verdict

MEANING = {
    Verdict.PASS: "not detected under this probe (automatic release)",
    Verdict.WARN: "needs a human numerical review",
    Verdict.FAIL: "blocks the migration",
    Verdict.SKIPPED: "gate could not run",
}


def error_comparison_text(v: VarianceResult) -> str:
    """prod's and ref's errors against the oracle in harm ULPs, and how often prod is closer."""
    p, r = v.error_summary("prod"), v.error_summary("ref")
    closer, tied = v.prod_closer_share, v.prod_tied_share
    share = "" if closer is None else (f"; prod closer to the oracle in {100 * closer:.3g}% of replicates"
                                       + (f" (tied in {100 * tied:.3g}%)" if tied else ""))
    unit = f"{v.harm_format} ULP" if v.harm_format else "harm units"
    return (f"error vs float64 ({unit}, median / q99 / max): prod {fmt(p[0.5])} / {fmt(p[0.99])} / {fmt(p[1.0])}, "
            f"ref {fmt(r[0.5])} / {fmt(r[0.99])} / {fmt(r[1.0])}{share}")


def observed_range_text(v: VarianceResult) -> str | None:
    """The observed range against the PASS line (the gate's fields, before any extrapolation)."""
    o = v.observed
    if o is None:
        return None
    return (f"observed: max prod {fmt(o.max_prod)} / max ref {fmt(o.max_ref)}, (max a - {v.thresholds.slack:g}) / "
            f"max b = {fmt(o.ratio)} (PASS <= {fmt(o.line)}); prod's errors at the line among the pooled top "
            f"{o.depth}: {o.prod_in_top}, exact p = {fmt(o.p_value)} (PASS >= {v.thresholds.observed_level:g})")


def paired_text(v: VarianceResult) -> str | None:
    """The shape difference bounded through the pairs, when the gate needed it."""
    p = v.paired
    if p is None:
        return None
    return (f"paired: prod's error as ref's plus a difference (max {fmt(p.max_difference)}, positive in {p.positive} "
            f"replicates); its {fmt(v.horizon / p.share)}-call return level <= {fmt(p.upper)} bounds A_T by "
            f"{fmt(p.ratio_upper)} (PASS <= {v.thresholds.warn:g}; ref's level grows by at most {fmt(p.growth)} "
            f"over {fmt(1 / (1 - p.share))} T)")


def rare_events_text(v: VarianceResult) -> str | None:
    """What the replicates cannot see (rule of three), from the result's ``rare_events``."""
    r = v.rare_events
    if r is None:
        return None
    return (f"rare events: a defect on fewer than {fmt(r.rate)} of calls (about 3/R, {100 * r.confidence:g} % "
            f"confidence) may not occur in these {r.replicates} replicates, and no verdict here excludes it; "
            f"over T = {r.horizon:.3g} calls that rate is {fmt(r.calls_at_horizon)} calls")


def failure_message(cert: Certificate) -> str:
    """Multi-line explanation of a non-PASS certificate, with the command that reproduces it."""
    lines = [f"kcert: case {cert.case!r} is {cert.verdict.value}: {MEANING[cert.verdict]}"]
    for gate, verdict in cert.gates.items():
        if verdict is not Verdict.PASS:
            for sentence in gate_sentences(cert, gate):
                lines.append(f"  {gate} {verdict.value}: {sentence}")
    from .checks import failure_lines

    lines += failure_lines(cert)  # the shape sweep's FAILs, the fakes not rejected (docs/kernelbench.md)
    lines.append(f"  reproduce: {cert.provenance.command}")
    return "\n".join(lines)
