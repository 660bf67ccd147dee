"""``kcert train-compare CASES.py --case NAME``: does the kernel pair move training?

Light at import (argparse only): torch and the training package are imported inside :func:`run`.
Exit codes, in the spirit of ``kcert certify``: 0 indistinguishable at this horizon, 1 training
differs, 3 inconclusive (too little power, or ref itself diverged), 2 a usage or input error.
"""

from __future__ import annotations

import argparse

EXIT_ERROR = 2
INTERRUPTED = 130
STDOUT = "-"
EPILOG = ("exit 0: indistinguishable at this horizon; 1: training differs; 3: inconclusive; 2: usage or input error. "
          "docs/training.md explains the model, the statistics and the prediction.")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("casefile", metavar="CASES.py")
    p.add_argument("--case", metavar="NAME", help="the case to train with (needed when the file defines several)")
    p.add_argument("--steps", type=_integer, default=None, metavar="N",
                   help="training steps per run (default 300; 120 with --quick)")
    p.add_argument("--seeds", type=_integer, default=None, metavar="K",
                   help="seeds 0..K-1, each trained with ref and with prod (default 8; 4 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="a smaller model (hidden 64), 120 steps, 4 seeds, a 256-replicate certificate")
    p.add_argument("--replicates", "-R", type=_integer, default=None, metavar="R",
                   help="replicates of the certificate the prediction reads (default 1024; 256 with --quick)")
    p.add_argument("--no-prediction", dest="predict", action="store_false",
                   help="skip the certificate and the drift prediction")
    p.add_argument("--alpha", type=_fraction, default=0.05, metavar="A",
                   help="family-wise level over the four metrics (default 0.05)")
    p.add_argument("--checkpoint", metavar="PATH", help="record every finished seed in PATH (JSON)")
    p.add_argument("--resume", action="store_true", help="reuse the seeds --checkpoint PATH holds")
    p.add_argument("--json", metavar="OUT", help="write the comparison as JSON (kcert.training-comparison/1); '-' for stdout")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML page with the plots")
    p.epilog = EPILOG
    p.set_defaults(check_arguments=check_arguments)


def check_arguments(args) -> str | None:
    if args.resume and args.checkpoint is None:
        return "--resume needs --checkpoint PATH, the file to resume from"
    return None


def run(args) -> int:
    from ..commands.output import Streams, first_output_problem, write_output

    streams = Streams.make(args, stdout_taken=args.json == STDOUT)
    problem = check_arguments(args) or first_output_problem(
        (("--json", args.json), ("--html", args.html), ("--checkpoint", args.checkpoint)),
        file_only=("--html", "--checkpoint"))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    from ..casefile import load_cases
    from ..errors import KcertError
    from ..commands.progress import items_bar
    from . import report
    from .compare import compare

    try:
        cases = load_cases(args.casefile, [args.case] if args.case else None)
        if len(cases) > 1:
            raise_many(cases, args.casefile)
        case = cases[0]
        with items_bar(streams.err) as bar:
            task = bar.add_task(case.name, total=None)

            def tick(done, total, label):
                bar.update(task, completed=done, total=total, description=f"{case.name}: {label}")

            result = compare(case, steps=args.steps, seeds=args.seeds, quick=args.quick,
                             alpha=args.alpha, predict=args.predict, replicates=args.replicates,
                             checkpoint=args.checkpoint, resume=args.resume, progress=tick)
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    except KeyboardInterrupt:
        saved = f"; finished seeds are in {args.checkpoint}, continue with --resume" if args.checkpoint else ""
        streams.note(f"kcert: interrupted{saved}")
        return INTERRUPTED
    report.render(result, streams.out)
    ok = True
    if args.json:
        ok &= write_output("--json", args.json, report.dumps(result), streams)
    if args.html:
        ok &= write_output("--html", args.html, report.render_html(result), streams)
    return result.exit_code if ok else EXIT_ERROR


def raise_many(cases, casefile: str) -> None:
    from ..errors import CaseFileError

    names = ", ".join(c.name for c in cases)
    raise CaseFileError(f"case file {casefile!r} defines {len(cases)} cases ({names}); choose one with --case NAME")
