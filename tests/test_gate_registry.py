"""A new gate is its own module plus one registry line (docs/design.md, "Where a new thing goes").

The toy gate below is such a module: its description (:func:`kcert.results.gates.extra_gate`), its result
type (with the ``to_json()`` and ``lines()`` the generic renderers read) and its judge (reading the
accumulators' ULP-distance histogram, as L0 does). Registering it is one line added to
``kcert.gates.registry.JUDGES`` (here at run time); nothing else in the package is touched, and the
certificate, its combined verdict, its timings and the terminal, JSON and HTML reports all show it.
Without the line it is nowhere."""

import io
import json
from dataclasses import dataclass

import numpy as np
import torch
from rich.console import Console

import kcert
from kcert.gates import registry
from kcert.gates.judging import Judging
from kcert.report.html import render_html
from kcert.report.jsonio import dumps, to_dict
from kcert.report.terminal import render, render_summary
from kcert.report.text import failure_message
from kcert.results.gates import BUILTIN, extra_gate
from kcert.stats.bitwise import BIN_LABELS
from kcert.verdict import Verdict

# --- the toy gate's module ----------------------------------------------------------------------------


@dataclass(frozen=True)
class UlpDistanceResult:
    """One output: the farthest ULP distance between prod and ref over every replicate."""

    output: str
    verdict: Verdict
    farthest: int  # index of the farthest non-empty distance bin (-1: nothing compared)
    limit: int  # the farthest bin a PASS allows
    diagnostics: tuple = ()

    def to_json(self) -> dict:
        return {"output": self.output, "verdict": self.verdict.value, "farthest_bin": self.farthest,
                "limit_bin": self.limit}

    def lines(self) -> list[str]:
        label = BIN_LABELS[self.farthest] if self.farthest >= 0 else "none"
        return [f"farthest ULP distance {label} (a PASS allows up to {BIN_LABELS[self.limit]})"]


ULP_DISTANCE = extra_gate("ulp_distance", sentence=lambda r: f"{r.output}: " + r.lines()[0])


def judge_ulp_distance(limit: int):
    def judge(j: Judging) -> tuple:
        results = []
        for acc in j.accumulators:
            filled = np.nonzero(acc.ulp_histogram)[0]
            farthest = int(filled[-1]) if filled.size else -1
            results.append(UlpDistanceResult(output=acc.layout.name, farthest=farthest, limit=limit,
                                              verdict=Verdict.FAIL if farthest > limit else Verdict.PASS))
        return tuple(results)
    return judge


# --- the one registry line, added at run time ---------------------------------------------------------


def register(monkeypatch, limit: int) -> None:
    line = registry.Judge(gate=ULP_DISTANCE, judge=judge_ulp_distance(limit))
    monkeypatch.setattr(registry, "JUDGES", registry.JUDGES + (line,))


# --- two cases: one with bit-identical sides, one whose sides round differently ----------------------

IDENTICAL = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
                       inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
REORDERED = kcert.Case(name="reordered_sum", ref=lambda a, b, c: (a + b) + c, prod=lambda a, b, c: a + (b + c),
                       inputs={"a": kcert.Gaussian((64,)), "b": kcert.Gaussian((64,)), "c": kcert.Gaussian((64,))},
                       dtype=torch.bfloat16)


def certify(case):
    return kcert.certify(case, replicates=128, max_replicates=128, peer_rules=False, algebra_proof=False)


def reports(cert) -> dict[str, str]:
    console = Console(record=True, width=200, file=io.StringIO())
    render(cert, console)
    render_summary([(cert.case, cert), ("broken", "case 'broken': it raised")], 1, [cert.case], "a FAIL", console)
    return {"terminal": console.export_text(), "json": dumps([cert]), "html": render_html([cert, cert])}


def test_the_registered_gate_is_judged_certified_and_reported(monkeypatch):
    register(monkeypatch, limit=0)  # a PASS allows no differing element
    cert = certify(IDENTICAL)
    assert cert.gates == {"algebra": Verdict.PASS, "bias": Verdict.PASS, "variance": Verdict.PASS,
                          "ulp_distance": Verdict.PASS}
    assert cert.verdict is Verdict.PASS
    (outcome,) = cert.extra_gates
    assert outcome.gate is ULP_DISTANCE and outcome.results[0].farthest == 0  # every element equal
    assert "ulp_distance" in cert.provenance.timings
    block = to_dict(cert)["gates"]["ulp_distance"]
    assert block == {"verdict": "PASS", "outputs": [{"output": "output", "verdict": "PASS", "farthest_bin": 0,
                                                     "limit_bin": 0}]}
    out = reports(cert)
    assert "ulp_distance" in out["terminal"] and "farthest ULP distance 0 (a PASS allows up to 0)" in out["terminal"]
    assert "<th>ulp_distance</th>" in out["html"] and "ulp_distance gate" in out["html"]
    assert json.loads(out["json"])["gates"]["ulp_distance"] == block


def test_a_fail_of_the_registered_gate_fails_the_certificate(monkeypatch):
    unregistered = certify(REORDERED)
    assert unregistered.verdict is not Verdict.FAIL  # the three gates alone do not FAIL a reordered sum
    assert max(b.max_distance != "0" for b in unregistered.bitwise)  # ... whose sides do differ bitwise
    register(monkeypatch, limit=0)
    cert = certify(REORDERED)
    assert cert.gate_verdict("ulp_distance") is Verdict.FAIL
    assert cert.verdict is Verdict.FAIL  # the combined verdict counts it like any gate
    assert {g: v for g, v in cert.gates.items() if g != "ulp_distance"} == unregistered.gates
    message = failure_message(cert)
    assert "ulp_distance FAIL: output: farthest ULP distance" in message
    out = reports(cert)
    assert to_dict(cert)["verdict"] == "FAIL" and json.loads(out["json"])["gates"]["ulp_distance"]["verdict"] == "FAIL"
    assert "ulp_distance · output · FAIL" in out["terminal"]


def test_without_its_registry_line_the_gate_is_nowhere():
    assert all(j.gate is not ULP_DISTANCE for j in registry.JUDGES)
    cert = certify(IDENTICAL)
    assert list(cert.gates) == [g.name for g in BUILTIN] and cert.extra_gates == ()
    assert "ulp_distance" not in cert.provenance.timings
    out = reports(cert)
    assert all("ulp_distance" not in text for text in out.values())
    assert list(to_dict(cert)["gates"]) == ["algebra", "bias", "variance"]


def test_a_gate_that_needs_the_oracle_is_skipped_with_the_variance_gate(monkeypatch):
    monkeypatch.setattr(registry, "JUDGES", registry.JUDGES + (
        registry.Judge(gate=ULP_DISTANCE, judge=judge_ulp_distance(0), needs_oracle=True),))
    opaque = kcert.Case(name="opaque", ref=lambda x: torch.from_numpy(x.float().numpy() / 2).bfloat16(),
                        prod=lambda x: x / 2, inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
    cert = certify(opaque)
    assert cert.variance_skipped_reason is not None  # ref runs outside torch: no float64 oracle
    assert cert.gate_verdict("ulp_distance") is Verdict.SKIPPED
    assert cert.extra_gates[0].skipped_reason == cert.variance_skipped_reason
    assert to_dict(cert)["gates"]["ulp_distance"]["reason"] == cert.variance_skipped_reason
