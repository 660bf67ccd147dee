"""``kcert.certify_step``: certify a training step at every configuration of a sweep (L2)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from ..settings import DEFAULT_HORIZON
from ..errors import ParameterError
from ..reproduce import certify_call
from ..stats.aggregation import AGREES, sweep_dependence
from ..verdict import Verdict
from .config import StepConfig
from .model import build_model, parameters
from .results import ConfigResult, StepCertificate
from .run import certify_config
from .spec import Step

DEFAULT_REPLICATES = 256  # a step replicate costs a whole forward and backward on every side
DEFAULT_DIAGNOSIS_REPLICATES = 16


def deviates(result: ConfigResult) -> bool:
    """A configuration deviates when it FAILs, or when its diagnosis finds an output that does not agree
    with ref within rounding (a WARN whose outputs all agree is a statistical review, not a deviation)."""
    if result.verdict is Verdict.FAIL:
        return True
    return any(d.finding.status != AGREES for d in result.diagnoses)


def certify_step(
    step: Step,
    configs: Sequence[StepConfig] | None = None,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = 0,
    *,
    horizon: float = DEFAULT_HORIZON,
    max_replicates: int | None = None,
    diagnosis_replicates: int = DEFAULT_DIAGNOSIS_REPLICATES,
    start_method: str | None = None,
    rank_timeout: float = 300.0,
    command: str | None = None,
    progress: Callable[[StepConfig, int, int], None] | None = None,
) -> StepCertificate:
    """Certify ``step`` at each configuration: prod's distributed step against ref's whole batch.

    For each configuration kcert starts ``world`` rank processes (gloo), certifies the step's case
    (:func:`kcert.certify`: the algebra gate's identity test in real mode on the ranks too, the bias and
    variance gates over ``replicates`` batch draws, the oracle ref's step in float64) and stops the
    ranks. A configuration that does not PASS is diagnosed on its first ``diagnosis_replicates``
    draws: whether each deviating output is a constant factor of ref's (matched against the
    configuration's accumulation steps, world size, window), a recombination of the per-micro-batch
    and per-rank token means, or depends on a valid-token share (docs/training-graph.md). The sweep
    ends with the property of the configuration that separates the ones that deviate.

    Parameters
    ----------
    step : kcert.Step
        The step.
    configs : sequence of kcert.StepConfig, optional
        The configurations (default: the step's own ``configs``).
    replicates : int, default 256
        Batch draws per configuration (first look); the variance gate may add up to 4x.
    seed : int, default 0
        Seed of every draw (the parameters, the batches).
    horizon : float, default 625000
        T, the number of optimizer steps whose summed error the bias and variance gates bound.
    max_replicates : int, optional
        Cap of the variance gate's adaptive looks (default 4 x ``replicates``).
    diagnosis_replicates : int, default 16
        Draws of the diagnosis pass (0: no diagnosis).
    start_method : {"fork", "spawn", "forkserver"}, optional
        How the ranks start (default "fork" where available: the step's functions need not be importable).
    rank_timeout : float, default 300
        Seconds a rank may take to start or to answer one step before the run stops with an error.
    command : str, optional
        The reproduce command recorded (default: this library call).
    progress : callable, optional
        ``progress(config, done, planned)`` after each replicate.

    Returns
    -------
    StepCertificate
        One certificate per configuration with its diagnosis, the sweep's configuration dependence
        and the cost of each configuration (launch, ref, oracle, ranks, kcert's own work).

    Raises
    ------
    kcert.CaseError
        The step or a configuration does not fit (a batch too small to split, a model that does not build).
    kcert.KernelError
        A rank raised, died or hung (the message names the rank, the replicate and the user's line).
    kcert.ParameterError
        A parameter is out of its domain.

    Examples
    --------
    A two-layer model and a correct token-weighted accumulation over 2 micro-batches (64
    replicates so that the example runs in seconds; the ranks are real processes)::

        >>> import torch, kcert
        >>> def model():
        ...     return torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
        >>> def token_sum(model, batch):
        ...     logits = model(batch["input_ids"]).float().flatten(0, 1)
        ...     return torch.nn.functional.cross_entropy(logits, batch["shift_labels"].flatten(), reduction="sum")
        >>> def loss(model, batch):
        ...     return token_sum(model, batch) / (batch["shift_labels"] != -100).sum()
        >>> def prod(model, ctx):
        ...     tokens = sum(ctx.valid_tokens(mb) for mb in ctx.micro_batches)
        ...     total = 0.0
        ...     for mb in ctx.micro_batches:
        ...         part = token_sum(model, mb) / tokens
        ...         part.backward()
        ...         total = total + part.detach()
        ...     return total
        >>> step = kcert.Step(name="tiny", model=model, loss=loss, prod=prod, dtype=torch.float32,
        ...                   batch=kcert.TokenBatch(sequences=4, length=8, vocab=16),
        ...                   configs=[kcert.StepConfig(accumulation=2)])
        >>> result = kcert.certify_step(step, replicates=64)
        >>> print(result.verdict, [c.config.label for c in result.configs])
        PASS ['k=2']
    """
    if not isinstance(step, Step):
        raise ParameterError(f"step must be a kcert.Step, got {type(step).__name__}")
    chosen = step.configs if configs is None else tuple(configs)
    if not chosen or not all(isinstance(c, StepConfig) for c in chosen):
        raise ParameterError(f"configs must be a non-empty sequence of kcert.StepConfig, got {configs!r}")
    for name, value, minimum in (("replicates", replicates, 2), ("seed", seed, 0),
                                 ("diagnosis_replicates", diagnosis_replicates, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if not (isinstance(rank_timeout, (int, float)) and math.isfinite(rank_timeout) and rank_timeout > 0):
        raise ParameterError(f"rank_timeout must be a number of seconds > 0, got {rank_timeout!r}")
    started = time.perf_counter()
    module = build_model(step, seed)
    params = parameters(step, module)
    command = command or certify_call(f"<{step.name}>", replicates=replicates, horizon=horizon, seed=seed,
                                      max_replicates=max_replicates).replace("kcert.certify(", "kcert.certify_step(", 1)
    options = dict(replicates=replicates, horizon=horizon, max_replicates=max_replicates, algebra_proof=False,
                   peer_rules=False, command=command)
    results: list[ConfigResult] = []
    for config in chosen:
        tick = None if progress is None else (lambda done, planned, c=config: progress(c, done, planned))
        results.append(certify_config(step, config, module, params, seed, options,
                                      min(diagnosis_replicates, replicates), start_method, float(rank_timeout), tick))
    rows = [dict(label=r.config.label, deviates=deviates(r),
                 accumulation=r.config.accumulation, window=r.config.window, world=r.config.world,
                 split=r.config.split, deviation=max([d.finding.deviation for d in r.diagnoses] or [0.0]))
            for r in results]
    shapes = tuple((n, tuple(params.values[n].shape)) for n in params.names)
    return StepCertificate(step.name, tuple(results), sweep_dependence(rows), step.describe(), shapes, seed,
                           replicates, command, time.perf_counter() - started)
