"""``kcert step STEPS.py``: certify training steps across gradient accumulation, ranks and loss
aggregation (L2, docs/training-graph.md). Light at import: torch is imported inside :func:`run`.

Exit codes as ``kcert certify``: 0 every configuration PASS, 1 any FAIL, 3 a WARN and no FAIL, 2 a
usage or input error (a step file that does not load, a rank that raises, a bad --config: the other steps
still run), 130 Ctrl-C, 143 SIGTERM (each step runs through :class:`kcert.commands.session.CommandRun`).
"""

from __future__ import annotations

import argparse

from . import DEFAULT_HORIZON, EXIT_ERROR
from .options import add_option, check_threads, integer
from .runtime import DEFAULT_THREADS, set_threads
from .output import STDOUT, Streams, first_output_problem

EPILOG = ("--config takes k (accumulation steps), window (micro-batches present, <= k), n (ranks) and split "
          "(data, context, tensor), e.g. --config k=4,window=3 --config n=2,split=context; default: the step's own "
          "configs. Exit 0: every configuration PASS; 1: a FAIL; 3: a WARN; 2: usage or input error.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("stepfile", metavar="STEPS.py")
    p.add_argument("--step", action="append", metavar="NAME", help="only this step (repeatable)")
    p.add_argument("--config", action="append", metavar="SPEC",
                   help="a configuration, e.g. k=2 | k=4,window=3 | n=2,split=context (repeatable; default the step's)")
    p.add_argument("--replicates", "-R", type=integer, default=256, metavar="R",
                   help="batch draws per configuration (default 256); the variance gate may add up to 4x")
    p.add_argument("--max-replicates", type=integer, default=None, metavar="M", help="cap of adaptive replicates")
    p.add_argument("--horizon", "-T", type=float, default=DEFAULT_HORIZON, metavar="T",
                   help=f"horizon in optimizer steps (default {DEFAULT_HORIZON:g})")
    p.add_argument("--seed", "-s", type=integer, default=0, metavar="S", help="seed (default 0)")
    p.add_argument("--diagnosis-replicates", type=integer, default=16, metavar="D",
                   help="draws of the diagnosis pass of a configuration that does not PASS (default 16; 0: none)")
    p.add_argument("--start-method", choices=("fork", "spawn", "forkserver"), default=None,
                   help="how the ranks start (default fork where available)")
    p.add_argument("--rank-timeout", type=float, default=300.0, metavar="S",
                   help="seconds a rank may take to start or to answer one step (default 300)")
    p.add_argument("--threads", type=integer, default=DEFAULT_THREADS, metavar="N",
                   help=f"torch threads of this process (default {DEFAULT_THREADS}, as kcert certify); each rank runs one")
    p.add_argument("--json", metavar="OUT", help="write the JSON report (kcert.step-certificate/1); '-' for stdout")
    p.add_argument("--html", metavar="OUT", help="write the HTML report; '-' for stdout")
    add_option(p, "traceback")
    p.epilog = EPILOG
    # what the shared command run (commands.session.CommandRun) reads, fixed here: no progress lines
    p.set_defaults(check_arguments=_check, quiet=False, progress_every=0.0, silent=False)


def _check(args) -> str | None:
    problem = check_threads(args)
    if problem:
        return problem
    if args.json == STDOUT and args.html == STDOUT:
        return "--json - and --html - cannot both write to stdout; give one of them a file name"
    return None


def _command(args, step: str) -> str:
    from ..reproduce import command_line

    words = ["kcert", "step", args.stepfile, "--step", step]
    flags = [w for spec in args.config or () for w in ("--config", spec)]
    if args.diagnosis_replicates != 16:
        flags += ["--diagnosis-replicates", str(args.diagnosis_replicates)]
    return command_line(words, replicates=args.replicates, horizon=args.horizon, seed=args.seed,
                        max_replicates=args.max_replicates, flags=flags)


def run(args) -> int:
    streams = Streams.make(args, stdout_taken=STDOUT in (args.json, args.html))
    problem = first_output_problem((("--json", args.json), ("--html", args.html)))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    set_threads(args.threads)
    from ..errors import KcertError
    from ..report import step as render
    from ..step.files import load_steps, parse_config
    from .session import CommandRun, exit_code

    try:
        steps = load_steps(args.stepfile, args.step)
        configs = [parse_config(text) for text in args.config] if args.config else None
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    session = CommandRun(args, streams)
    outcomes, stop = session.each(steps, lambda step: _certify(args, streams, step, configs),
                                  lambda step: f" in step {step.name!r}", lambda: "",
                                  lambda result: render.render(result, streams.out))
    if stop is not None:
        streams.note(stop.message)
        return stop.code
    results = [r for _, r in outcomes if not isinstance(r, str)]
    written = not results or session.write((
        ("json", None, lambda: (render.dumps(results[0]) if len(results) == 1 else
                                "[" + ",\n".join(render.dumps(r) for r in results) + "]") + "\n"),
        ("html", None, lambda: "\n".join(render.render_html(r) for r in results))))
    return exit_code(outcomes, written)[0]


def _certify(args, streams, step, configs):
    """One step certified under its progress bar."""
    from ..step import certify_step
    from .progress import replicates_bar

    with replicates_bar(step.name, streams.err) as bar:
        task = bar.add_task("replicates", total=args.replicates)

        def tick(config, done, planned):
            bar.update(task, completed=done, total=planned, description=f"{step.name} @ {config.label}")

        return certify_step(step, configs, args.replicates, args.seed, horizon=args.horizon,
                            max_replicates=args.max_replicates, diagnosis_replicates=args.diagnosis_replicates,
                            start_method=args.start_method, rank_timeout=args.rank_timeout,
                            command=_command(args, step.name), progress=tick)
