"""``kcert.certify``: run the three gates on one case and return its certificate.

One certification reads validate -> run -> judge -> assemble (docs/design.md): the parameters are
checked into :class:`Settings`; the run loop (:mod:`kcert.execution.schedule`) computes replicates
look by look and asks :class:`_Looks` after each whether more could change the verdict; the gates
judge what the run accumulated; the certificate is assembled with its provenance.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from . import parameters
from .case import Case
from .certificate import AlgebraResult, BiasResult, Certificate, OutputInfo, Provenance, VarianceResult
from .errors import KernelError, ParameterError
from .execution import checkpoint as _ckpt
from .execution import compiled, distributed, seeding
from .execution.algebra import evaluate_algebra
from .execution.environment import describe_environment
from .execution.runner import Runner
from .execution.schedule import Saver, TimeLimit, look_schedule, resume as _resume, run_looks
from .gates.algebra import judge_algebra
from .gates.bias import judge_bias
from .gates.bitwise import judge_bitwise
from .gates.variance import interval_is_decisive, judge_variance
from .reproduce import certify_call
from .stats.thresholds import BiasThresholds, VarianceThresholds
from .stats.ulp import harm_format
from .verdict import Verdict

DEFAULT_HORIZON = 6.25e5
__all__ = ["DEFAULT_HORIZON", "Settings", "certify", "look_schedule"]


def _check_device(device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError(f"device must name a torch device such as 'cpu' or 'cuda', got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"device {device!r} was asked for but CUDA is not available on this machine")
    return dev


@dataclass(frozen=True)
class Settings:
    """The parameters of one certification, checked (:meth:`check`); the docstring of :func:`certify`
    says what each means."""

    replicates: int = 1024
    horizon: float = DEFAULT_HORIZON
    seed: int = 0
    max_replicates: int | None = None  # None: 4 x replicates
    device: torch.device | str = "cpu"
    bias_thresholds: BiasThresholds | None = None
    variance_thresholds: VarianceThresholds | None = None
    algebra_points: int = 8
    algebra_proof: bool = True
    command: str | None = None
    checkpoint: str | os.PathLike | None = None
    resume: bool = False
    checkpoint_every: int = 1024
    checkpoint_seconds: float = 300.0
    batch_memory: int | None = None
    accept_untested_algebra: bool = False
    adequacy: bool = False
    peer_rules: bool = True
    shapes: bool | None = None
    max_time: float | None = None  # seconds of the replicate phase (TimeLimitReached beyond)

    def check(self) -> Settings:
        """These settings with defaults filled in and every value checked; a bad one raises ParameterError."""
        _, max_replicates = parameters.replicates("replicates", self.replicates, "max_replicates",
                                                  self.max_replicates)
        parameters.integer("seed", self.seed, 0)
        parameters.integer("algebra_points", self.algebra_points, 1)
        parameters.flag("adequacy", self.adequacy)
        parameters.flag("peer_rules", self.peer_rules)
        parameters.flag("shapes", self.shapes, none=True)
        parameters.flag("accept_untested_algebra", self.accept_untested_algebra)
        horizon = parameters.horizon("horizon", self.horizon)
        max_time = None if self.max_time is None else parameters.seconds("max_time", self.max_time)
        device = _check_device(self.device)
        checkpoint, seconds = self.checkpoint, self.checkpoint_seconds
        if self.resume and checkpoint is None:
            raise ParameterError("resume=True needs checkpoint, the file to resume from; got checkpoint=None")
        if checkpoint is not None:
            checkpoint = os.fspath(checkpoint)
            parameters.integer("checkpoint_every", self.checkpoint_every, 1)
            seconds = parameters.seconds("checkpoint_seconds", seconds)
            folder = os.path.dirname(os.path.abspath(checkpoint))
            if not os.path.isdir(folder):
                raise ParameterError(f"checkpoint {checkpoint!r}: the folder {folder!r} does not exist")
        return dataclasses.replace(
            self, max_replicates=max_replicates, horizon=horizon, device=device, checkpoint=checkpoint,
            max_time=max_time,
            checkpoint_seconds=seconds, bias_thresholds=self.bias_thresholds or BiasThresholds(),
            variance_thresholds=self.variance_thresholds or VarianceThresholds())


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
    algebra_proof: bool = True,
    command: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    checkpoint: str | os.PathLike | None = None,
    resume: bool = False,
    checkpoint_every: int = 1024,
    checkpoint_seconds: float = 300.0,
    batch_memory: int | None = None,
    accept_untested_algebra: bool = False,
    adequacy: bool = False,
    peer_rules: bool = True,
    shapes: bool | None = None,
    max_time: float | None = None,
    on_event: Callable[[str, dict], None] | None = None,
) -> Certificate:
    """Certify ``case``: algebra, bias and variance gates over ``replicates`` seeded replicates.

    The variance gate may add replicates (doubling) up to ``max_replicates`` while its interval
    straddles a threshold; the looks are planned in advance (:func:`look_schedule`) and alpha is
    spent evenly over them, so stopping early keeps the stated error rate. The bias gate uses every
    replicate. After the gates come the checks of docs/kernelbench.md (peer rules, shape sweep,
    adequacy). The same case, seed and parameters give the same certificate.

    Parameters
    ----------
    case : Case
        The kernel pair and its probes.
    replicates : int, default 1024
        Replicates of the first look (>= 2); each draws its probes from ``(seed, replicate)``.
    horizon : float, default 625000
        T, the number of kernel calls whose summed error the bias and variance gates bound
        (one optimizer step of a typical run; docs/method.md).
    seed : int, default 0
        The seed every draw derives from.
    max_replicates : int, optional
        Cap of the variance gate's adaptive looks (default 4 x ``replicates``).
    device : str or torch.device, default "cpu"
        Where the case's tensors live ("cuda" needs CUDA).
    bias_thresholds, variance_thresholds : BiasThresholds, VarianceThresholds, optional
        The gates' thresholds (default: kcert's, docs/method.md).
    algebra_points : int, default 8
        Probe points of the algebra gate's identity test.
    algebra_proof : bool, default True
        False skips the symbolic proof (the identity test always runs).
    command : str, optional
        The reproduce command to record (default: the library call that gives this certificate).
    progress : callable, optional
        ``progress(done, planned)``, called after each replicate.
    checkpoint : path, optional
        A file where the run's state is saved at the first block boundary after every
        ``checkpoint_every`` replicates or ``checkpoint_seconds`` seconds, at the end of the
        replicate phase, and when a kernel raises or the run is interrupted.
    resume : bool, default False
        Continue from ``checkpoint`` to the certificate an uninterrupted run gives; the file must come
        from a run with the same case, kernels, seed, dtype, probes, replicates, max_replicates,
        horizon, thresholds and kcert version (else a ``CheckpointError`` names what differs).
    checkpoint_every, checkpoint_seconds : int, float
        How often the checkpoint is written (defaults 1024 replicates, 300 s).
    batch_memory : int, optional
        Bytes per batched kernel call when the case declares ``independent_leading_axis``
        (default 16 MiB on CPU, 256 MiB on accelerators).
    accept_untested_algebra : bool, default False
        When no algebra test can run (an opaque prod at one precision), let the verdict rest on the
        bias and variance gates; the certificate states the limit (docs/verdicts.md).
    adequacy : bool, default False
        Run the fixed fakes through the same probes and gates; one that is not FAILed (or a
        degenerate ref) keeps the certificate from a PASS.
    peer_rules : bool, default True
        Record what torch.testing.assert_close, KernelBench's allclose, FlashAttention's rule and
        torch._dynamo's ``same`` say on the first 5 replicates' draws (informational).
    shapes : bool, optional
        The shape sweep: None as the case declares (``Case.shapes``), False never, True also at
        shapes derived for a case that declares none; a FAIL at a swept shape FAILs the certificate.
    max_time : float, optional
        Seconds the replicate phase may take. Past them the run stops at the next replicate, saves
        its state to ``checkpoint`` (when given) and raises :class:`~kcert.errors.TimeLimitReached`;
        ``resume=True`` continues it to the same certificate. The gates and checks that follow the
        replicates are bounded by their own budgets (the symbolic proof's work budget).
    on_event : callable, optional
        ``on_event(kind, detail)`` is told what the run does besides replicates: ``"resumed"``
        (``detail``: ``checkpoint``, ``replicates`` reused, ``looks`` done) once a checkpoint is
        loaded, and ``"stage"`` (``detail["stage"]``: "replicates", "algebra" or "checks") as each
        stage starts. For progress reports and logs; it changes nothing in the certificate.

    Returns
    -------
    Certificate
        The verdicts, their statistics and the provenance (seed, shapes, dtype, device, hardware,
        library versions, reproduce command). Under ``torch.distributed`` (a process group of > 1
        rank) the blocks of replicates are shared among the ranks and every rank returns the same
        certificate (docs/scaling.md).

    Raises
    ------
    ParameterError
        A parameter is out of its domain (the message names it).
    KernelError
        A kernel raised or returned something that cannot be compared (the message names the case,
        replicate and seed).
    TimeLimitReached
        The replicate phase ran past ``max_time`` (its state is saved when ``checkpoint`` is given).

    Examples
    --------
    >>> import torch, kcert
    >>> case = kcert.Case(
    ...     name="scale", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
    ...     inputs={"x": kcert.Gaussian((64,))}, dtype=torch.bfloat16)
    >>> cert = kcert.certify(case, replicates=128, peer_rules=False)
    >>> cert.verdict.value
    'PASS'
    """
    if not isinstance(case, Case):
        raise ParameterError(f"case must be a kcert.Case, got {type(case).__name__}")
    settings = Settings(replicates, horizon, seed, max_replicates, device, bias_thresholds, variance_thresholds,
                        algebra_points, algebra_proof, command, checkpoint, resume, checkpoint_every,
                        checkpoint_seconds, batch_memory, accept_untested_algebra, adequacy, peer_rules,
                        shapes, max_time).check()
    clock = _Clock(on_event or (lambda kind, detail: None))
    compiled_before = compiled.frames_compiled()
    runner, looks, judged, resumed = _run(case, settings, progress, clock)
    gates = _judge(case, settings, runner, judged, clock)
    cert = _assemble(case, settings, runner, looks, gates, judged,
                     notes=(compiled.compile_note(compiled_before), judged.settled_note(looks)), resumed=resumed)
    from .checks.run import attach  # the checks certify cases themselves: imported late

    clock.event("stage", stage="checks")
    cert = attach(cert, case, runner.weights, settings, clock.measure)
    return dataclasses.replace(cert, provenance=dataclasses.replace(
        cert.provenance, wall_time_s=clock.elapsed, timings=clock.timings()))


class _Clock:
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

    def __init__(self, case: Case, settings: Settings, runner: Runner, planned_looks: int, clock: _Clock):
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


def _run(case: Case, s: Settings, progress, clock: _Clock) -> tuple[Runner, list[int], _Looks, dict | None]:
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


def _judge(case: Case, s: Settings, runner: Runner, judged: _Looks, clock: _Clock) -> _Gates:
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


def _judge_algebra(case: Case, s: Settings, runner: Runner, clock: _Clock) -> AlgebraResult:
    clock.event("stage", stage="algebra")
    with clock.measure("algebra"):
        evidence = evaluate_algebra(case, runner.weights, s.seed, s.device, s.algebra_points, s.algebra_points,
                                    proof=s.algebra_proof)
        return judge_algebra(evidence, s.accept_untested_algebra, s.bias_thresholds.ulp_floor)


class _Code(str):
    """Text written into a command as it is (``repr`` would quote it)."""

    def __repr__(self) -> str:
        return str(self)


def _library_call(case: Case, s: Settings) -> str:
    """The ``kcert.certify(...)`` call that gives this certificate: every setting that is not the
    default and changes the certificate is named (batch_memory and checkpointing do not)."""
    default = Settings().check()
    extras = {name: getattr(s, name) for name in ("algebra_points", "algebra_proof", "accept_untested_algebra",
                                                  "adequacy", "peer_rules", "shapes")
              if getattr(s, name) != getattr(default, name)}
    for name in ("bias_thresholds", "variance_thresholds"):
        if getattr(s, name) != getattr(default, name):
            extras[name] = _Code(f"kcert.{getattr(s, name)!r}")
    return certify_call(f"<{case.name}>", replicates=s.replicates, horizon=s.horizon, seed=s.seed,
                        max_replicates=None if s.max_replicates == 4 * s.replicates else s.max_replicates,
                        device=str(s.device), extras=extras)


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
        command=s.command or _library_call(case, s),
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
