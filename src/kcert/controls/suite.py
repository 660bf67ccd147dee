"""Running the control suite and summarising it against the bar (docs/controls.md)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..case import Case
from ..certificate import Certificate
from ..certification import certify
from ..errors import KcertError
from ..gates.bias import rejudge
from ..results.gates import ALGEBRA, BIAS, BUILTIN, VARIANCE
from ..stats.bias import REPORT_RULES
from ..verdict import Verdict, combine
from .registry import Control

# A positive is null evidence only where prod differs from ref: at least this share of its elements
# must differ bitwise (below it the pair is a sanity check, not evidence that the gates stay quiet
# on a real difference). Fixed before the suite was measured against it.
DIFFERS_SHARE = 0.01


@dataclass(frozen=True)
class ControlResult:
    control: Control
    certificate: Certificate | None
    seconds: float
    error: str | None = None
    step: object | None = None  # a StepCertificate (family "step"): ``certificate`` is its deciding configuration's

    @property
    def gates(self) -> dict[str, Verdict]:
        return self.certificate.gates if self.certificate else {}

    @property
    def verdict(self) -> Verdict | None:
        return self.certificate.verdict if self.certificate else None

    def report_rules_gates(self) -> dict[str, Verdict]:
        """The same evidence under the technical report's bias rules (raw mean, c = 1 ULP, no
        attribution); the algebra and variance gates are kcert's in both tables."""
        if self.certificate is None:
            return {}
        c = self.certificate
        bias = [rejudge(b, REPORT_RULES).verdict for b in c.bias]
        gates = dict(c.gates)
        gates[BIAS.name] = Verdict.worst(bias) if bias else c.gates[BIAS.name]
        return gates

    def report_rules_verdict(self) -> Verdict | None:
        return combine(self.report_rules_gates(), self.certificate.accepted_skips) if self.certificate else None

    @property
    def differing_share(self) -> float | None:
        """The share of output elements where prod differs from ref bitwise (L0), over every compared
        output and replicate; 1.0 when an output's dtypes differ (every element differs); None without
        a certificate."""
        if self.certificate is None or not self.certificate.bitwise:
            return None
        total = equal = 0
        for b in self.certificate.bitwise:
            if b.elements:
                total, equal = total + b.elements, equal + b.bitwise_equal
            else:
                return 1.0  # formats differ: not compared element by element
        return 1.0 - equal / total if total else None

    @property
    def evidence(self) -> str:
        """A positive's worth as null evidence: "differs" (>= DIFFERS_SHARE of its elements), "near
        identical" (some, fewer), "identical" (a sanity check); "" for a negative or an error."""
        share = self.differing_share
        if self.control.kind != "positive" or share is None:
            return ""
        return "identical" if share == 0 else "differs" if share >= DIFFERS_SHARE else "near identical"

    @property
    def detected(self) -> bool:
        return self.verdict in (Verdict.WARN, Verdict.FAIL)

    @property
    def meets_bar(self) -> bool:
        """Negative: detected. Positive: not FAIL. Either: the exact verdict when one is expected."""
        if self.certificate is None:
            return False
        if self.control.expect is not None and self.verdict.value != self.control.expect:
            return False
        return self.detected if self.control.kind == "negative" else self.verdict is not Verdict.FAIL

    def deciding_figure(self) -> str:
        """The number behind the most severe gate (a step: its configuration dependence)."""
        c = self.certificate
        if c is None:
            return self.error or ""
        if self.step is not None:
            return f"step: {self.step.dependence}"
        worst = max(c.gates, key=lambda g: c.gates[g].severity)
        if c.gates[worst] is Verdict.PASS:
            worst = BIAS.name
        if worst == ALGEBRA.name:
            a = c.algebra
            judged = [o for o in a.ladder.outputs if o.judged] if a.ladder is not None else []
            if judged:
                o = max(judged, key=lambda o: (o.verdict.severity, o.amplification))
                return f"algebra: ladder floor K = {o.amplification:.3g} at {o.judged} ({o.outcome})"
            if not a.outputs:
                return "algebra skipped"
            o = max(a.outputs, key=lambda o: (o.verdict.severity, o.discrepancy_float64))
            if not math.isfinite(o.discrepancy_float64):
                return "algebra: non-finite where the other side is finite (real mode)"
            return f"algebra: rel. discrepancy {o.discrepancy_float64:.2g} (f32/f64 shrink {o.shrink:.2g})"
        if worst == VARIANCE.name:
            if not c.variance:
                return "variance skipped"
            v = max(c.variance, key=lambda v: v.verdict.severity)
            if v.interval is None:
                return f"variance: {v.reason.split(';')[0]}"
            return f"variance: U = {v.upper_bound:.3g} (A_T = {v.interval.estimate:.3g})"
        for b in sorted(c.bias, key=lambda b: -b.verdict.severity):
            if b.nonfinite_prod:
                return f"bias: {b.nonfinite_prod} non-finite prod elements"
            f = b.findings(limit=1)
            if f:
                f = f[0]
                return f"bias: {f.effect_ulp:.2g} ULP, z {f.z:+.3g} at {f.label} ({f.statistic})"
        return "bias: no bucket WARN or FAIL"


@dataclass(frozen=True)
class SuiteSummary:
    negatives: int
    detected: int
    detected_report_rules: int
    negative_fail: int
    negative_fail_report_rules: int
    only_by: dict[str, list[str]]  # gate -> negatives that gate alone detects
    missed: list[str]
    positives: int
    positive_fail: int
    positive_warn: int
    positive_fail_report_rules: int
    positive_warn_report_rules: int
    errors: list[str]
    failed_expectations: list[str]
    positive_evidence: dict[str, int] = field(default_factory=dict)  # "differs" / "near identical" / "identical"
    halves: dict[str, dict[str, int]] = field(default_factory=dict)  # half -> counts (see summarize)

    @property
    def meets_bar(self) -> bool:
        # the bar of docs/controls.md, over every control of every family: at most one negative
        # missed, no positive FAIL, at most two positive WARN, every exact expectation met
        return (self.negatives - self.detected <= 1 and self.positive_fail == 0
                and self.positive_warn <= 2 and not self.errors and not self.failed_expectations)


def run_controls(controls: Iterable[Control], seed: int = 0, quick: bool = False,
                 progress: Callable[[Control, int, int], None] | None = None) -> list[ControlResult]:
    """Certify every control at its declared replicates (``quick``: at most 256). Errors in one
    control are recorded and do not stop the others."""
    controls = list(controls)
    results = []
    for i, control in enumerate(controls):
        if progress is not None:
            progress(control, i, len(controls))
        start = time.perf_counter()
        replicates = min(control.replicates, 256) if quick else control.replicates
        command = f"kcert controls --control {control.name} --seed {seed}" + (" --quick" if quick else "")
        try:
            built = control.build()
            if isinstance(built, Case):
                cert = certify(built, replicates=replicates, seed=seed, command=command)
                results.append(ControlResult(control, cert, time.perf_counter() - start))
            else:  # a training step (family "step"): every configuration of its sweep
                from ..step import certify_step

                step = certify_step(built, replicates=replicates, seed=seed, command=command)
                results.append(ControlResult(control, step.deciding.certificate, time.perf_counter() - start,
                                             step=step))
        except KcertError as exc:
            results.append(ControlResult(control, None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"))
    return results


def summarize(results: list[ControlResult]) -> SuiteSummary:
    neg = [r for r in results if r.control.kind == "negative"]
    pos = [r for r in results if r.control.kind == "positive"]
    only_by: dict[str, list[str]] = {g.name: [] for g in BUILTIN}
    for r in neg:
        if r.certificate is None:
            continue
        flagged = [g for g in r.gates if r.gates[g] in (Verdict.WARN, Verdict.FAIL)]
        if len(flagged) == 1:
            only_by.setdefault(flagged[0], []).append(r.control.name)
    return SuiteSummary(
        negatives=len(neg),
        detected=sum(r.detected for r in neg),
        detected_report_rules=sum(r.report_rules_verdict() in (Verdict.WARN, Verdict.FAIL) for r in neg),
        negative_fail=sum(r.verdict is Verdict.FAIL for r in neg),
        negative_fail_report_rules=sum(r.report_rules_verdict() is Verdict.FAIL for r in neg),
        only_by=only_by,
        missed=[r.control.name for r in neg if not r.detected],
        positives=len(pos),
        positive_fail=sum(r.verdict is Verdict.FAIL for r in pos),
        positive_warn=sum(r.verdict is Verdict.WARN for r in pos),
        positive_fail_report_rules=sum(r.report_rules_verdict() is Verdict.FAIL for r in pos),
        positive_warn_report_rules=sum(r.report_rules_verdict() is Verdict.WARN for r in pos),
        errors=[f"{r.control.name}: {r.error}" for r in results if r.error],
        failed_expectations=[f"{r.control.name}: expected {r.control.expect}, got {r.verdict.value}"
                             for r in results if r.certificate and r.control.expect
                             and r.verdict.value != r.control.expect],
        positive_evidence={k: sum(r.evidence == k for r in pos) for k in ("differs", "near identical", "identical")},
        halves={half: _half_counts([r for r in results if r.control.half == half]) for half in ("tuning", "validation")},
    )


def _half_counts(results: list[ControlResult]) -> dict[str, int]:
    neg = [r for r in results if r.control.kind == "negative"]
    pos = [r for r in results if r.control.kind == "positive"]
    return {"negatives": len(neg), "detected": sum(r.detected for r in neg),
            "negative_fail": sum(r.verdict is Verdict.FAIL for r in neg), "positives": len(pos),
            "positive_fail": sum(r.verdict is Verdict.FAIL for r in pos),
            "positive_warn": sum(r.verdict is Verdict.WARN for r in pos),
            "positive_differs": sum(r.evidence == "differs" for r in pos)}
