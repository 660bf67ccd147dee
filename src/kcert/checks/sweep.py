"""Running the shape sweep (docs/kernelbench.md, "Shape sweep").

At every variant of :func:`.shapes.variants`: one trial call of ref and prod on replicate 0's draw
(ref raising means the shape is not one the problem defines: "not applicable"; prod raising where ref
runs means the kernel refuses the shape, which is not a wrong value: "unsupported"), then the algebra
gate (:data:`ALGEBRA_POINTS` probe and as many wide draws, no symbolic proof) and, when it does not FAIL
there, a short run of all three gates (:data:`REPLICATES` replicates, no adaptive looks); a FAIL of that
short run counts only when a run of :data:`CONFIRM` fresh replicates (the next seed) FAILs too. Only a FAIL counts: it FAILs the
certificate (:class:`kcert.certificate.Certificate`); the short run's other verdicts are shown.
"""

from __future__ import annotations

import time

import torch

from ..case import Case
from ..errors import KcertError
from ..execution import probes
from ..execution.frames import kernel_frame
from ..results.gates import ALGEBRA, gate_sentences
from ..settings import Settings
from ..verdict import Verdict
from ..results.checks import ShapeResult, ShapeSweepResult
from .shapes import variants
from .short import clipped, confirm, short_run

REPLICATES = 64
CONFIRM = 256  # replicates of the run that must confirm a FAIL of the short run
ALGEBRA_POINTS = 4
_REASON_CHARS = 240


def _short(text: str) -> str:
    return clipped(text, _REASON_CHARS)


def _trial(case: Case, seed: int, device) -> tuple[str, str]:
    """("", "") when ref and prod both run on replicate 0's draw; else (status, reason)."""
    try:
        draw = probes.draw_inputs(case, seed, 0, device)
        weights = probes.draw_weights(case, seed, device)
    except Exception as exc:  # noqa: BLE001 - a probe that cannot be drawn at this shape
        return "not applicable", _short(f"the probes cannot be drawn here: {type(exc).__name__}: {exc}")
    kwargs = {**draw.working, **weights.working}
    for role, status in (("ref", "not applicable"), ("prod", "unsupported")):
        try:
            with torch.no_grad():
                getattr(case, role)(**kwargs)
        except Exception as exc:  # noqa: BLE001 - the kernel's own error is the finding
            frame = kernel_frame(exc)
            at = f" (at {frame})" if frame else ""
            return status, _short(f"{role} raised {type(exc).__name__}: {exc}{at}")
    return "", ""


def run_sweep(case: Case, settings: Settings) -> ShapeSweepResult | None:
    """The sweep of ``case`` (None when it declares none) under the certification's checked ``settings``."""
    found = variants(case)
    if not found:
        return None
    started = time.perf_counter()
    seed, device = settings.seed, settings.device
    results = []
    for v in found:
        status, reason = _trial(v.case, seed, device)
        if status:
            results.append(ShapeResult(label=v.label, shapes=v.shapes, status=status, reason=reason))
            continue
        try:
            run = short_run(v.case, settings, REPLICATES, ALGEBRA_POINTS)
            if run.failed_algebra:
                results.append(ShapeResult(label=v.label, shapes=v.shapes, status="run", verdict="FAIL",
                                           gates=((ALGEBRA.name, "FAIL"),),
                                           reason=_short(f"algebra FAIL: {run.algebra.reason}")))
                continue
            cert = run.certificate
            if cert.verdict is Verdict.FAIL:
                # a screen over many shapes must not FAIL a correct kernel by chance: at R = 64 the bias
                # gate's |z| > 5 over thousands of buckets follows Student's t, not the normal law behind
                # its false-FAIL bound. A FAIL counts when CONFIRM fresh replicates (the next seed) FAIL too
                cert = confirm(v.case, settings, CONFIRM, ALGEBRA_POINTS, seed + 1)
        except KcertError as exc:
            results.append(ShapeResult(label=v.label, shapes=v.shapes, status="not applicable",
                                       reason=_short(f"the run stopped: {exc}")))
            continue
        gates = tuple((g, x.value) for g, x in cert.gates.items())
        failing = [g for g, x in cert.gates.items() if x is Verdict.FAIL]
        if failing:
            why = f"{failing[0]} FAIL: {gate_sentences(cert, failing[0])[0]}"
        else:
            why = "no gate FAILs at this shape (a short run: a PASS would need more replicates)"
        results.append(ShapeResult(label=v.label, shapes=v.shapes, status="run", verdict=cert.verdict.value,
                                   gates=gates, reason=_short(why)))
    return ShapeSweepResult(shapes=tuple(results), replicates=REPLICATES, algebra_points=ALGEBRA_POINTS,
                            seconds=time.perf_counter() - started)
