"""Adequacy: can this certification tell a fake? (docs/kernelbench.md, "Adequacy")

Every fake of :mod:`.fakes` replaces prod and goes through the same probes, weights, seed, horizon and
thresholds. The run is shorter than the certification's own, and ordered by cost: the algebra gate
first (:data:`ALGEBRA_POINTS` probe and as many wide draws, no symbolic proof), and when it does not
FAIL the fake, a :data:`REPLICATES`-replicate run of all three gates. A fake is rejected when the
certification's verdict on it is FAIL (a FAIL stays a FAIL at any R; a PASS below the gates' minimum
replicates becomes WARN, which is "not rejected"). The evidence that this shorter run has the power to
reject the fakes is docs/kernelbench.md's table (every fake of every problem there).

A fake whose outputs are bitwise ref's on every draw of its run is not distinct from ref on this probe.
What that means depends on the fake: zeros, the constant or the stale output equal to ref (ref is
constant), a fresh draw of an input equal to ref (ref does not depend on that input): the problem is
degenerate; the first input passed through equal to ref (ref acts as the identity on every draw: the
probe cannot tell them apart): not rejected; a rounding that changes nothing (ref's outputs are exactly
representable): not applicable.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from ..case import Case
from ..errors import KcertError
from ..execution import probes
from ..execution.runner import as_outputs
from ..results.gates import ALGEBRA, gate_sentences
from ..settings import Settings
from ..verdict import Verdict
from .fakes import build_fakes
from ..results.checks import AdequacyResult, FakeResult
from .short import clipped, short_run

REPLICATES = 64  # the short run of a fake the algebra gate does not FAIL (one accumulation block)
ALGEBRA_POINTS = 2  # probe draws of a fake's algebra gate (and as many wide draws)
_REASON_CHARS = 220


def _short(text: str) -> str:
    return clipped(text, _REASON_CHARS)


def run_adequacy(case: Case, weights: probes.Draw, settings: Settings, probe: str | None = None) -> AdequacyResult:
    """Run every fake of ``case`` through the certification (``weights``: the run's weights; ``settings``:
    its checked settings)."""
    started = time.perf_counter()
    seed, device = settings.seed, settings.device
    probe = probe or case.name
    draw = probes.draw_inputs(case, seed, 0, device)
    with torch.no_grad():
        raw = case.ref(**{**draw.working, **weights.working})
    ref_outputs = as_outputs(raw, "ref", f"case {case.name!r}, adequacy")
    fakes = build_fakes(case, ref_outputs, isinstance(raw, torch.Tensor), seed, device)
    results = []
    for fake in fakes:
        if fake.kernel is None:
            results.append(FakeResult(name=fake.name, description=fake.description, applicable=False,
                                      reason=fake.not_applicable))
            continue
        fake_case = replace(case, name=f"{case.name} / fake {fake.name}", prod=fake.kernel, prod_math=None,
                            prod_precisions=None, independent_leading_axis=False, shapes=None)
        try:
            run = short_run(fake_case, settings, REPLICATES, ALGEBRA_POINTS, weights)
            if run.failed_algebra:
                results.append(FakeResult(name=fake.name, description=fake.description, applicable=True, verdict="FAIL",
                                          gates=((ALGEBRA.name, "FAIL"),), reason=_short(run.algebra.reason),
                                          rejected_by=(probe,)))
                continue
            cert = run.certificate
        except KcertError as exc:
            results.append(FakeResult(name=fake.name, description=fake.description, applicable=False,
                                      reason=_short(f"the fake could not run on this case: {exc}")))
            continue
        gates = tuple((g, v.value) for g, v in cert.gates.items())
        identical = bool(cert.bitwise) and all(b.elements and b.bitwise_equal == b.elements for b in cert.bitwise)
        verdict = cert.verdict
        if verdict is Verdict.FAIL:
            failing = next(g for g, v in cert.gates.items() if v is Verdict.FAIL)
            results.append(FakeResult(name=fake.name, description=fake.description, applicable=True, verdict="FAIL",
                                      gates=gates, reason=_short(f"{failing}: {gate_sentences(cert, failing)[0]}"),
                                      identical=identical, rejected_by=(probe,)))
            continue
        if identical:
            meaning = _identical_meaning(fake, cert.provenance.replicates)
            if fake.kind == "rounding":
                results.append(FakeResult(name=fake.name, description=fake.description, applicable=False,
                                          verdict=verdict.value, gates=gates, reason=meaning, identical=True))
                continue
            results.append(FakeResult(name=fake.name, description=fake.description, applicable=True,
                                      verdict=verdict.value, gates=gates, reason=meaning, identical=True,
                                      degenerate=meaning if fake.kind != "identity" else ""))
            continue
        worst = [g for g, v in cert.gates.items() if v is not Verdict.PASS]
        why = "; ".join(f"{g} {cert.gates[g].value}: {gate_sentences(cert, g)[0]}" for g in worst) or \
            "every gate PASSes it"
        results.append(FakeResult(name=fake.name, description=fake.description, applicable=True, verdict=verdict.value,
                                  gates=gates, reason=_short(why)))
    return AdequacyResult(probe=probe, fakes=tuple(results), replicates=REPLICATES, algebra_points=ALGEBRA_POINTS,
                          seconds=time.perf_counter() - started)


def merge_rejections(certs: list) -> list:
    """The certificates of one candidate under several probes, each fake marked rejected by every one of
    them that FAILs it: a fake counts as told apart when any probe of the certification tells it."""
    by_name: dict[str, tuple[str, ...]] = {}
    for cert in certs:
        for f in cert.adequacy.fakes if cert.adequacy is not None else ():
            by_name[f.name] = tuple(dict.fromkeys(by_name.get(f.name, ()) + f.rejected_by))
    out = []
    for cert in certs:
        if cert.adequacy is None:
            out.append(cert)
            continue
        fakes = tuple(replace(f, rejected_by=tuple(dict.fromkeys(f.rejected_by + by_name.get(f.name, ()))))
                      if f.applicable else f for f in cert.adequacy.fakes)
        out.append(replace(cert, adequacy=replace(cert.adequacy, fakes=fakes)))
    return out


def _identical_meaning(fake, replicates: int) -> str:
    every = f"bitwise equal to ref on all {replicates} draws"
    if fake.kind == "constant":
        return f"ref is constant: the fake '{fake.name}' is {every}"
    if fake.kind == "stale":
        return f"ref returns the same output for every draw: its previous output is {every}"
    if fake.kind == "input":
        return f"ref does not depend on input {fake.input!r}: with it redrawn, ref is {every}"
    if fake.kind == "identity":
        return (f"ref returns its input {fake.input!r} unchanged on every draw of this probe: the probe cannot tell "
                f"ref from the identity ({every})")
    return f"ref's outputs are exactly representable in {fake.name}: the rounding changes nothing ({every})"
