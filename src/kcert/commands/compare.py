"""``kcert compare OLD.json NEW.json``: what changed between two certificates (kcert.report.compare)."""

from __future__ import annotations

import argparse

from . import EXIT_ERROR
from .options import integer
from .output import Streams


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD.json", help="the baseline certificate(s) (kcert certify --json)")
    p.add_argument("new", metavar="NEW.json", help="the certificate(s) to compare with it")
    p.add_argument("--top", type=integer, default=10, metavar="N",
                   help="figures listed per case, those that moved most first (default 10)")
    p.epilog = "exit 0: no verdict got worse; 1: a verdict got worse or a case of OLD is missing; 2: bad input"


def run(args) -> int:
    streams = Streams.make(args)
    if args.top < 1:
        streams.error(f"--top must be an integer >= 1, got {args.top}")
        return EXIT_ERROR
    from ..errors import KcertError
    from ..report.compare import compare_files, render

    try:
        comparison = compare_files(args.old, args.new)
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    render(comparison, streams.out, top=args.top)
    return comparison.exit_code
