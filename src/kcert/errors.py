"""Error types: every error class kcert raises on purpose is defined here. Every error kcert raises
on bad input subclasses :class:`KcertError` and the matching builtin, so callers can catch either.
The modules that raise them import them from here, and their old import paths keep working
(``kcert.execution.checkpoint.CheckpointError``, ``kcert.adapters.ExtraMissing`` ...). This module
imports nothing (no torch, no numpy): anything may import it.

Two kinds of exception live elsewhere, on purpose:

- :class:`kcert.NotCertified` (:mod:`kcert.assertions`) is not an error: it is the outcome of a test,
  the ``AssertionError`` that :func:`kcert.assert_certified` raises so that pytest reports a failed
  test. It is not a :class:`KcertError` (``except KcertError`` must not swallow a failed
  certification), and its name as pytest prints it, ``kcert.assertions.NotCertified``, is part of
  the test output users read (docs/tutorial.md).
- Internal signals that never leave kcert (``SymbolicUnsupported``, ``SymbolicTimeout``,
  ``OracleUnavailable``, the symbolic proof's ``_NotReached``) are caught by the module next to the
  one that raises them and turned into a verdict or a reason; they stay with that code.
"""

from __future__ import annotations


class KcertError(Exception):
    """Base class of every error kcert raises on purpose.

    Each subclass is also the matching builtin (``ValueError``, ``ImportError``, ``RuntimeError``),
    so callers can catch either. A failed certification is not an error: :class:`kcert.NotCertified`
    is an ``AssertionError``.

    Examples
    --------
    >>> import kcert
    >>> try:
    ...     kcert.Gaussian((2, 3), std=-1.0)
    ... except kcert.KcertError as error:
    ...     print(type(error).__name__, "-", error)
    CaseError - Gaussian: std must be a finite number > 0, got -1.0
    >>> issubclass(kcert.CaseError, ValueError)
    True
    """


class ParameterError(KcertError, ValueError):
    """A parameter of a public entry point is out of its domain.

    Raised by :func:`kcert.certify` and :func:`kcert.assert_certified`, among others; also a ``ValueError``."""


class CaseError(KcertError, ValueError):
    """A case declaration is malformed (probes, buckets, dtype, names).

    Raised by :class:`kcert.Case`, the probes, the bucket specs and :func:`kcert.gradients`; also a ``ValueError``."""


class CaseFileError(KcertError, ImportError):
    """A case file cannot be imported or defines no usable ``kcert.Case``. Also an ``ImportError``."""


class KernelError(KcertError, RuntimeError):
    """A kernel (ref, prod or oracle) raised, or returned something kcert cannot compare.

    Also a ``RuntimeError``."""


class RealModeUnsupported(KcertError, RuntimeError):
    """A callable does something real-mode (float64) evaluation cannot follow faithfully.

    The message names the operation, dtype and shape (docs/method.md, "Gate 1"). Also a ``RuntimeError``."""


# --- checkpoints and reports ---------------------------------------------------------------------------


class CheckpointError(KcertError, ValueError):
    """A checkpoint cannot be read, or belongs to another run than the one being resumed."""


class TrainingCheckpointError(KcertError, ValueError):
    """A training checkpoint cannot be read, or belongs to another comparison."""


class CompareError(KcertError, ValueError):
    """A file given to ``kcert compare`` is not a kcert certificate, or cannot be read."""


# --- training comparison -------------------------------------------------------------------------------


class SlotError(CaseError):
    """A case cannot be mapped onto the training model."""


# --- adapters ------------------------------------------------------------------------------------------


class ExtraMissing(KcertError, ImportError):
    """An optional dependency (an extra of the kcert package) is not installed."""


class TritonPrecisionError(KcertError, ValueError):
    """A low-precision Triton run was asked of the CPU interpreter, which computes it wrongly."""


class TritonUnavailable(KcertError, RuntimeError):
    """Triton kernels cannot run here: no CUDA device and the interpreter is not enabled."""


class KernelBenchError(CaseFileError):
    """A KernelBench problem or candidate that cannot be loaded or built (exit 2 on the command line)."""


# --- bounded runs --------------------------------------------------------------------------------------


class TimeLimitReached(KcertError, TimeoutError):
    """The replicate phase of a certification ran past its time limit (``certify(max_time=...)``,
    ``kcert certify --max-time``). Not a verdict: the run stopped at a replicate boundary and, when it
    has a checkpoint, saved its state there, so ``resume=True`` continues it to the certificate an
    uninterrupted run gives. Also a ``TimeoutError``.

    Attributes: ``case``, ``done`` (replicates computed), ``planned`` (replicates of the look in
    progress), ``limit`` (seconds), ``checkpoint`` (the file holding the state, or None)."""

    def __init__(self, case: str, done: int, planned: int, limit: float, checkpoint: str | None):
        saved = (f"; the state is saved in {checkpoint}: resume to continue" if checkpoint
                 else "; no checkpoint was given, so nothing is saved")
        super().__init__(f"case {case!r}: the time limit of {limit:g} s was reached after {done} of {planned} "
                         f"planned replicates{saved}")
        self.case, self.done, self.planned, self.limit, self.checkpoint = case, done, planned, limit, checkpoint

    def __reduce__(self):  # pickled with its arguments (torchrun's ranks send it to each other)
        return type(self), (self.case, self.done, self.planned, self.limit, self.checkpoint)


class ModelTimeLimitReached(TimeLimitReached):
    """``certify_model``'s time limit (``max_time``, ``kcert model --max-time``) was reached: it bounds the
    whole call, every row together. Raised between rows, or in a row at a replicate boundary (that row's
    state saved when the run has a checkpoint); finished rows keep their checkpoint files, so
    ``resume=True`` continues the run where it stopped.

    Attributes: those of :class:`TimeLimitReached` for the row it stopped in (``done`` 0 when it stopped
    between rows), and ``model``, ``row`` (the row's label), ``finished`` and ``rows`` (rows finished, rows
    in all)."""

    def __init__(self, model: str, row: str, finished: int, rows: int, limit: float, checkpoint: str | None,
                 stopped: TimeLimitReached | None = None):
        where = (f"in row {row} after {stopped.done} of {stopped.planned} planned replicates" if stopped is not None
                 else f"before row {row} started")
        kept = "finished rows are" if stopped is None else "finished rows and the row in progress are"
        saved = (f"; {kept} saved beside {checkpoint}: resume to continue" if checkpoint
                 else "; no checkpoint was given, so nothing is saved")
        KcertError.__init__(self, f"model {model!r}: the time limit of {limit:g} s for the whole run was reached "
                                  f"{where}, {finished} of {rows} rows finished{saved}")
        done, planned = (0, 0) if stopped is None else (stopped.done, stopped.planned)
        self.case, self.done, self.planned, self.limit, self.checkpoint = row, done, planned, limit, checkpoint
        self.model, self.row, self.finished, self.rows = model, row, finished, rows
        self.stopped = stopped

    def __reduce__(self):
        return type(self), (self.model, self.row, self.finished, self.rows, self.limit, self.checkpoint, self.stopped)

    def with_finished(self, finished: int) -> ModelTimeLimitReached:
        """The same stop, counting ``finished`` rows (torchrun's ranks sharing rows add up what each finished)."""
        return type(self)(self.model, self.row, finished, self.rows, self.limit, self.checkpoint, self.stopped)
