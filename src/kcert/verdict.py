"""The four verdicts and how they combine."""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    """PASS: not detected under this probe (never "proved equal"). WARN: needs a human numerical
    review. FAIL: blocks the migration. SKIPPED: the gate could not run; it always says why."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @staticmethod
    def worst(verdicts) -> "Verdict":
        """Most severe of ``verdicts``; an empty collection is SKIPPED."""
        verdicts = list(verdicts)
        if not verdicts:
            return Verdict.SKIPPED
        return max(verdicts, key=lambda v: v.severity)

    @staticmethod
    def from_code(code: int) -> "Verdict":
        return (Verdict.PASS, Verdict.WARN, Verdict.FAIL)[int(code)]

    def __str__(self) -> str:
        return self.value


# A skipped gate ranks between PASS and WARN: it never lets a certificate PASS.
_SEVERITY = {Verdict.PASS: 0, Verdict.SKIPPED: 1, Verdict.WARN: 2, Verdict.FAIL: 3}


def overall(gate_verdicts) -> Verdict:
    """A certificate's verdict: FAIL if any gate FAILs, PASS only if every gate PASSes,
    otherwise WARN (a WARN or a SKIPPED gate needs review)."""
    worst = Verdict.worst(gate_verdicts)
    return Verdict.WARN if worst is Verdict.SKIPPED else worst


def combine(gates, accepted=()) -> Verdict:
    """:func:`overall` over a mapping gate name -> verdict, leaving out a gate named in ``accepted``
    when it is SKIPPED: a skip the user accepted explicitly (``Case(accept_untested_algebra=True)``,
    ``kcert certify --accept-untested-algebra``) does not hold the verdict at WARN; every other rule
    of :func:`overall` stands (a FAIL still fails; the accepted gate's own WARN or FAIL still counts)."""
    accepted = set(accepted)
    return overall(v for g, v in gates.items() if not (g in accepted and v is Verdict.SKIPPED))
