"""What the symbolic evaluator refuses and what it may spend: :class:`SymbolicUnsupported` (an
operation it cannot follow), :class:`SymbolicTimeout` and :class:`Deadline` (the proof's budgets),
:func:`expression_size` (the work unit of the proof), and the budget of the evaluation now running
(``_spend``, ``_check_active``), which every evaluated operation draws on."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from typing import Any

import sympy

from .. import realmode


class SymbolicUnsupported(Exception):
    """The symbolic evaluator cannot follow an operation; ``op`` names it."""

    def __init__(self, op: str, why: str = "the symbolic evaluator does not implement it"):
        super().__init__(f"`{op}`: {why}")
        self.op = op
        self.why = why


class SymbolicTimeout(BaseException):
    """The proof's budget ran out. ``kind``: "work" (the deterministic work budget) or "time" (the
    wall-clock guard against a hang). A BaseException so that ``except Exception`` in kernel or SymPy
    code cannot swallow it."""

    def __init__(self, message: str, kind: str = "time"):
        super().__init__(message)
        self.kind = kind


class Deadline:
    """The proof's budgets.

    ``units``: the deterministic work budget. The evaluator spends, per operation, the number of
    symbolic elements it reads and writes; the proof spends the size (expression nodes) of every
    expression it simplifies or evaluates. Equal inputs spend equal units on any machine, so where a
    proof stops does not depend on the load: equal runs give equal certificates.
    ``seconds``: a wall-clock guard against a hang (a SymPy call that never returns), far above what
    the work budget allows; ``check()`` raises :class:`SymbolicTimeout` once it is spent, and inside
    ``alarm()`` (main thread, no other timer running) a SIGALRM also interrupts long SymPy calls."""

    def __init__(self, seconds: float | None = None, units: int | None = None):
        self.seconds = None if seconds is None else float(seconds)
        self.end = math.inf if seconds is None else time.monotonic() + self.seconds
        self.units = units
        self.spent = 0

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def spend(self, units: int) -> None:
        self.spent += int(units)
        if self.units is not None and self.spent > self.units:
            raise SymbolicTimeout(f"work budget of {self.units:,} units spent", "work")

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise SymbolicTimeout(f"time guard of {self.seconds:g} s spent", "time")

    @contextlib.contextmanager
    def alarm(self):
        usable = (self.seconds is not None and hasattr(signal, "setitimer")
                  and threading.current_thread() is threading.main_thread()
                  and signal.getitimer(signal.ITIMER_REAL)[0] == 0)
        if not usable:  # cooperative checks only
            yield
            return

        def ring(signum, frame):
            raise SymbolicTimeout(f"time guard of {self.seconds:g} s spent", "time")

        previous = signal.signal(signal.SIGALRM, ring)
        try:
            signal.setitimer(signal.ITIMER_REAL, max(self.remaining(), 1e-3))
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def expression_size(e: Any, cap: int = 10**6) -> int:
    """Nodes of ``e``'s expression tree (at most ``cap``): the work unit of simplifying or evaluating it."""
    if not isinstance(e, sympy.Basic):
        return 1
    n = 0
    for _ in sympy.preorder_traversal(e):
        n += 1
        if n >= cap:
            break
    return n


_active = threading.local()


def _spend(units: int) -> None:
    deadline = getattr(_active, "deadline", None)
    if deadline is not None and units:
        deadline.spend(units)


def _check_active() -> None:
    deadline = getattr(_active, "deadline", None)
    if deadline is not None:
        deadline.check()
    if getattr(realmode._tls, "bypass", 0):
        raise SymbolicUnsupported("kcert.semantic_round", "a rounding that belongs to the definition has no exact "
                                                          "real-number form")
