"""A step at one configuration, as a :class:`kcert.Case`: the three gates then run unchanged.

The case's one input is the batch probe (redrawn per replicate from ``(seed, replicate)``); its
weights are the model's parameters (:class:`kcert.Fixed`: kept in their own dtype, exact float64
copies for the oracle); ref is :class:`~kcert.step.kernels.RefStep`, prod
:class:`~kcert.step.kernels.RankStep` on a rank pool that the caller owns (and closes). Outputs:
``loss`` (one bucket), ``grad`` (every certified parameter's gradient in one vector, one bucket per
parameter channel: :mod:`kcert.step.gradients`), ``grad_norm`` (one bucket). Replicates may be
evaluated in stacks (``independent_leading_axis``): each replicate is its own step, and a stack costs
one message round with the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..case import Axes, Case, Fixed
from .config import StepConfig
from .gradients import GradientLayout
from .kernels import RankStep, RefStep, Timing, output_names
from .model import Parameters
from .pool import RankPool
from .spec import Step


@dataclass(frozen=True)
class StepCase:
    """The case of one configuration and the callables behind it (their timing and the ranks'
    disagreement are read after the certification)."""

    case: Case
    ref: RefStep
    prod: RankStep
    layout: GradientLayout
    timing: Timing


def step_case(step: Step, config: StepConfig, module: torch.nn.Module, params: Parameters, pool: RankPool) -> StepCase:
    timing = Timing()
    layout = GradientLayout.of(params.values, params.names)
    ref = RefStep(step, module, params, layout, timing)
    prod = RankStep(step, config, params, layout, pool, timing)
    names = output_names(step.grad_norm)
    buckets = (Axes(), layout.buckets()) + ((Axes(),) if step.grad_norm else ())
    text = f"training step at {config.label}: prod on {config.world} rank(s), ref the whole batch in one process"
    case = Case(
        name=f"{step.name} @ {config.label}",
        ref=ref,
        prod=prod,
        inputs={"batch": step.batch},
        weights={w: Fixed(params.values[n]) for n, w in zip(params.names, params.weights)},
        buckets=buckets,
        dtype=step.dtype,
        output_names=names,
        description=f"{step.description}; {text}" if step.description else text,
        training_dtype=step.training_dtype,
        independent_leading_axis=True,  # the runner may stack replicates: one message round per stack
    )
    return StepCase(case, ref, prod, layout, timing)
