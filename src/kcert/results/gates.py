"""What the words layer knows of each gate: its name, where its results sit on a certificate, how they
combine into the gate's verdict, its sentences, and whether it was skipped (torch-free). The certificate
and every renderer iterate :data:`BUILTIN` and a certificate's ``extra_gates``; the judging is in
:mod:`kcert.gates.registry`, whose one line per gate is what adds a gate (docs/design.md, "Where a new
thing goes").

A gate beyond the built-in three keeps its results on the certificate in ``extra_gates`` (one
:class:`GateOutcome` each); its result type carries what the generic renderers read: ``verdict``,
``output`` (a per-output gate), ``diagnostics``, ``to_json()`` (its JSON object) and ``lines()`` (its
report lines)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..verdict import Verdict
from .sentences import bias_sentence, variance_sentence


def _none(cert) -> None:
    return None


@dataclass(frozen=True)
class Gate:
    """A gate as the certificate and the reports see it.

    ``sentence``: one result in one line (the gates table, a failure message); ``per_output``: one result
    per output (False: one for the case); ``doing``: what a progress line says while it runs; ``read``:
    its results on a certificate (None: the certificate's ``extra_gates``); ``skipped``: why it did not
    run (None: it ran); ``accepted``: whether the user accepted its SKIPPED explicitly (docs/verdicts.md)."""

    name: str
    sentence: Callable[[object], str]
    per_output: bool = True
    doing: str = ""
    read: Callable[[object], tuple] | None = None
    skipped: Callable[[object], str | None] = _none
    accepted: Callable[[object], bool] = _none

    def results(self, cert) -> tuple:
        """This gate's results on ``cert`` (empty when it did not run)."""
        if self.read is not None:
            return self.read(cert)
        return next((o.results for o in cert.extra_gates if o.gate.name == self.name), ())

    def verdict(self, cert) -> Verdict:
        """The worst of its results' verdicts; SKIPPED without a result."""
        return Verdict.worst(r.verdict for r in self.results(cert))

    def sentences(self, cert) -> list[str]:
        """Its results in words, one line each (why it was skipped, when it was)."""
        why = self.skipped(cert)
        return [why] if why else [self.sentence(r) for r in self.results(cert)]


@dataclass(frozen=True)
class GateOutcome:
    """A gate beyond the built-in three on a certificate: its description, its results, and why it was
    skipped (None: it ran)."""

    gate: Gate
    results: tuple
    skipped_reason: str | None = None


def _extra_skipped(name: str):
    def skipped(cert) -> str | None:
        return next((o.skipped_reason for o in cert.extra_gates if o.gate.name == name), None)
    return skipped


def extra_gate(name: str, sentence: Callable[[object], str], per_output: bool = True, doing: str = "") -> Gate:
    """The description of a gate beyond the built-in three: its results and skip reason are read from the
    certificate's ``extra_gates``."""
    return Gate(name=name, sentence=sentence, per_output=per_output, doing=doing, skipped=_extra_skipped(name))


ALGEBRA = Gate(name="algebra", sentence=lambda a: a.reason, per_output=False,
               doing="the algebra gate (identity test, symbolic proof or precision ladder)",
               read=lambda c: (c.algebra,), accepted=lambda c: c.algebra.untested_accepted)
BIAS = Gate(name="bias", sentence=bias_sentence, doing="the bias gate", read=lambda c: c.bias)
VARIANCE = Gate(name="variance", sentence=variance_sentence, doing="the variance gate", read=lambda c: c.variance,
                skipped=lambda c: c.variance_skipped_reason)

# The gates every certificate carries as its own fields (``algebra``, ``bias``, ``variance``), in order.
BUILTIN = (ALGEBRA, BIAS, VARIANCE)


def gate_sentences(cert, gate: str) -> list[str]:
    """The sentences of the gate named ``gate`` on ``cert``."""
    return cert.gate(gate).sentences(cert)
