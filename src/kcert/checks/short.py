"""The short run every check makes of a derived case (a swept shape, a fake): the algebra gate first
(``algebra_points`` probe and as many wide draws, no symbolic proof) and, when it does not FAIL, a run of
all three gates over ``replicates`` replicates (no adaptive looks, no checks) through the certification
core, under the certification's own horizon, device, thresholds and acceptance of an untested algebra."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..case import Case
from ..certificate import AlgebraResult, Certificate
from ..core import run_core
from ..execution import probes
from ..execution.algebra import evaluate_algebra
from ..gates.algebra import judge_algebra
from ..settings import Settings
from ..verdict import Verdict


@dataclass(frozen=True)
class ShortRun:
    """The algebra gate's result and, when it did not FAIL, the short run's certificate."""

    algebra: AlgebraResult
    certificate: Certificate | None

    @property
    def failed_algebra(self) -> bool:
        return self.certificate is None


def short_settings(settings: Settings, replicates: int, algebra_points: int, seed: int | None = None) -> Settings:
    """``settings`` (checked) for a short run: ``replicates`` with no adaptive looks, no proof, no checks,
    no checkpoint, no time limit, the recorded command left to the library call."""
    return dataclasses.replace(
        settings, replicates=replicates, max_replicates=replicates, seed=settings.seed if seed is None else seed,
        algebra_points=algebra_points, algebra_proof=False, adequacy=False, peer_rules=False, shapes=False,
        command=None, checkpoint=None, resume=False, max_time=None)


def short_run(case: Case, settings: Settings, replicates: int, algebra_points: int,
              weights: probes.Draw | None = None) -> ShortRun:
    """The algebra gate on ``case`` and, when it does not FAIL, a ``replicates``-replicate run of every gate
    (``settings``: the certification's, checked; ``weights``: its draw, default drawn from its seed)."""
    s = short_settings(settings, replicates, algebra_points)
    weights = probes.draw_weights(case, s.seed, s.device) if weights is None else weights
    evidence = evaluate_algebra(case, weights, s.seed, s.device, algebra_points, algebra_points, proof=False)
    algebra = judge_algebra(evidence, s.accept_untested_algebra, s.bias_thresholds.ulp_floor)
    if algebra.verdict is Verdict.FAIL:  # FAILed already: the short run could not change that
        return ShortRun(algebra, None)
    return ShortRun(algebra, run_core(case, s).certificate)


def clipped(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with "..." (a check's stored reason)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def confirm(case: Case, settings: Settings, replicates: int, algebra_points: int, seed: int) -> Certificate:
    """A fresh run of every gate at ``seed`` (a screen's FAIL counts only when such a run confirms it)."""
    return run_core(case, short_settings(settings, replicates, algebra_points, seed)).certificate
