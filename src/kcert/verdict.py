"""The four verdicts and every rule by which they combine: a gate's outputs (:meth:`Verdict.worst`), a
certificate's gates (:func:`combine`) and its checks (:func:`certificate_verdict`)."""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    """The verdict of a gate, an output or a certificate.

    PASS: not detected under this probe (never "proved equal"). WARN: needs a human numerical
    review. FAIL: blocks the migration. SKIPPED: the gate could not run; it always says why.

    A ``str`` enum: a verdict equals its name and prints as it. A skipped gate ranks between PASS
    and WARN, so it never lets a certificate PASS (docs/verdicts.md).

    Attributes
    ----------
    PASS, WARN, FAIL, SKIPPED : Verdict
        The four verdicts.
    severity : int
        The rank used to combine verdicts: PASS 0, SKIPPED 1, WARN 2, FAIL 3.

    Examples
    --------
    >>> from kcert import Verdict
    >>> Verdict.worst([Verdict.PASS, Verdict.FAIL])
    <Verdict.FAIL: 'FAIL'>
    >>> print(Verdict.worst([Verdict.PASS, Verdict.SKIPPED]))
    SKIPPED
    >>> Verdict.PASS == "PASS", Verdict("WARN") is Verdict.WARN
    (True, True)
    """

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"

    @property
    def severity(self) -> int:
        """PASS 0, SKIPPED 1, WARN 2, FAIL 3."""
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
        """The verdict of a numeric code as the statistics return it: 0 PASS, 1 WARN, 2 FAIL."""
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


def certificate_verdict(gates, accepted=(), shape_sweep_failed: bool = False, adequacy_blocks_pass: bool = False
                        ) -> Verdict:
    """A certificate's verdict: its gates' (:func:`combine`), then its checks: a FAIL at a shape of the
    sweep FAILs it; a fake the certification does not FAIL, or a degenerate ref, holds a PASS at WARN
    (docs/kernelbench.md). Peer rules never change it."""
    verdict = combine(gates, accepted)
    if shape_sweep_failed:
        return Verdict.FAIL
    if verdict is Verdict.PASS and adequacy_blocks_pass:
        return Verdict.WARN
    return verdict
