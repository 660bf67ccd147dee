"""``kcert train-compare CASES.py --case NAME``: does the kernel pair move training?

Light at import (argparse only): torch and the training package are imported inside :func:`run`.
Exit codes, in the spirit of ``kcert certify``: 0 indistinguishable at this horizon, 1 training
differs, 3 inconclusive (too little power, or ref itself diverged), 2 a usage or input error; the run
of the case, its interrupts and its reports go through :class:`kcert.commands.session.CommandRun`, as
every certifying command's do.
"""

from __future__ import annotations

import argparse
import time

from . import EXIT_ERROR
from .options import add_option, integer, number
from .output import STDOUT
from .runtime import DEFAULT_INTERVAL, DEFAULT_THREADS
from ..settings import DEFAULTS

EPILOG = ("exit 0: indistinguishable at this horizon; 1: training differs; 3: inconclusive; 2: usage or input error; "
          "130 Ctrl-C, 143 SIGTERM (the finished seeds stay in --checkpoint). docs/training.md explains the model, "
          "the statistics and the prediction.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("casefile", metavar="CASES.py")
    p.add_argument("--case", metavar="NAME", help="the case to train with (needed when the file defines several)")
    p.add_argument("--steps", type=integer, default=None, metavar="N",
                   help="training steps per run (default 300; 120 with --quick)")
    p.add_argument("--seeds", type=integer, default=None, metavar="K",
                   help="seeds 0..K-1, each trained with ref and with prod (default 8; 4 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="a smaller model (hidden 64), 120 steps, 4 seeds, a 256-replicate certificate")
    p.add_argument("--replicates", "-R", type=integer, default=None, metavar="R",
                   help=f"replicates of the certificate the prediction reads (default {DEFAULTS['replicates']}; 256 with --quick)")
    p.add_argument("--no-prediction", dest="predict", action="store_false",
                   help="skip the certificate and the drift prediction")
    p.add_argument("--alpha", type=number, default=0.05, metavar="A",
                   help="family-wise level over the four metrics (default 0.05)")
    p.add_argument("--checkpoint", metavar="PATH", help="record every finished seed in PATH (JSON)")
    p.add_argument("--resume", action="store_true", help="reuse the seeds --checkpoint PATH holds")
    p.add_argument("--json", metavar="OUT", help="write the comparison as JSON (kcert.training-comparison/1); '-' for stdout")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML page with the plots")
    p.add_argument("--threads", type=integer, default=DEFAULT_THREADS, metavar="N",
                   help=f"torch threads of the training runs and the certificate (default {DEFAULT_THREADS}; a seed "
                        "gives the same runs at the same thread count)")
    p.add_argument("--quiet", "-q", action="store_true", help="print the verdict line only (and errors)")
    advanced = p.add_argument_group("advanced", "rarely needed; the defaults suit most runs")
    advanced.add_argument("--progress-every", type=float, default=None, metavar="S",
                          help=f"without a terminal, print a progress line every S seconds (default "
                               f"{DEFAULT_INTERVAL:g}, none with --quiet; 0 turns it off)")
    add_option(p, "traceback")  # in the advanced group, as every certifying command's
    p.epilog = EPILOG
    p.set_defaults(check_arguments=check_arguments)


def check_arguments(args) -> str | None:
    if args.resume and args.checkpoint is None:
        return "--resume needs --checkpoint PATH, the file to resume from"
    for name, value in (("--steps", args.steps), ("--seeds", args.seeds), ("--replicates", args.replicates),
                        ("--threads", args.threads)):
        if value is not None and value < (2 if name == "--replicates" else 1):
            return f"{name} must be an integer >= {2 if name == '--replicates' else 1}, got {value}"
    if not 0 < args.alpha < 1:
        return f"--alpha must be a number in (0, 1), got {args.alpha:g}"
    if args.progress_every is not None and not args.progress_every >= 0:
        return f"--progress-every must be a number of seconds >= 0, got {args.progress_every:g}"
    return None


def run(args) -> int:
    from .output import Streams, first_output_problem

    streams = Streams.make(args, stdout_taken=args.json == STDOUT)
    problem = check_arguments(args) or first_output_problem(
        (("--json", args.json), ("--html", args.html), ("--checkpoint", args.checkpoint)),
        file_only=("--html", "--checkpoint"))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    from ..casefile import load_cases
    from ..errors import KcertError
    from ..report import training as report
    from .runtime import set_threads
    from .session import CommandRun

    set_threads(args.threads)
    started = time.monotonic()  # the progress line's "in all" counts the case file's import too
    try:
        cases = load_cases(args.casefile, [args.case] if args.case else None)
        if len(cases) > 1:
            raise_many(cases, args.casefile)
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    session = CommandRun(args, streams)
    saved = f"; finished seeds are in {args.checkpoint}, continue with --resume" if args.checkpoint else ""
    result, stop = session.attempt(cases[0].name, lambda: _compare(args, cases[0], session, started), "",
                                   lambda: saved)
    if stop is not None:
        streams.note(stop.message)
        return stop.code
    if isinstance(result, str):  # the error, printed
        return EXIT_ERROR
    (report.render_line if args.quiet else report.render)(result, streams.out)
    ok = session.write((("json", None, lambda: report.dumps(result)),
                        ("html", None, lambda: report.render_html(result))))
    return result.exit_code if ok else EXIT_ERROR


def _compare(args, case, session, started: float):
    """The training comparison of ``case`` under its progress bar (a heartbeat line without a terminal)."""
    from contextlib import nullcontext

    from ..training.compare import compare
    from ..training.config import QUICK, TrainingConfig
    from .progress import Heartbeat, items_bar
    from .runtime import human

    streams = session.streams
    state = {"label": "preparing (the case, the certificate the prediction reads)", "done": 0, "total": 0,
             "start": started}

    def describe() -> str:
        elapsed = time.monotonic() - state["start"]
        return (f"kcert: train-compare: {state['label']}, {state['done']} of {state['total'] or '?'} training steps; "
                f"{human(elapsed)} in all")

    config = (QUICK if args.quick else TrainingConfig()).replace(threads=args.threads)
    beating = session.interval > 0 and not streams.err.is_terminal
    with items_bar(streams.err) as bar, (Heartbeat(session.interval, describe, streams.note) if beating
                                         else nullcontext()):
        task = bar.add_task(case.name, total=None)

        def tick(done, total, label):
            state.update(label=f"{case.name}: {label}", done=done, total=total)
            bar.update(task, completed=done, total=total, description=f"{case.name}: {label}")

        return compare(case, steps=args.steps, seeds=args.seeds, quick=args.quick, config=config, alpha=args.alpha,
                       predict=args.predict, replicates=args.replicates, checkpoint=args.checkpoint,
                       resume=args.resume, progress=tick)


def raise_many(cases, casefile: str) -> None:
    from ..errors import CaseFileError

    names = ", ".join(c.name for c in cases)
    raise CaseFileError(f"case file {casefile!r} defines {len(cases)} cases ({names}); choose one with --case NAME")
