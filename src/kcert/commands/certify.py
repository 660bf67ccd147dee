"""``kcert certify CASES.py`` and ``kcert demo``: certify each case, render it, write the reports, and
end a run of several cases with one summary table that names the cases that decided the exit code.
The run over the cases (progress, time limit, signals, reports, exit code) is
:class:`kcert.commands.session.Session`'s."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import EXIT_ERROR, EXIT_FAIL, EXIT_PASS
from ..reproduce import command_line
from .options import add_option, add_run_options, bias_thresholds, check_run_options, run_flags
from .output import STDOUT, Streams, first_output_problem


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("casefile", metavar="CASES.py")
    p.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    p.add_argument("--list", action="store_true", help="list the cases the file defines, and how they were found")
    add_run_options(p)
    add_option(p, "adequacy")
    p.set_defaults(check_arguments=check_run_options)


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    add_run_options(p)
    p.set_defaults(check_arguments=check_run_options, adequacy=False)


def run(args) -> int:
    return _run(args, demo=False)


def run_demo(args) -> int:
    return _run(args, demo=True)


def default_checkpoint(args, demo: bool) -> str:
    """Where a run bounded by --max-time saves its state when no --checkpoint was given: beside the
    working folder, named after the case file."""
    stem = "demo" if demo else Path(args.casefile).stem
    return f"{stem}.kcert-checkpoint.npz"


# --- the run ----------------------------------------------------------------------------------------


def _run(args, demo: bool) -> int:
    streams = Streams.make(args, stdout_taken=STDOUT in (args.json, args.html))
    if args.silent:  # other torchrun ranks: no report files either
        args.json = args.html = None
    if args.max_time is not None and args.checkpoint is None and not args.resume:
        args.checkpoint = default_checkpoint(args, demo)
        if not args.quiet:
            streams.note(f"kcert: --max-time without --checkpoint: the state is saved to {args.checkpoint} if the "
                         "time runs out")
    outputs = [("--json", args.json), ("--html", args.html), ("--checkpoint", args.checkpoint)]
    problem = first_output_problem(outputs, file_only=("--checkpoint",))
    if problem:  # before any work: a bad path costs nothing
        streams.error(problem)
        return EXIT_ERROR
    from ..errors import KcertError
    from .runtime import set_threads

    set_threads(args.threads)
    try:
        if demo:
            from .. import demo as demo_cases

            cases, casefile = list(demo_cases.CASES), None
        else:
            from ..casefile import discover

            found = discover(args.casefile, args.case)
            if args.list:
                streams.note(found.describe())
                for c in found.defined:
                    streams.out.print(f"{c.name}\t{c.description}".rstrip(), highlight=False, markup=False,
                                      soft_wrap=True)
                return EXIT_PASS
            cases, casefile = list(found.cases), args.casefile
            chosen = "" if found.cases == found.defined else f"; certifying {', '.join(c.name for c in cases)}"
            if not args.quiet:
                streams.note(found.describe() + chosen)
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR

    from ..report.terminal import render, render_line
    from .session import Session

    session = Session(args, streams, len(cases))
    thresholds = bias_thresholds(args)

    def options(case) -> dict:
        return dict(command=reproduce_command(args, casefile, case.name), bias_thresholds=thresholds)

    show = render_line if args.quiet else render

    def shown(cert) -> None:
        show(cert, streams.out)
        line = settle_hint(args, casefile, cert, len(cases))
        if line:
            streams.note(line)

    outcomes, stop = session.run(cases, options, shown)
    certs = [o for _, o in outcomes if not isinstance(o, str)]
    written = session.write_reports(certs, several=len(cases) > 1)
    if demo and stop is None:
        return _demo_outcome(certs, streams.out) if written and len(certs) == len(cases) else EXIT_ERROR
    return session.finish(outcomes, stop, written)


def reproduce_command(args, casefile: str | None, case: str) -> str:
    """The command line that certifies ``case`` again with this run's options (:mod:`kcert.reproduce`)."""
    words = ["kcert", "certify", casefile, "--case", case] if casefile else ["kcert", "demo"]
    flags = run_flags(args, {})
    return command_line(words, replicates=args.replicates, horizon=args.horizon, seed=args.seed,
                        max_replicates=args.max_replicates, device=args.device, flags=flags)


def settle_hint(args, casefile: str | None, cert, n_cases: int) -> str | None:
    """The line naming a case that WARNs only for lack of evidence (:mod:`kcert.commands.settle`) and the command
    that lets its looks go on, or None."""
    import argparse
    import shlex

    from .session import checkpoint_path
    from .settle import how, lack_of_evidence, settle_flags

    looks = lack_of_evidence(cert)
    if looks is None:
        return None
    again = argparse.Namespace(**{**vars(args), "max_replicates": 4 * looks, "prior_max_replicates": None})
    checkpoint = checkpoint_path(args.checkpoint, cert.case, n_cases) if args.checkpoint else None
    command = reproduce_command(again, casefile, cert.case) + " " + shlex.join(settle_flags(args, checkpoint))
    return (f"kcert: case {cert.case!r} WARNs only for lack of evidence at its last look ({looks} replicates: the "
            f"variance gate's looks ran out before it decided, its interval across a line or a PASS held back); "
            f"{how(bool(args.checkpoint))} {command}")


def _demo_outcome(certs, console) -> int:
    from ..demo import EXPECTED

    lines, ok = [], True
    for c in certs:
        expected = EXPECTED[c.case]
        gates = ", ".join(f"{g} {v.value}" for g, v in c.gates.items())
        good = c.verdict.value == expected
        ok &= good
        lines.append(f"  {c.case}: {c.verdict.value} (expected {expected}; {gates})")
    console.print("demo: " + ("both verdicts as expected" if ok else "UNEXPECTED verdicts") + "\n" + "\n".join(lines),
                  highlight=False)
    return EXIT_PASS if ok else EXIT_FAIL


__all__ = ["add_arguments", "add_demo_arguments", "default_checkpoint", "reproduce_command", "run",
           "run_demo", "settle_hint"]
