"""``kcert controls``: run the negative and positive control suite and print the detection table."""

from __future__ import annotations

import argparse
import shlex

from . import EXIT_ERROR, EXIT_FAIL, EXIT_PASS
from .options import check_threads, integer
from .runtime import DEFAULT_THREADS, set_threads
from .output import Streams, first_output_problem, write_output


def add_arguments(k: argparse.ArgumentParser) -> None:
    k.add_argument("--family", action="append", metavar="F", help="only this family (repeatable)")
    k.add_argument("--control", action="append", metavar="NAME", help="only this control (repeatable)")
    k.add_argument("--quick", action="store_true", help="the quick subset, at most 256 replicates each")
    k.add_argument("--seed", "-s", type=integer, default=0, metavar="S", help="seed (default 0)")
    k.add_argument("--threads", type=integer, default=DEFAULT_THREADS, metavar="N",
                   help=f"torch threads (default {DEFAULT_THREADS}, as kcert certify: docs/benchmarks.md)")
    k.add_argument("--json", metavar="OUT", help="write every row and certificate as JSON (kcert.controls/1); "
                                                 "'-' for stdout")
    k.add_argument("--markdown", metavar="OUT", help="write the table as Markdown (docs/controls.md)")
    k.set_defaults(check_arguments=check_threads)


def run(args) -> int:
    streams = Streams.make(args, stdout_taken=args.json == "-")
    problem = first_output_problem((("--json", args.json), ("--markdown", args.markdown)), file_only=("--markdown",))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    set_threads(args.threads)
    from ..controls.registry import FAMILIES, all_controls
    from ..controls.suite import run_controls, summarize
    from ..controls import report as render
    from .progress import items_bar

    controls = all_controls()
    names = {c.name for c in controls}
    for family in args.family or ():
        if family not in FAMILIES:
            streams.error(f"--family {family!r} is not a control family; families: {', '.join(FAMILIES)}")
            return EXIT_ERROR
    for name in args.control or ():
        if name not in names:
            streams.error(f"--control {name!r} is not a control; run `kcert controls --quick` to list them")
            return EXIT_ERROR
    if args.family:
        controls = [c for c in controls if c.family in args.family]
    if args.control:
        controls = [c for c in controls if c.name in args.control]
    if args.quick:
        controls = [c for c in controls if c.quick] if not args.control else controls
    if not controls:
        streams.error("no control matches the selection")
        return EXIT_ERROR
    with items_bar(streams.err) as progress:
        task = progress.add_task("controls", total=len(controls))

        def tick(control, i, n):
            progress.update(task, completed=i, description=control.name)

        results = run_controls(controls, seed=args.seed, quick=args.quick, progress=tick)
    summary = summarize(results)
    render.render_table(results, summary, streams.out)
    words = ["kcert", "controls", "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
    for family in args.family or ():
        words += ["--family", family]
    for name in args.control or ():
        words += ["--control", name]
    written = True
    if args.markdown:
        written &= write_output("--markdown", args.markdown, render.markdown(results, summary, shlex.join(words)),
                                streams, "table")
    if args.json:
        written &= write_output("--json", args.json, render.dumps(results, summary) + "\n", streams)
    if not written:
        return EXIT_ERROR
    whole = not (args.family or args.control or args.quick)
    ok = summary.meets_bar if whole else all(r.meets_bar for r in results)
    return EXIT_PASS if ok else EXIT_FAIL
