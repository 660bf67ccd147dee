"""Certify one configuration of a step: start its ranks, certify its case, diagnose, stop the ranks."""

from __future__ import annotations

import time

import torch

from ..certification import certify
from ..verdict import Verdict
from .case import step_case
from .config import StepConfig
from .diagnose import diagnose
from .model import Parameters
from .pool import RankPool
from .results import ConfigResult, Cost
from .spec import Step


def certify_config(step: Step, config: StepConfig, module: torch.nn.Module, params: Parameters, seed: int,
                   options: dict, diagnosis_replicates: int, start_method: str | None, rank_timeout_s: float,
                   progress=None) -> ConfigResult:
    """The certificate of ``step`` at ``config`` and, when it does not PASS, the diagnosis."""
    where = f"step {step.name!r} at {config.label}"
    fields = dict(step=step, config=config, seed=seed, state=params.state, certified=params.names)
    started = time.perf_counter()
    with RankPool(fields, config.world, where, start_method, rank_timeout_s) as pool:
        launched = time.perf_counter() - started
        built = step_case(step, config, module, params, pool)
        certified_at = time.perf_counter()
        cert = certify(built.case, seed=seed, progress=progress, **options)
        certify_s = time.perf_counter() - certified_at
        seconds, calls = dict(built.timing.seconds), dict(built.timing.calls)  # the certification's own
        diagnosed_at = time.perf_counter()
        diagnoses = ()
        # the diagnosis evaluates the oracle: not when ref could not run in real mode
        if cert.verdict is not Verdict.PASS and diagnosis_replicates and cert.variance_skipped_reason is None:
            diagnoses = diagnose(step, config, built, params, seed, diagnosis_replicates)
        diagnose_s = time.perf_counter() - diagnosed_at
    cost = Cost(launch_s=launched, certify_s=certify_s, diagnose_s=diagnose_s, total_s=time.perf_counter() - started,
                seconds=seconds, calls=calls, replicates=cert.provenance.replicates)
    disagreement = tuple(sorted(built.prod.disagreement.items()))
    return ConfigResult(config=config, certificate=cert, diagnoses=diagnoses, rank_disagreement=disagreement,
                        cost=cost)
