"""``kcert kernelbench PROBLEM.py CANDIDATE.py``: certify a generated kernel (docs/kernelbench.md).

The candidate's ``ModelNew`` is certified against the problem's ``Model`` under two probes (kcert's
signed draws with outliers, with the shape sweep; the problem's own ``get_inputs()``), with the
adequacy check (fakes) and the peer rules in every certificate. Options and exit codes are
``kcert certify``'s; a fake counts as rejected when either probe's certification FAILs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re

from . import EXIT_ERROR
from .certify import integer, run_options
from ..reproduce import command_line, exact_number
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", metavar="PROBLEM.py", help="KernelBench-format problem: Model, get_inputs, get_init_inputs")
    p.add_argument("candidate", metavar="CANDIDATE.py", help="the kernel to certify: defines ModelNew")
    run_options(p, 1024)
    p.add_argument("--dtype", choices=DTYPES, default=None,
                   help="working dtype of inputs and weights (default: the dtype of get_inputs()'s floating tensors); "
                        "harm is judged in its ULPs")
    p.add_argument("--budget", type=element_count, default=DEFAULT_BUDGET, metavar="ELEMENTS",
                   help=f"elements of one call's inputs and outputs above which the problem's size globals are "
                        f"halved (default {DEFAULT_BUDGET}; 64k, 1M accepted)")
    p.add_argument("--no-shrink", dest="shrink", action="store_false",
                   help="keep the problem's own sizes whatever the budget")
    p.add_argument("--shapes", action=argparse.BooleanOptionalAction, default=True,
                   help="the shape sweep at sizes derived from the problem's (default on; --no-shapes skips it)")
    p.add_argument("--probe", choices=tuple(PROBE_CHOICES), default="both",
                   help="kcert (signed, outliers), problem (get_inputs()), or both (default)")
    p.add_argument("--no-peer-rules", dest="peer_rules", action="store_false",
                   help="leave out what torch.testing.assert_close, KernelBench, FlashAttention and dynamo's "
                        "same would have said")
    p.add_argument("--accept-untested-algebra", action="store_true",
                   help="when no algebra test can run (an opaque candidate at one precision), let the verdict rest "
                        "on the bias and variance gates (docs/verdicts.md)")
    p.add_argument("--ulp-floor", type=float, default=1.0, metavar="C",
                   help="the bias gate's floor in ULPs of the problem's dtype (default 1: a coherent bias below one "
                        "ULP is the format's own rounding arrangement; kcert certify uses 0.25 of the training "
                        "format)")
    p.add_argument("--algebra-proof", dest="algebra_proof", action="store_true",
                   help="also try the algebra gate's symbolic proof (off by default here: on modules whose weights "
                        "are held at the problem's sizes it rarely concludes and may spend its 300 s guard; the "
                        "identity test always runs)")
    p.set_defaults(algebra_proof=False, check_arguments=_check)


def _check(args) -> str | None:
    import math

    from .certify import _check as certify_check

    if not (math.isfinite(args.ulp_floor) and args.ulp_floor >= 0):
        return f"--ulp-floor must be a finite number >= 0, got {args.ulp_floor!r}"
    return certify_check(args)


def reproduce_command(args) -> str:
    flags = ["--budget", str(args.budget)]
    if args.dtype:
        flags += ["--dtype", args.dtype]
    for flag, on in (("--no-shrink", not args.shrink), ("--no-shapes", not args.shapes),
                     ("--no-peer-rules", not args.peer_rules), ("--algebra-proof", args.algebra_proof),
                     ("--accept-untested-algebra", args.accept_untested_algebra)):
        if on:
            flags.append(flag)
    if args.probe != "both":
        flags += ["--probe", args.probe]
    if args.ulp_floor != 1.0:
        flags += ["--ulp-floor", exact_number(args.ulp_floor)]
    return command_line(["kcert", "kernelbench", args.problem, args.candidate], replicates=args.replicates,
                        horizon=args.horizon, seed=args.seed, max_replicates=args.max_replicates,
                        device=args.device, flags=flags)


def run(args) -> int:
    if str(args.device).startswith("cpu") and "TRITON_INTERPRET" not in os.environ:
        # before torch (and triton through it) is imported: a Triton candidate runs in the CPU interpreter
        os.environ["TRITON_INTERPRET"] = "1"
    streams = Streams.make(args, stdout_taken=STDOUT in (args.json, args.html))
    problem = first_output_problem((("--json", args.json), ("--html", args.html)))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    import torch

    from ..adapters import kernelbench as kb
    from ..checks.adequacy import merge_rejections
    from ..errors import KcertError
    from ..report.terminal import render, render_summary
    from .certify import _report_error, _write_reports, certify_with_bar, exit_code

    try:
        cases = kb.cases(args.problem, args.candidate, dtype=getattr(torch, args.dtype) if args.dtype else None,
                         budget=args.budget, shrink=args.shrink, shapes=args.shapes, seed=args.seed,
                         device=args.device, probes=PROBE_CHOICES[args.probe])
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    thresholds = dataclasses.replace(kb.BIAS_THRESHOLDS, ulp_floor=args.ulp_floor)
    streams.note(f"kcert kernelbench: {args.candidate} against {args.problem}: {cases[0].description}")
    outcomes, certs = [], []
    for case in cases:
        try:
            cert = certify_with_bar(case, args, streams, command=reproduce_command(args),
                                    accept_untested_algebra=args.accept_untested_algebra, adequacy=True,
                                    peer_rules=args.peer_rules, bias_thresholds=thresholds)
        except KcertError as exc:
            _report_error(exc, args, streams)
            outcomes.append((case.name, str(exc)))
            continue
        except KeyboardInterrupt:
            streams.note("kcert: interrupted")
            return 130
        certs.append(cert)
        outcomes.append((case.name, cert))
    certs = merge_rejections(certs)
    merged = {c.case: c for c in certs}
    outcomes = [(name, merged.get(name, o)) for name, o in outcomes]
    for cert in certs:
        render(cert, streams.out)
    written = _write_reports(certs, args, streams)
    code, deciders, why = exit_code(outcomes, written)
    if len(outcomes) > 1:
        render_summary(outcomes, code, deciders, why, streams.out)
    return code


__all__ = ["DEFAULT_BUDGET", "add_arguments", "element_count", "integer", "reproduce_command", "run"]
