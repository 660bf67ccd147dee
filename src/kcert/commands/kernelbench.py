"""``kcert kernelbench PROBLEM.py CANDIDATE.py``: certify a generated kernel (docs/kernelbench.md).

The candidate's ``ModelNew`` is certified against the problem's ``Model`` under two probes (kcert's
signed draws with outliers, with the shape sweep; the problem's own ``get_inputs()``), with the
adequacy check (fakes) and the peer rules in every certificate. Options and exit codes are
``kcert certify``'s (the defaults that differ are in :data:`DEFAULTS`); a fake counts as rejected when
either probe's certification FAILs it.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from . import EXIT_ERROR
from ..reproduce import command_line
from .options import add_run_options, advanced_group, bias_thresholds, check_run_options, run_flags
from .options import integer  # noqa: F401 (in __all__: its home before commands.options)
from .output import STDOUT, Streams, first_output_problem

# kcert.adapters.kernelbench.DEFAULT_BUDGET (not imported from there: it imports torch); a test checks they agree
DEFAULT_BUDGET = 1 << 16
DTYPES = ("float32", "bfloat16", "float16", "float64")
PROBE_CHOICES = {"both": ("kcert", "problem"), "kcert": ("kcert",), "problem": ("problem",)}
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}


def element_count(text: str) -> int:
    """Elements as an integer or with k/M (thousands, millions): ``65536``, ``64k``, ``1M``."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", text)
    if match is None or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"must be a number of elements >= 1 such as 65536, 64k or 1M, got {text!r}")
    return int(match.group(1)) * _SCALE[match.group(2).lower()]


# the defaults that differ from kcert certify's (the reproduce command names a value that differs from them)
DEFAULTS = {"algebra_proof": False, "shapes": True, "ulp_floor": 1.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", metavar="PROBLEM.py", help="KernelBench-format problem: Model, get_inputs, get_init_inputs")
    p.add_argument("candidate", metavar="CANDIDATE.py", help="the kernel to certify: defines ModelNew")
    add_run_options(
        p, DEFAULTS,
        why={"algebra_proof": " here: on modules whose weights are held at the problem's sizes it rarely concludes "
                              "and may spend its 300 s guard"},
        helps={"shapes": "the shape sweep at sizes derived from the problem's (default on; --no-shapes skips it)",
               "ulp_floor": "the bias gate's floor in ULPs of the problem's dtype (default 1 here: a coherent bias "
                            "below one ULP is the format's own rounding arrangement; kcert certify's default is "
                            "0.25 of the training format)"})
    p.add_argument("--dtype", choices=DTYPES, default=None,
                   help="working dtype of inputs and weights (default: the dtype of get_inputs()'s floating tensors); "
                        "harm is judged in its ULPs")
    p.add_argument("--probe", choices=tuple(PROBE_CHOICES), default="both",
                   help="kcert (signed, outliers), problem (get_inputs()), or both (default)")
    advanced = advanced_group(p)
    advanced.add_argument("--budget", type=element_count, default=DEFAULT_BUDGET, metavar="ELEMENTS",
                          help=f"elements of one call's inputs and outputs above which the problem's size globals "
                               f"are halved (default {DEFAULT_BUDGET}; 64k, 1M accepted)")
    advanced.add_argument("--no-shrink", dest="shrink", action="store_false",
                          help="keep the problem's own sizes whatever the budget")
    p.set_defaults(check_arguments=check_run_options)


def reproduce_command(args) -> str:
    flags = ["--budget", str(args.budget)]
    if args.dtype:
        flags += ["--dtype", args.dtype]
    if not args.shrink:
        flags.append("--no-shrink")
    if args.probe != "both":
        flags += ["--probe", args.probe]
    flags += run_flags(args, DEFAULTS)
    return command_line(["kcert", "kernelbench", args.problem, args.candidate], replicates=args.replicates,
                        horizon=args.horizon, seed=args.seed, max_replicates=args.max_replicates,
                        device=args.device, flags=flags)


def default_checkpoint(args) -> str:
    return f"{Path(args.candidate).stem}.kcert-checkpoint.npz"


def run(args) -> int:
    if str(args.device).startswith("cpu") and "TRITON_INTERPRET" not in os.environ:
        # before torch (and triton through it) is imported: a Triton candidate runs in the CPU interpreter
        os.environ["TRITON_INTERPRET"] = "1"
    streams = Streams.make(args, stdout_taken=STDOUT in (args.json, args.html))
    if args.max_time is not None and args.checkpoint is None and not args.resume:
        args.checkpoint = default_checkpoint(args)
    problem = first_output_problem((("--json", args.json), ("--html", args.html), ("--checkpoint", args.checkpoint)),
                                   file_only=("--checkpoint",))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    import torch

    from ..adapters import kernelbench as kb
    from ..checks.adequacy import merge_rejections
    from ..errors import KcertError
    from ..report.terminal import render, render_line
    from .runtime import set_threads
    from .session import Session

    set_threads(args.threads)
    try:
        cases = kb.cases(args.problem, args.candidate, dtype=getattr(torch, args.dtype) if args.dtype else None,
                         budget=args.budget, shrink=args.shrink, shapes=args.shapes, seed=args.seed,
                         device=args.device, probes=PROBE_CHOICES[args.probe])
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    thresholds = bias_thresholds(args, kb.BIAS_THRESHOLDS)
    session = Session(args, streams, len(cases))
    session.note(f"kcert kernelbench: {args.candidate} against {args.problem}: {cases[0].description}")

    def options(case) -> dict:
        # --shapes is decided per probe by kb.cases (Case.shapes); every certificate here has the adequacy check
        return dict(command=reproduce_command(args), shapes=None, adequacy=True, bias_thresholds=thresholds)

    outcomes, stop = session.run(cases, options)
    # a fake counts as rejected when either probe's certification FAILs it: merged before rendering
    certs = merge_rejections([o for _, o in outcomes if not isinstance(o, str)])
    merged = {c.case: c for c in certs}
    outcomes = [(name, merged.get(name, o)) for name, o in outcomes]
    for cert in certs:
        (render_line if args.quiet else render)(cert, streams.out)
    written = session.write_reports(certs, several=len(cases) > 1)
    return session.finish(outcomes, stop, written)


__all__ = ["DEFAULT_BUDGET", "add_arguments", "element_count", "integer", "reproduce_command", "run"]
