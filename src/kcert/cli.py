"""Command line: parse, call, render, exit code.

Exit codes: 0 every verdict PASS; 1 any FAIL; 3 a WARN or SKIPPED and no FAIL; 2 a usage or
input error (it wins over verdicts: a run with an error is not a certification).

Arguments are parsed before anything heavy is imported: ``kcert --help``, ``--version`` and usage
errors never import torch (benchmarks/startup.py measures it). Each subcommand is one
:class:`Command` entry in :data:`COMMANDS`: its ``add_arguments`` declares the options and its
``run(args) -> exit code`` does the work, importing torch and the rest of kcert inside itself. A
command module must therefore stay light at import (tests/test_cli.py checks that ``--help``
imports no torch). To add a command, write such a module and append one entry.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import __version__
from .commands import DEFAULT_HORIZON, EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_REVIEW  # noqa: F401 (re-exported)

__all__ = ["COMMANDS", "Command", "DEFAULT_HORIZON", "EXIT_ERROR", "EXIT_FAIL", "EXIT_PASS", "EXIT_REVIEW",
           "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """One subcommand. ``run(args)`` returns the exit code; ``args.silent`` is True on torchrun ranks
    other than 0 (print and write nothing); ``args.argv`` holds the command line's words after
    ``kcert``. ``distributed``: the command runs under torchrun."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    distributed: bool = False


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with the usage line, like argparse, but say kcert
        self.print_usage(sys.stderr)
        sys.stderr.write(f"kcert: error: {message}\n")
        raise SystemExit(EXIT_ERROR)


def _commands() -> list[Command]:
    # command modules are light at import; each run imports what it needs
    from .commands import calibrate, certify, compare, controls, kernelbench, model, step, train_compare

    return [
        Command("certify", "certify the cases of a case file", certify.add_arguments, certify.run, distributed=True),
        Command("demo", "certify the embedded Gemma RMSNorm pair, correct and defective", certify.add_demo_arguments,
                certify.run_demo, distributed=True),
        Command("controls", "run the negative and positive control suite and print the detection table",
                controls.add_arguments, controls.run),
        Command("calibrate", "run the positive controls over seeds: null rates of the thresholds",
                calibrate.add_arguments, calibrate.run),
        Command("compare", "what changed between two certificates (JSON reports) of the same cases",
                compare.add_arguments, compare.run),
        Command("kernelbench", "certify a generated kernel: a KernelBench-format problem and its ModelNew candidate",
                kernelbench.add_arguments, kernelbench.run),
        Command("train-compare", "train a small model with ref's kernel and with prod's, paired by seed: does "
                "training differ?", train_compare.add_arguments, train_compare.run),
        Command("step", "certify a training step across gradient accumulation, ranks and loss aggregation (L2)",
                step.add_arguments, step.run),
        Command("model", "certify a model pair module by module on ref's recorded inputs and locate the module that "
                "changes the numerics", model.add_arguments, model.run, distributed=True),
    ]


COMMANDS: list[Command] = _commands()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kcert", description="Certify that a production kernel computes what its reference computes.",
                     epilog="exit codes: 0 every verdict PASS; 1 a FAIL; 3 a WARN or SKIPPED to review; 2 a usage or "
                            "input error; 124 --max-time ran out, 130 Ctrl-C, 143 SIGTERM (state saved to the "
                            "checkpoint; --resume continues). docs/verdicts.md")
    parser.add_argument("--version", action="version", version=f"kcert {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    parser.subcommands = {}
    for command in COMMANDS:
        parser.subcommands[command.name] = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(parser.subcommands[command.name])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    own = parser.subcommands[args.command]  # a usage error of a subcommand prints that subcommand's usage
    if unknown:
        own.error(f"unrecognized arguments: {' '.join(unknown)}")
    command = next(c for c in COMMANDS if c.name == args.command)
    args.silent, args.argv = False, argv
    args.quiet = getattr(args, "quiet", False)
    check = getattr(args, "check_arguments", None)
    if check is not None:
        message = check(args)
        if message:
            own.error(message)
    if not _launched_by_torchrun():
        return _run(command, args)
    # torchrun: one process per rank; they share the replicates, rank 0 alone prints and writes
    from .commands.output import Streams

    if not command.distributed:
        if os.environ.get("RANK", "0") == "0":
            Streams.make(args).error(f"kcert {args.command} does not run under torchrun; run it as one process")
        return EXIT_ERROR
    from .execution import distributed

    args.device = distributed.local_device(args.device)
    try:
        group = distributed.process_group(args.device)
        comm = group.__enter__()
    except (RuntimeError, ValueError) as exc:
        Streams.make(args).error(
            f"torch.distributed could not start (WORLD_SIZE={os.environ.get('WORLD_SIZE')}): {exc}")
        return EXIT_ERROR
    try:
        args.silent = comm.rank != 0
        code = _run(command, args)
        comm.barrier()  # reports are written before any rank exits
    finally:
        group.__exit__(None, None, None)
    # torchrun stops every rank as soon as one exits non-zero: rank 0 alone carries the outcome
    return code if comm.rank == 0 else EXIT_PASS


def _run(command: Command, args) -> int:
    """``command.run(args)`` under SIGTERM handling, with every way it can end turned into an exit code:
    an interrupt that escaped the command's own handling (130, or 143 for SIGTERM) and an exception
    kcert did not expect (2, with its traceback: a bug to report; never 1, which means a FAIL)."""
    from .commands.runtime import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, TerminateOnSignal, restore_threads

    try:
        with TerminateOnSignal():
            return command.run(args)
    except Terminated:
        sys.stderr.write(f"kcert: {args.command} terminated (SIGTERM)\n")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        sys.stderr.write(f"kcert: {args.command} interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - exit 2 with the traceback, never exit 1 (a FAIL)
        import traceback

        sys.stderr.write("".join(traceback.format_exception(exc)))
        sys.stderr.write(f"kcert: error: kcert {args.command} stopped on an unexpected {type(exc).__name__}: {exc} "
                         "(a bug in kcert or an input it does not check yet; please report it with the traceback "
                         "above)\n")
        return EXIT_ERROR
    finally:
        restore_threads()  # main() called from Python leaves torch's threads as it found them


def _launched_by_torchrun() -> bool:
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
