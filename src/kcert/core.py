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
from .certificate import Certificate, OutputInfo, Provenance
from .errors import KernelError, ParameterError
from .execution import checkpoint as _ckpt
from .execution import compiled, distributed, seeding
from .execution.algebra import evaluate_algebra
from .execution.environment import arithmetic, describe_environment, ranks_note
from .execution.runner import Runner
from .execution.schedule import Resumed, Saver, TimeLimit, look_schedule, resume as _resume, run_looks
from .gates import registry
from .gates.bitwise import judge_bitwise
from .gates.judging import Judging
from .reproduce import library_call
from .results.gates import ALGEBRA, BIAS, BUILTIN, VARIANCE, GateOutcome
from .settings import Settings
from .verdict import Verdict

__all__ = ["Clock", "CoreRun", "run_core"]


@dataclass(frozen=True)
class CoreRun:
    """What the core gives the checks that follow it: the certificate, the run's weights (the checks
    draw the same ones) and the clock that times every stage."""

    certificate: Certificate
    weights: object  # execution.probes.Draw
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
    # every rank's arithmetic, gathered by every rank (a collective) before the replicates are shared out
    ranks = distributed.current().all_gather(arithmetic(settings.device))
    runner, looks, judged, resumed = _run(case, settings, progress, clock)
    gates = _judge(case, settings, runner, judged, clock)
    cert = _assemble(case, settings, runner, looks, gates, judged,
                     notes=(compiled.compile_note(compiled_before), judged.settled_note(looks),
                            _ckpt.hosts_note((resumed or {}).get("hosts"), runner.done), ranks_note(ranks),
                            _extension_note(settings, resumed, looks)),
                     resumed=resumed)
    return CoreRun(cert, runner.weights, clock)


def _extension_note(s: Settings, resumed: dict | None, looks: list[int]) -> str | None:
    """The note of a run whose looks went on past an earlier plan's on the same draws: one its checkpoint
    recorded, or the one ``prior_max_replicates`` names (docs/method.md, "Raising the cap after the last look")."""
    schedule = look_schedule(s.replicates, s.max_replicates)
    if (resumed or {}).get("plans"):
        return _ckpt.extension_note(resumed["plans"], schedule, looks)
    return _ckpt.extension_note(prior_plans(s), schedule, looks,
                                earlier="the earlier run's plan (prior_max_replicates)")


def prior_plans(s: Settings) -> list[dict]:
    """The plan of the earlier run ``prior_max_replicates`` names, as a checkpoint records plans: it is taken to
    have judged every look it planned (the most its looks can weigh in the level)."""
    if s.prior_max_replicates is None:
        return []
    planned = len(look_schedule(s.replicates, s.prior_max_replicates))
    return [{"max_replicates": s.prior_max_replicates, "planned_looks": planned, "looks": planned}]


class Clock:
    """Seconds spent per stage of one certification (``provenance.timings``), and the run's events.
    The replicate phase's time is what is left of it once the judging done between looks is taken out."""

    AFTER_GATES = ("l0", "peer_rules", "shape_sweep", "adequacy")  # the stages after the gates, in order

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

    @classmethod
    def stages(cls) -> tuple[str, ...]:
        """Every stage, in the order ``provenance.timings`` lists them: the replicates, each gate of the
        registry, then L0 and the checks."""
        return ("replicates", *(j.gate.name for j in registry.JUDGES), *cls.AFTER_GATES)

    def timings(self) -> dict[str, float]:
        return {stage: round(self.seconds[stage], 6) for stage in self.stages() if stage in self.seconds}


class _Looks:
    """Judges the run after each look and says whether more replicates could change the verdict.
    More replicates only serve the gates judged at every look (the variance interval): once each of
    their results is decisive, or another gate FAILs (then the combined verdict is FAIL whatever they
    show), the run stops (:class:`kcert.gates.registry.Judge`)."""

    def __init__(self, case: Case, settings: Settings, runner: Runner, planned_looks: int, clock: Clock):
        self.case, self.settings, self.runner, self.planned_looks = case, settings, runner, planned_looks
        self.clock = clock
        self.oracle = True
        self.looks: tuple[int, ...] = ()
        self.looked: dict[str, tuple] = {}  # the gates judged at every look: their last look's results
        self.kept: dict[str, tuple] = {}  # gates whose evidence does not grow with R, judged early to stop
        self.settled: str | None = None  # why more looks could not change the combined verdict

    def judging(self) -> Judging:
        s, runner = self.settings, self.runner
        accumulators = tuple(runner.accumulators)
        return Judging(
            case=self.case, settings=s, accumulators=accumulators, oracle=self.oracle,
            output_seeds=tuple(seeding.derived_seed(s.seed, seeding.BOOTSTRAP, acc.layout.index)
                               for acc in accumulators),
            looks=self.looks, planned_looks=self.planned_looks,
            algebra_evidence=lambda: evaluate_algebra(self.case, runner.weights, s.seed, s.device, s.algebra_points,
                                                      s.algebra_points, proof=s.algebra_proof))

    def judge(self, judge: registry.Judge, judging: Judging) -> tuple:
        """One gate's results, timed under its name (a gate the registry says outlives the replicates is
        judged once and kept)."""
        name = judge.gate.name
        if not judge.grows and name in self.kept:
            return self.kept[name]
        if judge.announce:
            self.clock.event("stage", stage=name)
        with self.clock.measure(name):
            results = () if judge.needs_oracle and not judging.oracle else tuple(judge.judge(judging))
        if not judge.grows:
            self.kept[name] = results
        return results

    def __call__(self, looks: tuple[int, ...]) -> bool:
        self.oracle = self.runner.oracle_unavailable is None
        self.looks = tuple(looks)
        judging = self.judging()
        decisive = True
        for judge in registry.JUDGES:
            if judge.every_look:
                self.looked[judge.gate.name] = results = self.judge(judge, judging)
                decisive = decisive and all(judge.decisive(r) for r in results)
        if decisive or looks[-1] >= self.settings.max_replicates:
            return True
        for judge in _between_looks():
            if any(r.verdict is Verdict.FAIL for r in self.judge(judge, judging)):
                self.settled = f"the {judge.gate.name} gate FAILs"
                break
        return self.settled is not None

    def settled_note(self, looks: list[int]) -> str | None:
        if self.settled is None:
            return None
        return f"replicates stopped at the look of {looks[-1]}: {self.settled}, so more looks could not change the verdict"


def _between_looks() -> list[registry.Judge]:
    """The gates not judged at every look, those that read the accumulators first (cheap) before those
    that run kernels of their own."""
    return sorted((j for j in registry.JUDGES if not j.every_look), key=lambda j: not j.grows)


def _run(case: Case, s: Settings, progress, clock: Clock) -> tuple[Runner, list[int], _Looks, dict | None]:
    """Compute the replicates look by look (checkpointed, resumable, shared among ranks); the last
    item says what a resumed run took from its checkpoint (None for a fresh run)."""
    started = time.perf_counter()
    comm = distributed.current()
    runner = Runner(case, s.seed, s.device, batch_memory=s.batch_memory)  # batch_memory: see Case.independent_leading_axis
    fp = _ckpt.fingerprint(case, s.seed, s.replicates, s.max_replicates, s.horizon, s.device, s.bias_thresholds,
                           s.variance_thresholds) if s.checkpoint is not None else None
    schedule = look_schedule(s.replicates, s.max_replicates)
    took = _resume(s.checkpoint, fp, runner, comm, schedule) if s.resume else Resumed([], s.replicates, None, [])
    looks, target = took.looks, took.target
    hosts = _ckpt.continue_hosts(took.hosts, runner.done, arithmetic(s.device))
    resumed = None
    if s.resume:
        resumed = {"checkpoint": s.checkpoint, "replicates": runner.done, "looks": list(looks)}
        clock.event("resumed", **resumed)
        if len(hosts) > 1:  # only then: a resume on the same host stays equal to an uninterrupted run
            resumed["hosts"] = hosts
        if took.plans:  # the cap was raised on resume, now or before
            resumed["plans"] = took.plans
    clock.event("stage", stage="replicates")
    judged = _Looks(case, s, runner, len(schedule), clock)
    saver = Saver(s.checkpoint, fp, runner, comm, s.checkpoint_every, s.checkpoint_seconds, hosts=hosts,
                  plans=took.plans or prior_plans(s) or None)  # a later resume keeps counting the earlier plan
    limit = None if s.max_time is None else TimeLimit(s.max_time, time.monotonic())
    judging = sum(clock.seconds.values())
    looks = run_looks(runner, schedule, comm, saver, judged, progress, looks, target, limit)
    if runner.accumulators is None:
        raise KernelError(f"case {case.name!r}: no replicate was computed")
    clock.seconds["replicates"] = time.perf_counter() - started - (sum(clock.seconds.values()) - judging)
    return runner, looks, judged, resumed


@dataclass(frozen=True)
class _Gates:
    results: dict[str, tuple]  # gate name -> its results, in the registry's order
    bitwise: tuple


def _judge(case: Case, s: Settings, runner: Runner, judged: _Looks, clock: Clock) -> _Gates:
    """Every gate of the registry on what the run accumulated (a gate judged at every look: as at the
    last look; one judged early to stop the run: as then), and L0."""
    judging = judged.judging()
    found = dict(judged.looked)
    between = _between_looks()
    for judge in (j for j in between if j.grows):
        found[judge.gate.name] = judged.judge(judge, judging)
    with clock.measure("l0"):
        bitwise = tuple(judge_bitwise(acc, runner.early_moments(i, len(acc.replicate)), s.bias_thresholds.z_star)
                        for i, acc in enumerate(runner.accumulators))  # L0: informational, not a gate
    for judge in (j for j in between if not j.grows):  # those that run kernels of their own: last
        found[judge.gate.name] = judged.judge(judge, judging)
    return _Gates({j.gate.name: found.get(j.gate.name, ()) for j in registry.JUDGES}, bitwise)


def _assemble(case: Case, s: Settings, runner: Runner, looks: list[int], gates: _Gates, judged: _Looks,
              notes, resumed: dict | None) -> Certificate:
    outputs = tuple(
        OutputInfo(name=acc.layout.name, shape=acc.layout.shape, dtype=acc.layout.dtype_name,
                   prod_dtype=str(acc.layout.prod_dtype).removeprefix("torch."), buckets=acc.moments["raw"].size,
                   bucketing=acc.layout.spec.describe())
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
    skipped = None if judged.oracle else f"no float64 oracle: {runner.oracle_unavailable}"
    needs_oracle = [j.gate for j in registry.JUDGES if j.needs_oracle]  # skipped without the oracle
    return Certificate(
        case=case.name,
        algebra=gates.results[ALGEBRA.name][0],
        bias=gates.results[BIAS.name],
        variance=gates.results[VARIANCE.name],
        outputs=outputs,
        provenance=provenance,
        variance_skipped_reason=skipped if VARIANCE in needs_oracle else None,
        description=case.description,
        bitwise=gates.bitwise,
        notes=tuple(n for n in notes if n),
        extra_gates=tuple(GateOutcome(gate=j.gate, results=gates.results[j.gate.name],
                                      skipped_reason=skipped if j.gate in needs_oracle else None)
                          for j in registry.JUDGES if j.gate not in BUILTIN),
    )
