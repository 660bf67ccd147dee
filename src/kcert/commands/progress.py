"""Progress of long commands (rich; imported only when a command runs).

On a terminal a transient bar shows one case's replicates. Without one (a CI log) a line is printed
at a bounded interval instead (:class:`Heartbeat`, from a background thread, so a kernel that takes
minutes per call still shows the run is alive and which stage it is in). Once the replicate rate
is known, :class:`RunProgress` prints an estimate of the run and warns when the planned replicates
would not fit in the time limit.
"""

from __future__ import annotations

import threading
import time

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.text import Text

from ..results.gates import BUILTIN
from .runtime import human

ESTIMATE_AFTER = (3, 2.0)  # replicates and seconds after the first one (its warm-up is left out of the rate)
ESTIMATE_LATEST = 20.0  # seconds after the first replicate: estimate from whatever finished by then
LONG_RUN = 3600.0  # seconds: an estimate above this warns even without --max-time (and with --quiet)
STAGES = {**{g.name: g.doing for g in BUILTIN},  # a gate the registry adds: its name
          "checks": "the checks after the gates (peer rules, shape sweep, adequacy)"}


class Rate(ProgressColumn):
    """Replicates per second (rich's own speed columns speak of bytes or hide the rate)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:.1f} rep/s" if task.speed else "", style="cyan")


def replicates_bar(label: str, console) -> Progress:
    """A transient bar for one case's replicates (off when stderr is not a terminal)."""
    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), Rate(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=True, disable=not console.is_terminal)


def items_bar(console) -> Progress:
    """A transient bar over named items (controls, calibration runs)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


class Heartbeat:
    """Prints ``describe()`` every ``interval`` seconds from a daemon thread until stopped."""

    def __init__(self, interval: float, describe, note):
        self.interval, self.describe, self.note = interval, describe, note
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kcert-progress", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.note(self.describe())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False


class RunProgress:
    """The progress of one certification: ``tick(done, planned)`` and ``event(kind, detail)`` are
    :func:`kcert.certify`'s ``progress`` and ``on_event``.

    ``cap``: the most replicates the run may compute (the variance gate's last look);
    ``remaining``: seconds left of the time limit at the start, or None; ``warn``/``note``: print a
    warning or a note (notes are dropped in quiet mode by the caller); ``bar``: the terminal bar's
    update function, or None without a terminal; ``label``: how lines name the case."""

    def __init__(self, label: str, cap: int, remaining: float | None, note, warn, bar=None):
        self.label, self.cap, self.remaining = label, cap, remaining
        self.note, self.warn, self.bar = note, warn, bar
        self.start = time.monotonic()
        self.stage, self.stage_start = "starting", self.start
        self.done, self.planned = 0, 0
        self.first: tuple[float, int] | None = None  # (time, done) at the first replicate
        self.rate: float | None = None
        self.estimated = False

    # -- certify's callbacks ----------------------------------------------------------------------
    def tick(self, done: int, planned: int) -> None:
        now = time.monotonic()
        self.done, self.planned = done, planned
        if self.bar is not None:
            self.bar(done, planned)
        if self.first is None:
            self.first = (now, done)
            return
        t0, d0 = self.first
        if done > d0 and now > t0:
            self.rate = (done - d0) / (now - t0)
        if not self.estimated and self.rate is not None and (
                (done - d0 >= ESTIMATE_AFTER[0] and now - t0 >= ESTIMATE_AFTER[1]) or now - t0 >= ESTIMATE_LATEST):
            self.estimated = True
            self._estimate(now)

    def event(self, kind: str, detail: dict) -> None:
        if kind == "stage":
            self.stage, self.stage_start = detail["stage"], time.monotonic()
        elif kind == "resumed":
            looks = ", ".join(str(n) for n in detail["looks"]) or "none finished"
            self.note(f"kcert: {self.label}: resumed from {detail['checkpoint']}: {detail['replicates']} replicates "
                      f"reused (looks: {looks}); computing from replicate {detail['replicates']}")

    # -- what is printed ----------------------------------------------------------------------------
    def _estimate(self, now: float) -> None:
        rate = self.rate
        first = max(self.planned - self.done, 0) / rate
        whole = max(self.cap - self.done, 0) / rate
        text = (f"kcert: {self.label}: {rate:.3g} replicates/s; the look of {self.planned} replicates needs "
                f"~{human(first)} more")
        if self.cap > self.planned:
            text += f", up to {self.cap} replicates if the variance gate needs every look (~{human(whole)})"
        text += "; the algebra gate and the checks come on top"
        self.note(text)
        if self.remaining is None:
            if first > LONG_RUN:
                self.warn(f"{self.label}: at {rate:.3g} replicates/s the look of {self.planned} replicates needs "
                          f"~{human(first)}; --max-time bounds a run (it saves the state to continue with --resume)")
            return
        left = self.remaining - (now - self.start)
        if first > left:
            reach = self.done + int(rate * max(left, 0.0))
            self.warn(f"{self.label}: at {rate:.3g} replicates/s the look of {self.planned} replicates needs "
                      f"~{human(first)}, more than the ~{human(left)} left of --max-time: the run will stop near "
                      f"replicate {reach} and save its state (continue it with --resume); lower --replicates or "
                      f"raise --max-time")
        elif whole > left:
            self.note(f"kcert: {self.label}: the further looks of the variance gate (up to {self.cap} replicates) "
                      f"would not all fit in the ~{human(left)} left of --max-time")

    def describe(self) -> str:
        """One progress line: the stage, the replicates and their rate, the time spent."""
        now = time.monotonic()
        if self.stage in ("starting", "replicates") and not self.planned:
            line = f"kcert: {self.label}: the first replicate (drawing, ref, prod, the oracle; first calls are slower)"
        elif self.stage in ("starting", "replicates"):
            line = f"kcert: {self.label}: replicates {self.done} of {self.planned}"
            if self.rate:
                left = human(max(self.planned - self.done, 0) / self.rate)
                line += f" ({self.rate:.3g}/s, ~{left} left in this look)"
        else:
            stage = STAGES.get(self.stage, self.stage)
            line = f"kcert: {self.label}: {stage} ({human(now - self.stage_start)} in it)"
        return f"{line}; {human(now - self.start)} in all"
