"""The options every certifying command shares (``certify``, ``demo``, ``kernelbench``), declared once so
that they are spelt, defaulted and checked alike: the everyday ones first, the rarely used ones in an
"advanced" group. Light at import (argparse only).

Their ranges are checked before anything heavy is imported (:func:`check_run_options`, with the rules
of :mod:`kcert.parameters` that :func:`kcert.certify` applies too), so ``-R 0`` costs no import of
torch or of the case file.
"""

from __future__ import annotations

import argparse
import re

from . import DEFAULT_HORIZON
from .. import parameters
from ..reproduce import exact_number
from ..errors import ParameterError
from .output import STDOUT
from .runtime import DEFAULT_INTERVAL, DEFAULT_THREADS, duration


def integer(text: str) -> int:
    """An integer option (its range is checked by :func:`check_run_options` / ``kcert.certify``)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def byte_count(text: str) -> int:
    """Bytes as an integer or with a binary unit: ``67108864``, ``64M``, ``64MiB``, ``1GiB``."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if match is None or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"must be a number of bytes >= 1 such as 67108864, 64MiB or 1GiB, "
                                         f"got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def advanced_group(p: argparse.ArgumentParser):
    """The parser's group of rarely used options (created once)."""
    for group in p._action_groups:
        if group.title == "advanced":
            return group
    return p.add_argument_group("advanced", "rarely needed; the defaults suit most runs")


def add_run_options(p: argparse.ArgumentParser, replicates: int = 1024, *, algebra_proof: bool = True,
                    algebra_proof_why: str = "", shapes: bool | None = None, shapes_help: str = "",
                    ulp_floor: float | None = None, ulp_floor_help: str = "") -> None:
    """The options of a certifying command. The defaults that differ between commands are arguments
    (and each help text states its command's default)."""
    p.add_argument("--replicates", "-R", type=integer, default=replicates, metavar="R",
                   help=f"replicates of the first look (default {replicates}); the variance gate may add up to 4x")
    p.add_argument("--horizon", "-T", type=float, default=DEFAULT_HORIZON, metavar="T",
                   help=f"horizon in kernel calls (default {DEFAULT_HORIZON:g}, one optimizer step)")
    p.add_argument("--seed", "-s", type=integer, default=0, metavar="S", help="seed (default 0)")
    p.add_argument("--device", default="cpu", help="torch device for the case's tensors: cpu (default), cuda, cuda:1")
    p.add_argument("--threads", type=integer, default=DEFAULT_THREADS, metavar="N",
                   help=f"torch threads (default {DEFAULT_THREADS}: measured fastest on a shared machine, "
                        "docs/benchmarks.md; give the idle cores of a machine of your own)")
    p.add_argument("--max-time", type=duration, default=None, metavar="DURATION",
                   help="stop the replicates after this long (600, 90s, 30m, 1h30m), save the state to the "
                        "checkpoint and exit 124; --resume continues (default: no limit)")
    p.add_argument("--json", metavar="OUT", help="write the JSON report (kcert.certificate/1: one object for one "
                                                 "case, an array for several); '-' for stdout")
    p.add_argument("--html", metavar="OUT", help="write the HTML report; '-' for stdout")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="print one verdict line per case (and errors and warnings) instead of the full reports")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="save the run's state to PATH (.npz) periodically, at --max-time, on Ctrl-C and SIGTERM; "
                        "with several cases, one file per case: PATH's stem + '.' + case name")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint PATH to the same certificate")
    proof = "on" if algebra_proof else "off"
    p.add_argument("--algebra-proof", action=argparse.BooleanOptionalAction, default=algebra_proof,
                   help=f"the algebra gate's symbolic proof (default {proof}{algebra_proof_why}; the identity test "
                        "always runs)")
    p.add_argument("--shapes", action=argparse.BooleanOptionalAction, default=shapes,
                   help=shapes_help or "shape sweep: also certify (algebra gate and a short run) at shapes derived "
                                       "from the probes'; a FAIL there FAILs the case (default: only for cases that "
                                       "declare Case.shapes; docs/kernelbench.md)")
    p.add_argument("--ulp-floor", type=number, default=ulp_floor, metavar="C",
                   help=ulp_floor_help or "the bias gate's floor c in ULPs of the harm format (default 0.25: "
                                          "docs/method.md, 'Gate 2')")
    p.add_argument("--accept-untested-algebra", action="store_true",
                   help="when no algebra test can run (an opaque prod at one precision), let the verdict rest on "
                        "the bias and variance gates; the report states what is not tested (docs/verdicts.md)")
    p.add_argument("--peer-rules", action=argparse.BooleanOptionalAction, default=True,
                   help="show what torch.testing.assert_close, KernelBench, FlashAttention and dynamo's same "
                        "would have said on the first samples (default on)")
    advanced = advanced_group(p)
    advanced.add_argument("--max-replicates", type=integer, default=None, metavar="M",
                          help="cap of the variance gate's adaptive looks (default 4 x R)")
    advanced.add_argument("--batch-memory", type=byte_count, default=None, metavar="BYTES",
                          help="bytes per batched kernel call for cases that declare independent_leading_axis "
                               "(e.g. 256MiB; default 16MiB on CPU, 256MiB on accelerators)")
    advanced.add_argument("--checkpoint-every", type=integer, default=1024, metavar="N",
                          help="save after every N replicates (default 1024; at block boundaries of 64)")
    advanced.add_argument("--checkpoint-seconds", type=float, default=300.0, metavar="S",
                          help="or after S seconds (default 300)")
    advanced.add_argument("--progress-every", type=float, default=None, metavar="S",
                          help=f"without a terminal, print a progress line every S seconds (default "
                               f"{DEFAULT_INTERVAL:g}, none with --quiet; 0 turns it off)")
    advanced.add_argument("--traceback", action="store_true",
                          help="print the full traceback of a kernel that raises (default: its file and line)")


def check_run_options(args) -> str | None:
    """Why the run options cannot work (checked before any import of torch), or None."""
    try:
        parameters.replicates("--replicates", args.replicates, "--max-replicates", args.max_replicates)
        parameters.horizon("--horizon", args.horizon)
        parameters.integer("--seed", args.seed, 0)
        parameters.integer("--threads", args.threads, 1)
        parameters.integer("--checkpoint-every", args.checkpoint_every, 1)
        parameters.seconds("--checkpoint-seconds", args.checkpoint_seconds)
        if args.progress_every is not None:
            parameters.seconds("--progress-every", args.progress_every, allow_zero=True)
        if args.ulp_floor is not None:
            parameters.ulp_floor("--ulp-floor", args.ulp_floor)
    except ParameterError as exc:
        return str(exc)
    if args.resume and args.checkpoint is None:
        return "--resume needs --checkpoint PATH, the file to resume from"
    if args.json == STDOUT and args.html == STDOUT:
        return "--json - and --html - cannot both write to stdout; give one of them a file name"
    return None


def check_threads(args) -> str | None:
    """Why ``--threads`` cannot work (commands whose other options need no check), or None."""
    return None if args.threads >= 1 else f"--threads must be an integer >= 1, got {args.threads}"


def run_flags(args, defaults: dict) -> list[str]:
    """The options of ``args`` that change the certificate and differ from the command's ``defaults``
    (the reproduce command's flags)."""
    flags = []
    if getattr(args, "batch_memory", None) is not None:
        flags += ["--batch-memory", str(args.batch_memory)]
    if args.threads != DEFAULT_THREADS:
        flags += ["--threads", str(args.threads)]
    for name, on, off in (("algebra_proof", "--algebra-proof", "--no-algebra-proof"),
                          ("shapes", "--shapes", "--no-shapes"), ("peer_rules", "--peer-rules", "--no-peer-rules")):
        value = getattr(args, name)
        if value != defaults.get(name) and value is not None:
            flags.append(on if value else off)
    if args.accept_untested_algebra:
        flags.append("--accept-untested-algebra")
    if args.ulp_floor is not None and args.ulp_floor != defaults.get("ulp_floor"):
        flags += ["--ulp-floor", exact_number(args.ulp_floor)]
    return flags
