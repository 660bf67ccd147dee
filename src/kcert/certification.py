"""``kcert.certify``: run the three gates on one case and return its certificate."""

from __future__ import annotations

import datetime as _dt
import math
import time
from typing import Callable

import torch

from .case import Case
from .certificate import Certificate, OutputInfo, Provenance, VarianceThresholds
from .errors import ParameterError
from .execution import seeding
from .execution.environment import describe_environment
from .execution.runner import Runner
from .gates.algebra import judge_algebra
from .gates.bias import judge_bias
from .gates.variance import interval_is_decisive, judge_variance
from .stats.bias import BiasThresholds

DEFAULT_HORIZON = 6.25e5


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_device(device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError(f"device must name a torch device such as 'cpu' or 'cuda', got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"device {device!r} was asked for but CUDA is not available on this machine")
    return dev


def certify(
    case: Case,
    replicates: int = 1024,
    horizon: float = DEFAULT_HORIZON,
    seed: int = 0,
    *,
    max_replicates: int | None = None,
    device: str | torch.device = "cpu",
    bias_thresholds: BiasThresholds | None = None,
    variance_thresholds: VarianceThresholds | None = None,
    algebra_points: int = 8,
    command: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Certificate:
    """Certify ``case``: algebra, bias and variance gates over ``replicates`` seeded replicates.

    The variance gate may add replicates (doubling) up to ``max_replicates`` (default 4 x
    ``replicates``) while its interval straddles a threshold; the bias gate uses every replicate.
    ``progress(done, planned)`` is called after each replicate.
    """
    if not isinstance(case, Case):
        raise ParameterError(f"case must be a kcert.Case, got {type(case).__name__}")
    _check_int("replicates", replicates, 2)
    _check_int("seed", seed, 0)
    if max_replicates is None:
        max_replicates = 4 * replicates
    _check_int("max_replicates", max_replicates, replicates)
    _check_int("algebra_points", algebra_points, 1)
    try:
        horizon = float(horizon)
    except (TypeError, ValueError):
        raise ParameterError(f"horizon must be a number > 1, got {horizon!r}") from None
    if not math.isfinite(horizon) or horizon <= 1:
        raise ParameterError(f"horizon must be a finite number > 1, got {horizon!r}")
    dev = _check_device(device)
    bias_thresholds = bias_thresholds or BiasThresholds()
    variance_thresholds = variance_thresholds or VarianceThresholds()

    started = time.perf_counter()
    runner = Runner(case, seed, dev)
    planned = replicates
    done = 0

    def tick(_n: int) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, planned)

    looks: list[int] = []
    target = replicates
    while True:
        runner.run(looks[-1] if looks else 0, target, tick)
        looks.append(target)
        oracle = runner.oracle_unavailable is None
        variance = tuple(
            judge_variance(acc.layout.name, acc.layout.dtype_name, *acc.errors(), horizon, variance_thresholds,
                           seeding.derived_seed(seed, seeding.BOOTSTRAP, acc.layout.index), tuple(looks))
            for acc in runner.accumulators
        ) if oracle else ()
        if not oracle or all(interval_is_decisive(v) for v in variance) or target >= max_replicates:
            break
        target = min(2 * target, max_replicates)
        planned = target

    bias = tuple(judge_bias(acc, bias_thresholds, horizon, attribution=oracle) for acc in runner.accumulators)
    algebra = judge_algebra(case, runner.weights, seed, dev, points=algebra_points, wide_points=algebra_points)

    outputs = tuple(
        OutputInfo(
            acc.layout.name, acc.layout.shape, acc.layout.dtype_name,
            str(acc.layout.prod_dtype).removeprefix("torch."),
            acc.moments["raw"].size,
            acc.layout.spec.describe(),
        )
        for acc in runner.accumulators
    )
    provenance = Provenance(
        seed=seed,
        replicates=looks[-1],
        max_replicates=max_replicates,
        horizon=horizon,
        dtype=str(case.dtype).removeprefix("torch."),
        device=str(dev),
        probes=case.describe(),
        command=command or f"kcert.certify(<{case.name}>, replicates={replicates}, horizon={horizon:g}, seed={seed})",
        environment=describe_environment(dev),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        wall_time_s=time.perf_counter() - started,
    )
    return Certificate(
        case=case.name,
        algebra=algebra,
        bias=bias,
        variance=variance,
        outputs=outputs,
        provenance=provenance,
        variance_skipped_reason=None if oracle else f"no float64 oracle: {runner.oracle_unavailable}",
        description=case.description,
    )
