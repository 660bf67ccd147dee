"""What a long command needs from its process: torch's thread count, a time limit, and SIGTERM turned
into a clean stop. Light at import (no torch): the command's ``run`` calls these after parsing.

Exit codes of a run that did not finish (docs/verdicts.md): 124 its ``--max-time`` ran out (as
``timeout(1)`` says), 130 Ctrl-C (SIGINT), 143 SIGTERM (what CI runners send at their own time
limit); each saves the state to the run's checkpoint first and says how to continue.
"""

from __future__ import annotations

import argparse
import re
import signal
import threading
import time

EXIT_TIME_LIMIT, EXIT_INTERRUPTED, EXIT_TERMINATED = 124, 130, 143
DEFAULT_INTERVAL = 30.0  # seconds between progress lines without a terminal (--progress-every)

# torch's intra-op threads of a run (--threads). 1: on the shared 2-core machine two threads made the
# replicates of a light kernel 4-12x slower and of a GEMM 1.4-1.8x slower (docs/benchmarks.md,
# "Threads"; benchmarks/threads.py), and one thread keeps a kernel's roundings independent of the cores.
DEFAULT_THREADS = 1

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``1h30m`` or ``2h``; > 0."""
    compact = text.strip().lower().replace(" ", "")
    parts = re.fullmatch(r"((?:\d+(?:\.\d+)?[smhd]?)+)", compact)
    pieces = re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", compact) if parts else []
    if not pieces or ("" in [u for _, u in pieces] and len(pieces) > 1):
        raise argparse.ArgumentTypeError(f"must be a duration such as 600, 90s, 30m or 1h30m, got {text!r}")
    seconds = sum(float(n) * _UNITS[u] for n, u in pieces)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be a duration > 0, got {text!r}")
    return seconds


def human(seconds: float) -> str:
    """``45 s``, ``12m 05s``, ``3h 20m``: for estimates and progress lines."""
    if seconds != seconds or seconds == float("inf"):
        return "unknown"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {s:02d}s"
    hours, m = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {m:02d}m"
    return f"{hours / 24:.1f} days"


_CALLER_THREADS: list[int] = []  # torch's thread count before the command set its own


def set_threads(threads: int) -> None:
    """torch's intra-op threads for the rest of the command (kcert's compiled reduction follows them);
    :func:`restore_threads` gives the caller's back (``kcert.cli.main`` called from Python)."""
    import torch

    if not _CALLER_THREADS:
        _CALLER_THREADS.append(torch.get_num_threads())
    torch.set_num_threads(threads)


def restore_threads() -> None:
    """Give torch the thread count it had before :func:`set_threads`, if that was called."""
    if _CALLER_THREADS:
        import torch

        torch.set_num_threads(_CALLER_THREADS.pop())


class Clock:
    """The command's time limit (``--max-time``), shared by the cases it runs in turn."""

    def __init__(self, limit: float | None):
        self.limit = limit
        self.start = time.monotonic()

    def remaining(self) -> float | None:
        """Seconds left, or None without a limit."""
        return None if self.limit is None else self.limit - (time.monotonic() - self.start)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that every place that
    saves its state on an interrupt (the run loop's checkpoint) saves it on SIGTERM as well."""


class TerminateOnSignal:
    """While active, SIGTERM raises :class:`Terminated` in the main thread (once: a second SIGTERM
    while the state is being saved is ignored). Outside the main thread it does nothing."""

    def __init__(self):
        self._previous = None
        self._raised = False

    def _handler(self, signum, frame):
        if self._raised:
            return
        self._raised = True
        raise Terminated()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        return False
