"""``kcert calibrate``: run the positive controls over seeds and print the null rates of the thresholds."""

from __future__ import annotations

import argparse
import shlex

from . import EXIT_ERROR, EXIT_PASS
from .options import check_threads, integer
from .runtime import DEFAULT_THREADS, set_threads
from .output import Streams, first_output_problem, write_output


def add_arguments(cal: argparse.ArgumentParser) -> None:
    cal.add_argument("--family", action="append", metavar="F", help="only this family (repeatable)")
    cal.add_argument("--control", action="append", metavar="NAME", help="only this positive control (repeatable)")
    cal.add_argument("--seeds", type=integer, default=5, metavar="N", help="seeds 0..N-1 per control (default 5)")
    cal.add_argument("--replicates", "-R", type=integer, default=None, metavar="R",
                     help="replicates per run (default: each control's declared count)")
    cal.add_argument("--quick", action="store_true", help="at most 256 replicates per run")
    cal.add_argument("--threads", type=integer, default=DEFAULT_THREADS, metavar="N",
                     help=f"torch threads (default {DEFAULT_THREADS}, as kcert certify: docs/benchmarks.md)")
    cal.add_argument("--json", metavar="OUT",
                     help="write every output's record as JSON (kcert.calibration/1); '-' for stdout")
    cal.add_argument("--markdown", metavar="OUT", help="write the tables as Markdown (docs/calibration.md)")
    cal.set_defaults(check_arguments=check_threads)


def run(args) -> int:
    streams = Streams.make(args, stdout_taken=args.json == "-")
    problem = first_output_problem((("--json", args.json), ("--markdown", args.markdown)), file_only=("--markdown",))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    set_threads(args.threads)
    import json

    from rich.table import Table

    from .. import calibration
    from ..errors import KcertError
    from .progress import items_bar

    with items_bar(streams.err) as progress:
        task = progress.add_task("calibration", total=None)

        def tick(control, seed, done, total):
            progress.update(task, completed=done, total=total, description=f"{control} (seed {seed})")

        try:
            result = calibration.calibrate(args.family, seeds=args.seeds, replicates=args.replicates, quick=args.quick,
                                           controls=args.control, progress=tick)
        except KcertError as exc:
            streams.error(exc)
            return EXIT_ERROR
    for title, header, rows in (("variance gate on known-good outputs", calibration.VARIANCE_HEADER,
                                 calibration.variance_rows(result)),
                                ("bias gate on known-good outputs", calibration.BIAS_HEADER,
                                 calibration.bias_rows(result))):
        t = Table(*header, header_style="bold", title=f"kcert calibrate: {title}", title_justify="left")
        for row in rows:
            t.add_row(*row)
        streams.out.print(t)
    for e in result.errors:
        streams.error(e)
    words = ["kcert", "calibrate", "--seeds", str(args.seeds)]
    words += ["--replicates", str(args.replicates)] if args.replicates is not None else []
    words += ["--quick"] if args.quick else []
    for family in args.family or ():
        words += ["--family", family]
    for name in args.control or ():
        words += ["--control", name]
    written = True
    if args.markdown:
        if write_output("--markdown", args.markdown, result.markdown(shlex.join(words)), streams, "tables"):
            streams.note(f"Markdown: {args.markdown}")
        else:
            written = False
    if args.json:
        if write_output("--json", args.json, json.dumps(result.to_dict(), indent=1) + "\n", streams):
            if args.json != "-":
                streams.note(f"JSON: {args.json}")
        else:
            written = False
    # a run some control could not finish is not a calibration
    return EXIT_ERROR if result.errors or not written else EXIT_PASS
