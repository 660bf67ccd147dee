"""Results of the checks around the gates: adequacy (fakes), peer rules, shape sweep. Frozen, torch-free;
:class:`kcert.certificate.Certificate` carries them and its verdict reads them (docs/kernelbench.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import Code, Diagnostic, diagnostic

REJECTED, NOT_REJECTED, NOT_APPLICABLE = "rejected", "not rejected", "not applicable"


@dataclass(frozen=True)
class FakeResult:
    """One fake kernel run through the certification. ``verdict``: the certification's verdict on it
    ("" when it did not run); ``gates``: (gate, verdict) of what ran; ``reason``: what FAILed it, why it
    was not FAILed, or why the fake does not apply; ``identical``: its outputs were bitwise ref's on every
    draw of the run (it is not distinct from ref under this probe); ``rejected_by``: the certifications
    (probes) that FAIL it: this one, or a companion probe of the same candidate (``kcert kernelbench``)."""

    name: str
    description: str
    applicable: bool
    verdict: str = ""
    gates: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    identical: bool = False
    rejected_by: tuple[str, ...] = ()
    degenerate: str = ""  # what its being identical to ref says about ref (constant, independent of an input)

    @property
    def status(self) -> str:
        if not self.applicable:
            return NOT_APPLICABLE
        return REJECTED if self.rejected_by else NOT_REJECTED


@dataclass(frozen=True)
class AdequacyResult:
    """Can this certification tell a fake? (docs/kernelbench.md, "Adequacy"). ``replicates`` and
    ``algebra_points``: the short run each fake gets."""

    probe: str
    fakes: tuple[FakeResult, ...]
    replicates: int
    algebra_points: int
    seconds: float = 0.0

    @property
    def not_rejected(self) -> tuple[FakeResult, ...]:
        return tuple(f for f in self.fakes if f.status == NOT_REJECTED)

    @property
    def degenerate(self) -> tuple[str, ...]:
        """What the fakes no certification rejects show about ref itself (constant, or independent of an
        input): a problem such fakes cannot be told from."""
        return tuple(dict.fromkeys(f.degenerate for f in self.not_rejected if f.degenerate))

    @property
    def blocks_pass(self) -> bool:
        """A fake the certification does not FAIL, or a degenerate problem: the certificate cannot PASS."""
        return bool(self.not_rejected or self.degenerate)

    def diagnostics(self) -> tuple[Diagnostic, ...]:
        out = []
        plain = [f for f in self.not_rejected if not f.degenerate]
        if plain:
            out.append(diagnostic(Code.FAKES_NOT_REJECTED, "; ".join(
                f"{f.name} ({f.verdict or 'not run'}: {f.reason})" for f in plain)))
        if self.degenerate:
            out.append(diagnostic(Code.DEGENERATE_PROBLEM, "; ".join(self.degenerate)))
        return tuple(out)


@dataclass(frozen=True)
class PeerRuleResult:
    """One common rule on the certification's first samples. ``passed``: None when the rule could not be
    evaluated (``detail`` says why); ``detail``: the figure it decided on, at its worst trial."""

    rule: str  # "assert_close", "kernelbench", "flashattention", "dynamo_same"
    title: str
    passed: bool | None
    detail: str
    worst_trial: int | None = None

    @property
    def verdict(self) -> str:
        return "-" if self.passed is None else ("PASS" if self.passed else "FAIL")


@dataclass(frozen=True)
class PeerRulesResult:
    """What the common rules say on the same samples: replicates ``trials`` (their draws by seed)."""

    trials: tuple[int, ...]
    rules: tuple[PeerRuleResult, ...]
    seconds: float = 0.0
    note: str = ""  # why the rules could not run, when ``rules`` is empty


@dataclass(frozen=True)
class ShapeResult:
    """The certification at one shape of the sweep. ``status``: "run"; "not applicable" (ref raised
    there: the problem does not define this shape); "unsupported" (prod raised where ref runs: the kernel
    refuses the shape, it does not return a wrong value). ``verdict`` and ``gates`` when run."""

    label: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    status: str
    verdict: str = ""
    gates: tuple[tuple[str, str], ...] = ()
    reason: str = ""

    @property
    def shape_text(self) -> str:
        return ", ".join(f"{k} {tuple(v)}" for k, v in self.shapes)


@dataclass(frozen=True)
class ShapeSweepResult:
    """The shape sweep (docs/kernelbench.md, "Shape sweep"): the algebra gate (``algebra_points`` probe
    and as many wide draws) and a ``replicates``-replicate bias/variance run at each derived shape. A
    FAIL at any shape FAILs the certificate; a WARN there is shown and changes nothing (the short run is
    a screen for defects that hide at the given shape, not a certification of every shape)."""

    shapes: tuple[ShapeResult, ...]
    replicates: int
    algebra_points: int
    seconds: float = 0.0

    @property
    def failed(self) -> tuple[ShapeResult, ...]:
        return tuple(s for s in self.shapes if s.verdict == "FAIL")

    def diagnostics(self) -> tuple[Diagnostic, ...]:
        if not self.failed:
            return ()
        return (diagnostic(Code.SHAPE_SWEEP_FAIL, "; ".join(f"{s.label} ({s.shape_text}): {s.reason}"
                                                         for s in self.failed)),)
