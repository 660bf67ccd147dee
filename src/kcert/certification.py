"""``kcert.certify``: run the three gates on one case, then the checks around them, and return its
certificate.

The certification core (:mod:`kcert.core`: validate -> run -> judge -> assemble) knows no check; this
module puts the checks of :mod:`kcert.checks` (peer rules, shape sweep, adequacy) on top of it. The
settings are :class:`kcert.settings.Settings`, built by keyword.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .case import Case
from .certificate import Certificate
from .checks.run import attach
from .core import run_core
from .execution.schedule import look_schedule
from .settings import DEFAULT_HORIZON, Settings

__all__ = ["DEFAULT_HORIZON", "Settings", "certify", "look_schedule"]


def certify(case: Case, settings: Settings | int | None = None, *, progress: Callable[[int, int], None] | None = None,
            on_event: Callable[[str, dict], None] | None = None, **overrides) -> Certificate:
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
    settings : Settings or int, optional
        The settings (:class:`kcert.settings.Settings`; default: kcert's defaults); ``overrides``
        replace any of them by keyword. Each is described below. An integer here is ``replicates``.
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
        horizon, thresholds and kcert version (else a ``CheckpointError`` names what differs). A
        larger ``max_replicates`` whose looks begin with the file's lets its looks go on, to the
        certificate of a run with that cap plus a note on the level over both plans (docs/scaling.md).
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
        A parameter is out of its domain or unknown (the message names it).
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
    settings = Settings.build(settings, **overrides).check()
    core = run_core(case, settings, progress, on_event)
    core.clock.event("stage", stage="checks")
    cert = attach(core.certificate, case, core.weights, settings, core.clock.measure)
    return dataclasses.replace(cert, provenance=dataclasses.replace(
        cert.provenance, wall_time_s=core.clock.elapsed, timings=core.clock.timings()))
