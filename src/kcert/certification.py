"""``kcert.certify``: run the three gates on one case and return its certificate."""

from __future__ import annotations

import datetime as _dt
import math
import os
import time
from typing import Callable

import torch

from .case import Case
from .certificate import Certificate, OutputInfo, Provenance, VarianceThresholds
from .errors import KcertError, KernelError, ParameterError
from .execution import checkpoint as _ckpt
from .execution import compiled, distributed, seeding
from .execution.environment import describe_environment
from .execution.runner import Runner
from .gates.algebra import judge_algebra
from .gates.bias import judge_bias
from .gates.bitwise import judge_bitwise
from .gates.variance import interval_is_decisive, judge_variance
from .reproduce import exact_number
from .stats.bias import BiasThresholds
from .stats.ulp import harm_format
from .verdict import Verdict

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
) -> Certificate:
    """Certify ``case``: algebra, bias and variance gates over ``replicates`` seeded replicates.

    The variance gate may add replicates (doubling) up to ``max_replicates`` (default 4 x
    ``replicates``) while its interval straddles a threshold; the looks are planned in advance
    (:func:`look_schedule`) and alpha is spent evenly over them, so stopping early keeps the
    stated error rate. The bias gate uses every replicate.
    ``progress(done, planned)`` is called after each replicate. ``algebra_proof=False`` skips the
    algebra gate's symbolic proof (the identity test always runs). ``batch_memory``: bytes per
    batched kernel call when the case declares ``independent_leading_axis`` (default: 16 MiB on
    CPU, 256 MiB on CUDA). ``accept_untested_algebra``: when no algebra test can run (an opaque
    prod at one precision), the verdict rests on the bias and variance gates and the certificate
    states the limit (as ``Case(accept_untested_algebra=True)``; docs/verdicts.md).

    Checks after the gates (docs/kernelbench.md): ``peer_rules`` (default on) re-runs the kernels on the
    first 5 replicates' draws and records what torch.testing.assert_close, KernelBench's allclose,
    FlashAttention's rule and torch._dynamo's ``same`` say (informational). ``shapes``: the shape sweep,
    None as the case declares (``Case.shapes``), False never, True also derived for a case that declares
    none; a FAIL at a swept shape FAILs the certificate. ``adequacy``: run the fixed fakes through the
    same probes and gates; one that is not FAILed (or a degenerate ref) keeps the certificate from a PASS.

    ``checkpoint``: a file where the run's state is saved at the first block boundary after every
    ``checkpoint_every`` replicates or ``checkpoint_seconds`` seconds, at the end of the replicate
    phase, and when a kernel raises or the run is interrupted. ``resume=True`` continues from it
    (it must have been written by a run with the same case, seed, dtype, probes, replicates,
    max_replicates, horizon, thresholds and kcert version) to the certificate an uninterrupted
    run gives. Under ``torch.distributed`` (a process group of > 1 rank) the accumulation blocks
    are shared among the ranks; every rank returns the same certificate (docs/scaling.md).
    """
    if not isinstance(case, Case):
        raise ParameterError(f"case must be a kcert.Case, got {type(case).__name__}")
    _check_int("replicates", replicates, 2)
    _check_int("seed", seed, 0)
    if max_replicates is None:
        max_replicates = 4 * replicates
    _check_int("max_replicates", max_replicates, replicates)
    _check_int("algebra_points", algebra_points, 1)
    for flag, value in (("adequacy", adequacy), ("peer_rules", peer_rules)):
        if not isinstance(value, bool):
            raise ParameterError(f"{flag} must be True or False, got {value!r}")
    if shapes is not None and not isinstance(shapes, bool):
        raise ParameterError(f"shapes must be None, True or False, got {shapes!r}")
    if not isinstance(accept_untested_algebra, bool):
        raise ParameterError(f"accept_untested_algebra must be True or False, got {accept_untested_algebra!r}")
    try:
        horizon = float(horizon)
    except (TypeError, ValueError):
        raise ParameterError(f"horizon must be a number > 1, got {horizon!r}") from None
    if not math.isfinite(horizon) or horizon <= 1:
        raise ParameterError(f"horizon must be a finite number > 1, got {horizon!r}")
    dev = _check_device(device)
    bias_thresholds = bias_thresholds or BiasThresholds()
    variance_thresholds = variance_thresholds or VarianceThresholds()
    if resume and checkpoint is None:
        raise ParameterError("resume=True needs checkpoint, the file to resume from; got checkpoint=None")
    if checkpoint is not None:
        checkpoint = os.fspath(checkpoint)
        _check_int("checkpoint_every", checkpoint_every, 1)
        try:
            checkpoint_seconds = float(checkpoint_seconds)
        except (TypeError, ValueError):
            raise ParameterError(f"checkpoint_seconds must be a number > 0, got {checkpoint_seconds!r}") from None
        if not checkpoint_seconds > 0:
            raise ParameterError(f"checkpoint_seconds must be a number > 0, got {checkpoint_seconds!r}")
        folder = os.path.dirname(os.path.abspath(checkpoint))
        if not os.path.isdir(folder):
            raise ParameterError(f"checkpoint {checkpoint!r}: the folder {folder!r} does not exist")

    started = time.perf_counter()
    compiled_before = compiled.frames_compiled()
    comm = distributed.current()
    runner = Runner(case, seed, dev, batch_memory=batch_memory)  # batch_memory: see Case.independent_leading_axis
    fp = _ckpt.fingerprint(case, seed, replicates, max_replicates, horizon, dev, bias_thresholds, variance_thresholds) \
        if checkpoint is not None else None
    looks: list[int] = []
    target = replicates
    schedule = look_schedule(replicates, max_replicates)
    planned_looks = len(schedule)
    if resume:
        looks, target = _resume(checkpoint, fp, runner, comm)
    planned = target
    done = runner.done

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, planned)

    saver = _Saver(checkpoint, fp, runner, comm, checkpoint_every, checkpoint_seconds)

    def judge_all_bias(oracle: bool):
        return tuple(judge_bias(acc, bias_thresholds, horizon, attribution=oracle,
                                dtypes_may_differ=case.dtypes_may_differ,
                                harm_format=harm_format(acc.layout.dtype_name, case.training_format))
                     for acc in runner.accumulators)

    def judge_algebra_gate():
        return judge_algebra(case, runner.weights, seed, dev, points=algebra_points, wide_points=algebra_points,
                             proof=algebra_proof, accept_untested=accept_untested_algebra,
                             bias_floor_ulp=bias_thresholds.ulp_floor)

    algebra = None
    settled = None  # why more looks could not change the combined verdict
    try:
        while True:
            saver.looks, saver.target = looks, target
            if not (looks and looks[-1] == target):  # a resumed, finished run has nothing left to compute
                _advance(runner, target, comm, tick, saver)
                looks.append(target)
            oracle = runner.oracle_unavailable is None
            variance = tuple(
                judge_variance(acc.layout.name, acc.layout.dtype_name, *acc.errors(), horizon, variance_thresholds,
                               seeding.derived_seed(seed, seeding.BOOTSTRAP, acc.layout.index), tuple(looks),
                               planned_looks, harm_format=harm_format(acc.layout.dtype_name, case.training_format))
                for acc in runner.accumulators
            ) if oracle else ()
            stop = not oracle or all(interval_is_decisive(v) for v in variance) or target >= max_replicates
            if not stop:
                # more replicates only serve the variance interval: once another gate FAILs, the
                # combined verdict is FAIL whatever they show, and the run stops at this look
                if any(b.verdict is Verdict.FAIL for b in judge_all_bias(oracle)):
                    settled = "the bias gate FAILs"
                else:
                    algebra = algebra or judge_algebra_gate()
                    if algebra.verdict is Verdict.FAIL:
                        settled = "the algebra gate FAILs"
                stop = settled is not None
            if comm.broadcast(stop):  # rank 0 decides for every rank
                break
            target = next(n for n in schedule if n > target)  # the next planned look
            planned = target
    except (KcertError, KeyboardInterrupt) as exc:
        try:
            saver.save()  # keep what was computed
        except OSError as save_error:
            exc.add_note(f"the checkpoint could not be saved: {save_error}")
        raise
    saver.save()

    if runner.accumulators is None:
        raise KernelError(f"case {case.name!r}: no replicate was computed")
    bias = judge_all_bias(oracle)
    bitwise = tuple(judge_bitwise(acc, runner.early_moments(i, len(acc.replicate)), bias_thresholds.z_star)
                    for i, acc in enumerate(runner.accumulators))  # L0: informational
    algebra = algebra or judge_algebra_gate()

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
        command=command or (f"kcert.certify(<{case.name}>, replicates={replicates}, "
                            f"horizon={exact_number(horizon)}, seed={seed})"),
        environment=describe_environment(dev),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        wall_time_s=time.perf_counter() - started,
    )
    cert = Certificate(
        case=case.name,
        algebra=algebra,
        bias=bias,
        variance=variance,
        outputs=outputs,
        provenance=provenance,
        variance_skipped_reason=None if oracle else f"no float64 oracle: {runner.oracle_unavailable}",
        description=case.description,
        bitwise=bitwise,
        notes=tuple(n for n in (compiled.compile_note(compiled_before),
                                (f"replicates stopped at the look of {looks[-1]}: {settled}, so more looks could not "
                                 "change the verdict" if settled else None)) if n),
    )
    from .checks.run import attach

    return attach(cert, case, runner.weights, seed, dev, horizon, bias_thresholds, variance_thresholds,
                  adequacy=adequacy, peer_rules=peer_rules, shapes=shapes,
                  accept_untested_algebra=accept_untested_algebra)


def look_schedule(replicates: int, max_replicates: int) -> list[int]:
    """The planned looks of the variance gate: R, 2R, 4R, ... up to max_replicates. They are fixed
    before any data is seen, so alpha can be spent evenly over them."""
    looks = [replicates]
    while looks[-1] < max_replicates:
        looks.append(min(2 * looks[-1], max_replicates))
    return looks


def _resume(path: str, fp: dict, runner: Runner, comm) -> tuple[list[int], int]:
    """Load the checkpoint (rank 0 reads it and sends it to the other ranks) into ``runner``."""
    payload = None
    if comm.rank == 0:
        try:
            payload = _ckpt.load(path, fp)
        except _ckpt.CheckpointError as exc:
            payload = str(exc)
    meta, arrays = _ckpt.from_wire(comm.broadcast(payload))
    return _ckpt.restore(runner, meta, arrays)


class _Saver:
    """Saves the run's state (on rank 0) every ``every`` replicates or ``seconds`` seconds."""

    def __init__(self, path, fp, runner: Runner, comm, every: int, seconds: float):
        self.path, self.fp, self.runner, self.comm = path, fp, runner, comm
        self.every, self.seconds = every, seconds
        self.looks: list[int] = []
        self.target = 0
        self._last_done = runner.done
        self._last_time = time.monotonic()

    def save(self) -> None:
        if self.path is None or self.comm.rank != 0:
            return
        _ckpt.save(self.path, self.runner, self.fp, self.looks, self.target)
        self._last_done, self._last_time = self.runner.done, time.monotonic()

    def maybe(self) -> None:
        if self.path is None or self.comm.rank != 0:
            return
        if self.runner.done - self._last_done >= self.every or time.monotonic() - self._last_time >= self.seconds:
            self.save()


def _advance(runner: Runner, stop: int, comm, tick: Callable[[int], None], saver: _Saver) -> None:
    """Compute every replicate below ``stop``, block by block; under torch.distributed the blocks
    of each round go to the ranks in turn and the round's blocks are gathered by every rank."""
    if comm.world == 1:
        for b in runner.blocks_to_run(stop):
            runner.run_block(b, stop, tick)
            saver.maybe()
        return
    own_ticks = tick if comm.rank == 0 else None
    try:
        runner.settle_oracle()  # replicate 0 decides oracle availability, on every rank alike
        settle_error = None
    except KcertError as exc:
        settle_error = exc
    todo = runner.blocks_to_run(stop)
    for i in range(0, len(todo), comm.world):
        round_blocks = todo[i:i + comm.world]
        mine = round_blocks[comm.rank] if comm.rank < len(round_blocks) else None
        before = {b: runner.filled(b) for b in round_blocks}
        error, block = settle_error, None
        if mine is not None and error is None:
            try:
                block = runner.run_block(mine, stop, own_ticks)
            except Exception as exc:  # noqa: BLE001 - every rank must reach the gather
                error = exc
                block = runner.safe_pending().get(mine)  # what was computed before the error
        payload = {
            "error": None if error is None else (mine, type(error).__name__, str(error), isinstance(error, KcertError)),
            "layouts": None if runner.layouts is None else [_ckpt.encode_layout(l) for l in runner.layouts],
            "block": _ckpt.encode_block(block) if block is not None else None,
        }
        gathered = comm.all_gather(payload)
        if runner.layouts is None:
            described = next((p["layouts"] for p in gathered if p["layouts"] is not None), None)
            if described is not None:
                runner.layouts = _ckpt.decode_layouts(runner.case, described)
        for rank, p in enumerate(gathered):
            if rank != comm.rank and p["block"] is not None:
                runner.add_block(_ckpt.decode_block(p["block"], runner.layouts))
        if comm.rank == 0:
            others = sum(runner.filled(b) - before[b] for b in round_blocks if b != mine)
            if others:
                tick(others)
        errors = sorted((p["error"] for p in gathered if p["error"] is not None), key=lambda e: (e[0] is not None, e[0] or 0))
        if errors:
            if error is not None and payload["error"] == errors[0]:
                raise error
            _block, kind, message, ours = errors[0]
            raise KernelError(message if ours else f"{kind}: {message}")
        saver.maybe()
