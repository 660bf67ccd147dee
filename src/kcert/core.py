"""The certification core: validate -> run -> judge -> assemble, for one case (docs/design.md).

It knows no check: :func:`kcert.certify` adds the peer rules, the shape sweep and the adequacy check on
top of it (:mod:`kcert.checks`), and the checks' own short runs come back here through
:func:`kcert.checks.short.short_run`. The run loop (:mod:`kcert.execution.schedule`) computes replicates
look by look and asks :class:`_Looks` after each whether more could change the verdict; the gates judge
what the run accumulated; the certificate is assembled with its provenance.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from .case import Case, check_probe_sizes
from .certificate import AlgebraResult, BiasResult, Certificate, OutputInfo, Provenance, VarianceResult
from .errors import KernelError, ParameterError
from .execution import checkpoint as _ckpt
from .execution import compiled, distributed, seeding
from .execution.algebra import evaluate_algebra
from .execution.environment import describe_environment
from .execution.probes import Draw
from .execution.runner import Runner
from .execution.schedule import Saver, TimeLimit, look_schedule, resume as _resume, run_looks
from .gates.algebra import judge_algebra
from .gates.bias import judge_bias
from .gates.bitwise import judge_bitwise
from .gates.variance import interval_is_decisive, judge_variance
from .reproduce import library_call
from .settings import Settings
from .stats.ulp import harm_format
from .verdict import Verdict

__all__ = ["Clock", "CoreRun", "run_core"]


@dataclass(frozen=True)
class CoreRun:
    """What the core gives the checks that follow it: the certificate, the run's weights (the checks
    draw the same ones) and the clock that times every stage."""

    certificate: Certificate
    weights: Draw
    clock: Clock


def run_core(case: Case, settings: Settings, progress: Callable[[int, int], None] | None = None,
             on_event: Callable[[str, dict], None] | None = None) -> CoreRun:
    """Certify ``case`` under checked ``settings`` without the checks: validate the case, run the
    replicates look by look, judge every gate, assemble the certificate. ``progress`` and ``on_event``
    are :func:`kcert.certify`'s."""
    if not isinstance(case, Case):
        raise ParameterError(f"case must be a kcert.Case, got {type(case).__name__}")
    check_probe_sizes(case)
    clock = Clock(on_event or (lambda kind, detail: None))
    compiled_before = compiled.frames_compiled()
    runner, looks, judged, resumed = _run(case, settings, progress, clock)
    gates = _judge(case, settings, runner, judged, clock)
    cert = _assemble(case, settings, runner, looks, gates, judged,
                     notes=(compiled.compile_note(compiled_before), judged.settled_note(looks)), resumed=resumed)
    return CoreRun(cert, runner.weights, clock)


class Clock:
    """Seconds spent per stage of one certification (``provenance.timings``), and the run's events.
    The replicate phase's time is what is left of it once the judging done between looks is taken out."""

    STAGES = ("replicates", "algebra", "bias", "variance", "l0", "peer_rules", "shape_sweep", "adequacy")

    def __init__(self, on_event: Callable[[str, dict], None]):
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.on_event = on_event

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def event(self, kind: str, **detail) -> None:
        self.on_event(kind, detail)

    @contextmanager
    def measure(self, stage: str):
        """Add the seconds the ``with`` block takes to ``stage``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def timings(self) -> dict[str, float]:
        return {stage: round(self.seconds[stage], 6) for stage in self.STAGES if stage in self.seconds}


class _Looks:
    """Judges the run after each look and says whether more replicates could change the verdict.
    More replicates only serve the variance interval: once it is decisive, or another gate FAILs
    (then the combined verdict is FAIL whatever they show), the run stops."""

    def __init__(self, case: Case, settings: Settings, runner: Runner, planned_looks: int, clock: Clock):
        self.case, self.settings, self.runner, self.planned_looks = case, settings, runner, planned_looks
        self.clock = clock
        self.oracle = True
        self.variance: tuple[VarianceResult, ...] = ()
        self.algebra: AlgebraResult | None = None  # judged early when it decided the stop
        self.settled: str | None = None  # why more looks could not change the combined verdict

    def __call__(self, looks: tuple[int, ...]) -> bool:
        s, runner = self.settings, self.runner
        self.oracle = runner.oracle_unavailable is None
        with self.clock.measure("variance"):
            self.variance = _judge_variance(self.case, s, runner, looks, self.planned_looks) if self.oracle else ()
        if not self.oracle or all(interval_is_decisive(v) for v in self.variance) or looks[-1] >= s.max_replicates:
            return True
        with self.clock.measure("bias"):
            bias = _judge_bias(self.case, s, runner, self.oracle)
        if any(b.verdict is Verdict.FAIL for b in bias):
            self.settled = "the bias gate FAILs"
        else:
            self.algebra = self.algebra or _judge_algebra(self.case, s, runner, self.clock)
            if self.algebra.verdict is Verdict.FAIL:
                self.settled = "the algebra gate FAILs"
        return self.settled is not None

    def settled_note(self, looks: list[int]) -> str | None:
        if self.settled is None:
            return None
        return f"replicates stopped at the look of {looks[-1]}: {self.settled}, so more looks could not change the verdict"


def _run(case: Case, s: Settings, progress, clock: Clock) -> tuple[Runner, list[int], _Looks, dict | None]:
    """Compute the replicates look by look (checkpointed, resumable, shared among ranks); the last
    item says what a resumed run took from its checkpoint (None for a fresh run)."""
    started = time.perf_counter()
    comm = distributed.current()
    runner = Runner(case, s.seed, s.device, batch_memory=s.batch_memory)  # batch_memory: see Case.independent_leading_axis
    fp = _ckpt.fingerprint(case, s.seed, s.replicates, s.max_replicates, s.horizon, s.device, s.bias_thresholds,
                           s.variance_thresholds) if s.checkpoint is not None else None
    schedule = look_schedule(s.replicates, s.max_replicates)
    looks, target = _resume(s.checkpoint, fp, runner, comm) if s.resume else ([], s.replicates)
    resumed = None
    if s.resume:
        resumed = {"checkpoint": s.checkpoint, "replicates": runner.done, "looks": list(looks)}
        clock.event("resumed", **resumed)
    clock.event("stage", stage="replicates")
    judged = _Looks(case, s, runner, len(schedule), clock)
    saver = Saver(s.checkpoint, fp, runner, comm, s.checkpoint_every, s.checkpoint_seconds)
    limit = None if s.max_time is None else TimeLimit(s.max_time, time.monotonic())
    judging = sum(clock.seconds.values())
    looks = run_looks(runner, schedule, comm, saver, judged, progress, looks, target, limit)
    if runner.accumulators is None:
        raise KernelError(f"case {case.name!r}: no replicate was computed")
    clock.seconds["replicates"] = time.perf_counter() - started - (sum(clock.seconds.values()) - judging)
    return runner, looks, judged, resumed


@dataclass(frozen=True)
class _Gates:
    algebra: AlgebraResult
    bias: tuple[BiasResult, ...]
    variance: tuple[VarianceResult, ...]
    bitwise: tuple


def _judge(case: Case, s: Settings, runner: Runner, judged: _Looks, clock: Clock) -> _Gates:
    """Every gate on what the run accumulated (the variance gate as judged at the last look)."""
    with clock.measure("bias"):
        bias = _judge_bias(case, s, runner, judged.oracle)
    with clock.measure("l0"):
        bitwise = tuple(judge_bitwise(acc, runner.early_moments(i, len(acc.replicate)), s.bias_thresholds.z_star)
                        for i, acc in enumerate(runner.accumulators))  # L0: informational
    algebra = judged.algebra or _judge_algebra(case, s, runner, clock)
    return _Gates(algebra, bias, judged.variance, bitwise)


def _judge_variance(case: Case, s: Settings, runner: Runner, looks: tuple[int, ...], planned_looks: int):
    return tuple(
        judge_variance(acc.layout.name, acc.layout.dtype_name, *acc.errors(), s.horizon, s.variance_thresholds,
                       seeding.derived_seed(s.seed, seeding.BOOTSTRAP, acc.layout.index), looks, planned_looks,
                       harm_format=harm_format(acc.layout.dtype_name, case.training_format))
        for acc in runner.accumulators
    )


def _judge_bias(case: Case, s: Settings, runner: Runner, oracle: bool) -> tuple[BiasResult, ...]:
    return tuple(judge_bias(acc, s.bias_thresholds, s.horizon, attribution=oracle,
                            dtypes_may_differ=case.dtypes_may_differ,
                            harm_format=harm_format(acc.layout.dtype_name, case.training_format))
                 for acc in runner.accumulators)


def _judge_algebra(case: Case, s: Settings, runner: Runner, clock: Clock) -> AlgebraResult:
    clock.event("stage", stage="algebra")
    with clock.measure("algebra"):
        evidence = evaluate_algebra(case, runner.weights, s.seed, s.device, s.algebra_points, s.algebra_points,
                                    proof=s.algebra_proof)
        return judge_algebra(evidence, s.accept_untested_algebra, s.bias_thresholds.ulp_floor)


def _assemble(case: Case, s: Settings, runner: Runner, looks: list[int], gates: _Gates, judged: _Looks,
              notes, resumed: dict | None) -> Certificate:
    outputs = tuple(
        OutputInfo(acc.layout.name, acc.layout.shape, acc.layout.dtype_name,
                   str(acc.layout.prod_dtype).removeprefix("torch."), acc.moments["raw"].size,
                   acc.layout.spec.describe())
        for acc in runner.accumulators
    )
    provenance = Provenance(
        seed=s.seed,
        replicates=looks[-1],
        max_replicates=s.max_replicates,
        horizon=s.horizon,
        dtype=str(case.dtype).removeprefix("torch."),
        device=str(s.device),
        probes=case.describe(),
        command=s.command or library_call(case.name, s),
        environment=describe_environment(s.device),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        wall_time_s=0.0,  # set with the timings once the checks have run
        resumed=resumed,
    )
    return Certificate(
        case=case.name,
        algebra=gates.algebra,
        bias=gates.bias,
        variance=gates.variance,
        outputs=outputs,
        provenance=provenance,
        variance_skipped_reason=None if judged.oracle else f"no float64 oracle: {runner.oracle_unavailable}",
        description=case.description,
        bitwise=gates.bitwise,
        notes=tuple(n for n in notes if n),
    )
