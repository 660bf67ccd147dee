"""One command's run over its cases (``kcert certify``, ``kcert demo``, ``kernelbench``; ``train-compare``,
``kcert model`` and ``kcert step`` through :class:`CommandRun`):
each case under its progress report, every way a case can end turned into one outcome, the reports
written, and one exit code. :class:`CommandRun` is what every such command shares (printing, a case's
work turned into an outcome, writing the reports); :class:`Session` adds the certifying commands' loop.

A case ends with a certificate (a verdict), or with an error (exit 2: one line naming the case and
what to fix), or it stops the whole run: the time limit (exit 124), SIGTERM (143) or Ctrl-C (130),
each after the run loop saved the state to the case's checkpoint, and each says so and how to
continue. An exception kcert did not expect is an error too (exit 2, never 1: exit 1 means a FAIL).
"""

from __future__ import annotations

import os
import shlex
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from . import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_REVIEW
from .options import settings_values
from .output import STDOUT, Streams, safe_name, write_output
from .runtime import (DEFAULT_INTERVAL, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_TIME_LIMIT, Clock, Terminated,
                      human)


@dataclass(frozen=True)
class Stop:
    """Why a run stopped before its last case: the exit code and the sentence to print."""

    code: int
    message: str


def checkpoint_path(path: str, case: str, n_cases: int) -> str:
    """The checkpoint file of ``case``: ``path`` itself for one case, else ``stem.<case>.npz`` beside it."""
    if n_cases == 1:
        return path

    p = Path(path)
    return str(p.with_name(f"{p.stem}.{safe_name(case)}{p.suffix or '.npz'}"))


def continue_command(args) -> str:
    """The command line that continues this run from its checkpoint."""
    words = ["kcert", *getattr(args, "argv", [])]
    if args.checkpoint and "--checkpoint" not in words:
        words += ["--checkpoint", args.checkpoint]
    if "--resume" not in words:
        words.append("--resume")
    return shlex.join(words)


class CommandRun:
    """What the run of every command over its cases shares: how it prints, one case's work turned into an
    outcome (:meth:`attempt`) and the report files (:meth:`write`). ``interval``: seconds between
    progress lines without a terminal (``--progress-every``; none with ``--quiet``)."""

    def __init__(self, args, streams: Streams):
        self.args, self.streams = args, streams
        interval = args.progress_every
        self.interval = (0.0 if args.quiet else DEFAULT_INTERVAL) if interval is None else interval

    # -- what is printed ----------------------------------------------------------------------------
    def note(self, message: str) -> None:
        if not self.args.quiet:
            self.streams.note(message)

    def warn(self, message: str) -> None:
        self.streams.note(f"kcert: warning: {message}")

    def error(self, exc: BaseException) -> None:
        cause = exc.__cause__
        if self.args.traceback and not self.args.silent:
            self.streams.err.print("".join(traceback.format_exception(exc)).rstrip(), markup=False, highlight=False,
                                   soft_wrap=True)
        hint = "; --traceback prints the full traceback" if cause is not None and not self.args.traceback else ""
        self.streams.error(f"{exc}{hint}")

    # -- one case ------------------------------------------------------------------------------------
    def attempt(self, name: str, work, where: str, saved, ran_out=None) -> tuple:
        """``work()`` for case ``name``, every way it can end turned into (outcome, stop): (its result,
        None); (the error, printed, as text, None): exit 2; (None, :class:`Stop`) for SIGTERM (143), Ctrl-C
        (130) and, when ``ran_out(exc)`` words it, the time limit (124). ``where`` places the stop
        (" in case 'x'"), ``saved()`` says what was saved and how to continue."""
        from ..errors import KcertError, TimeLimitReached

        try:
            return work(), None
        except Terminated:
            return None, Stop(EXIT_TERMINATED, f"kcert: terminated (SIGTERM){where}{saved()}")
        except KeyboardInterrupt:
            return None, Stop(EXIT_INTERRUPTED, f"kcert: interrupted{where}{saved()}")
        except KcertError as exc:
            if ran_out is not None and isinstance(exc, TimeLimitReached):
                return None, Stop(EXIT_TIME_LIMIT, f"kcert: {ran_out(exc)}{saved()}")
            self.error(exc)
            return str(exc), None
        except Exception as exc:  # noqa: BLE001 - a bug or an input kcert does not check: exit 2, never 1
            error = RuntimeError(f"case {name!r}: kcert stopped on an unexpected {type(exc).__name__}: "
                                 f"{exc} (an input kcert does not check yet, or a bug in kcert: please report "
                                 "it with the traceback)")
            error.__cause__ = exc
            self.error(error)
            return str(error), None

    def each(self, items, work, where, saved, render, ran_out=None) -> tuple[list, Stop | None]:
        """:meth:`attempt` ``work(item)`` for each item in turn (``where(item)`` and ``ran_out(item, exc)`` word
        its stops), ``render`` each result; an error is printed and the other items still run. Returns
        (item name, result or error text) per item that ended, and the stop that ended the run early."""
        outcomes: list = []
        for item in items:
            out, stop = self.attempt(item.name, lambda item=item: work(item), where(item), saved,
                                     None if ran_out is None else (lambda exc, item=item: ran_out(item, exc)))
            if stop is not None:
                return outcomes, stop
            outcomes.append((item.name, out))
            if not isinstance(out, str):
                render(out)
        return outcomes, None

    # -- the end -------------------------------------------------------------------------------------
    def write(self, reports) -> bool:
        """Write each report asked for: (option name, label, text()) with ``label`` the note naming the file
        written (None: no note). False when one could not be written where asked (it was saved elsewhere)."""
        args, streams = self.args, self.streams
        ok = True
        for name, label, text in reports:
            target = getattr(args, name)
            if not target:
                continue
            written = write_output(f"--{name}", target, text(), streams)
            if written and target != STDOUT and label:
                self.note(f"{label}: {target}")
            ok &= written
        return ok


class Session(CommandRun):
    """The cases of one certifying command, run in turn under one time limit (``args.max_time``)."""

    def __init__(self, args, streams: Streams, n_cases: int):
        super().__init__(args, streams)
        self.n_cases = n_cases
        if not streams.err.is_terminal and self.interval > 0:
            self.note(f"kcert: stderr is not a terminal: a progress line every {self.interval:g} s "
                      "(--progress-every S; 0 turns it off)")

    # -- one case ------------------------------------------------------------------------------------
    def _saving(self, case) -> dict:
        args = self.args
        if args.checkpoint is None:
            return {}
        path = checkpoint_path(args.checkpoint, case.name, self.n_cases)
        resume = args.resume
        if resume and self.n_cases > 1 and not os.path.exists(path):
            # a run stopped by its time limit never started its last cases: they start afresh
            self.note(f"kcert: case {case.name!r}: no checkpoint at {path} (not started before): certifying it "
                      "from replicate 0")
            resume = False
        return dict(checkpoint=path, resume=resume, checkpoint_every=args.checkpoint_every,
                    checkpoint_seconds=args.checkpoint_seconds)

    def certify(self, case, index: int, remaining: float | None, **options):
        """One certification under its progress report, with the run options every certifying command
        shares (``args``); ``options`` are the command's own; ``remaining``: seconds left of the time limit."""
        from ..certification import certify
        from .progress import Heartbeat, RunProgress, replicates_bar

        args = self.args
        label = f"case {case.name!r}" + (f" ({index + 1} of {self.n_cases})" if self.n_cases > 1 else "")
        cap = args.max_replicates or 4 * args.replicates
        with replicates_bar(case.name, self.streams.err) as bar:
            task = bar.add_task("replicates", total=args.replicates)
            update = (lambda done, planned: bar.update(task, completed=done, total=planned)) \
                if self.streams.err.is_terminal else None
            progress = RunProgress(label, cap, remaining, self.note, self.warn, update)
            beating = self.interval > 0 and not self.streams.err.is_terminal
            with Heartbeat(self.interval, progress.describe, self.streams.note) if beating else nullcontext():
                settings = settings_values(args) | self._saving(case) | options | {"max_time": remaining}
                return certify(case, progress=progress.tick, on_event=progress.event, **settings)

    def run(self, cases, options_for, render=None) -> tuple[list, Stop | None]:
        """Certify ``cases`` in turn: ``options_for(case)`` gives certify's options of a case, ``render(cert)``
        shows a finished one. Returns (case name, certificate or error text) per case that ended, and
        the reason the run stopped early (None when every case ended)."""
        from .. import certification  # noqa: F401 - imported before the clock starts: its import takes seconds

        self.clock = Clock(getattr(self.args, "max_time", None))  # --max-time counts from the first case's start
        outcomes: list = []
        for index, case in enumerate(cases):
            remaining = self.clock.remaining()
            if remaining is not None and remaining <= 0:
                left = ", ".join(c.name for c in cases[index:])
                return outcomes, self._stopped(EXIT_TIME_LIMIT, f"--max-time {human(self.args.max_time)} ran out "
                                                                f"before case {case.name!r}; not started: {left}")

            def ran_out(exc, index=index, case=case) -> str:
                later = ", ".join(c.name for c in cases[index + 1:])
                return (f"--max-time {human(self.args.max_time)} reached in case {case.name!r} after {exc.done} "
                        "replicates" + (f" (not started: {later})" if later else ""))

            cert, stop = self.attempt(case.name, lambda: self.certify(case, index, remaining, **options_for(case)),
                                      f" in case {case.name!r}", lambda: self._saved(case), ran_out)
            if stop is not None:
                return outcomes, stop
            outcomes.append((case.name, cert))
            if render is not None and not isinstance(cert, str):
                render(cert)
        return outcomes, None

    def _stopped(self, code: int, what: str, case=None) -> Stop:
        return Stop(code, f"kcert: {what}{self._saved(case)}")

    def _saved(self, case=None) -> str:
        """What a run stopped in ``case`` saved, and how to continue it."""
        args = self.args
        path = checkpoint_path(args.checkpoint, case.name, self.n_cases) if args.checkpoint and case else None
        if path and os.path.exists(path):
            return f"; the state is saved in {path}; continue with: {continue_command(args)}"
        if args.checkpoint:
            return f"; nothing was computed yet, so nothing is saved; continue with: {continue_command(args)}"
        return "; nothing is saved (no --checkpoint PATH: give one to continue an interrupted run)"

    # -- the end -------------------------------------------------------------------------------------
    def write_reports(self, certs, several: bool) -> bool:
        """Write --json and --html; False when one could not be written where asked (it was saved elsewhere).
        ``several``: the command ran several cases (the JSON report is then an array, whatever ended)."""
        from ..report.formats import FORMATS

        if not certs:
            return True
        return self.write((form.name, form.label, lambda form=form: form.render(certs, several)) for form in FORMATS)

    def finish(self, outcomes: list, stop: Stop | None, written: bool) -> int:
        """Print how the run ended and return its exit code."""
        if stop is not None:
            self.streams.note(stop.message)
            return stop.code
        code, deciders, why = exit_code(outcomes, written)
        if len(outcomes) > 1:
            if self.args.quiet:
                decided = f": {', '.join(sorted(deciders))}" if deciders else ""
                self.streams.out.print(f"kcert: {len(outcomes)} cases, exit {code} ({why}){decided}",
                                       highlight=False, markup=False, soft_wrap=True)
            else:
                from ..report.terminal import render_summary

                render_summary(outcomes, code, deciders, why, self.streams.out)
        return code


def exit_code(outcomes: list, reports_written: bool = True) -> tuple[int, set[str], str]:
    """The exit code of a run, the cases that decided it, and why (for the summary table)."""
    from ..verdict import Verdict

    errors = {name for name, o in outcomes if isinstance(o, str)}
    if errors or not reports_written:
        why = "an input or kernel error" if errors else "a report could not be written where asked"
        return EXIT_ERROR, errors, why
    fails = {name for name, c in outcomes if c.verdict is Verdict.FAIL}
    if fails:
        return EXIT_FAIL, fails, "a FAIL"
    review = {name for name, c in outcomes if c.verdict is not Verdict.PASS}
    if review:
        return EXIT_REVIEW, review, "a WARN or SKIPPED to review, no FAIL"
    return EXIT_PASS, set(), "every verdict PASS"
