"""``kcert certify CASES.py`` and ``kcert demo``: certify each case, render it, write the reports, and
end a run of several cases with one summary table that names the cases that decided the exit code."""

from __future__ import annotations

import argparse
import hashlib
import re
import traceback
from pathlib import Path

from . import DEFAULT_HORIZON, EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_REVIEW
from ..reproduce import command_line
from .output import STDOUT, Streams, first_output_problem, write_output

INTERRUPTED = 130


def integer(text: str) -> int:
    # ranges are checked once, by kcert.certify, whose messages name the rule and the value
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def byte_count(text: str) -> int:
    """Bytes as an integer or with a binary unit: ``67108864``, ``64M``, ``64MiB``, ``1GiB``."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if match is None or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"must be a number of bytes >= 1 such as 67108864, 64MiB or 1GiB, "
                                         f"got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def run_options(p: argparse.ArgumentParser, replicates: int) -> None:
    p.add_argument("--replicates", "-R", type=integer, default=replicates, metavar="R",
                   help=f"replicates (default {replicates}); the variance gate may add up to 4x")
    p.add_argument("--max-replicates", type=integer, default=None, metavar="M",
                   help="cap for adaptive replicates (default 4 x R)")
    p.add_argument("--horizon", "-T", type=float, default=DEFAULT_HORIZON, metavar="T",
                   help=f"horizon in kernel calls (default {DEFAULT_HORIZON:g}, one optimizer step)")
    p.add_argument("--seed", "-s", type=integer, default=0, metavar="S", help="seed (default 0)")
    p.add_argument("--device", default="cpu", help="torch device for the case's tensors: cpu (default), cuda, cuda:1")
    p.add_argument("--batch-memory", type=byte_count, default=None, metavar="BYTES",
                   help="bytes per batched kernel call for cases that declare independent_leading_axis "
                        "(e.g. 256MiB; default 16MiB on CPU, 256MiB on accelerators)")
    p.add_argument("--no-algebra-proof", dest="algebra_proof", action="store_false",
                   help="skip the symbolic proof of the algebra gate (the identity test still runs)")
    p.add_argument("--json", metavar="OUT", help="write the JSON report (kcert.certificate/1); '-' for stdout")
    p.add_argument("--html", metavar="OUT", help="write the HTML report; '-' for stdout")
    p.add_argument("--traceback", action="store_true",
                   help="print the full traceback of a kernel that raises (default: its file and line)")
    p.set_defaults(check_arguments=_check)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("casefile", metavar="CASES.py")
    p.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    p.add_argument("--list", action="store_true", help="list the cases the file defines, and how they were found")
    run_options(p, 1024)
    p.add_argument("--checkpoint", metavar="PATH",
                   help="save the run's state to PATH (.npz) periodically, on error and on Ctrl-C; with several "
                        "cases, one file per case: PATH's stem + '.' + case name")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint PATH to the same certificate")
    p.add_argument("--checkpoint-every", type=integer, default=1024, metavar="N",
                   help="save after every N replicates (default 1024; at block boundaries of 64)")
    p.add_argument("--checkpoint-seconds", type=float, default=300.0, metavar="S",
                   help="or after S seconds (default 300)")
    p.add_argument("--accept-untested-algebra", action="store_true",
                   help="when no algebra test can run (an opaque prod at one precision), let the verdict rest on "
                        "the bias and variance gates; the report states what is not tested (docs/verdicts.md)")
    p.add_argument("--adequacy", action="store_true",
                   help="run the fixed fakes (zeros, a constant, the input, a stale output, ref rounded, a fresh "
                        "input) through the same probes and gates; one not FAILed keeps a case from PASS "
                        "(docs/kernelbench.md)")
    p.add_argument("--shapes", action="store_true",
                   help="shape sweep: also certify (algebra gate and a short run) at shapes derived from the probes' "
                        "for cases that declare none; a FAIL there FAILs the case (docs/kernelbench.md)")
    p.add_argument("--no-peer-rules", dest="peer_rules", action="store_false",
                   help="leave out what torch.testing.assert_close, KernelBench, FlashAttention and dynamo's same "
                        "would have said on the first samples")


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    run_options(p, 1024)


def _check(args) -> str | None:
    if getattr(args, "resume", False) and args.checkpoint is None:
        return "--resume needs --checkpoint PATH, the file to resume from"
    if args.json == STDOUT and args.html == STDOUT:
        return "--json - and --html - cannot both write to stdout; give one of them a file name"
    return None


def run(args) -> int:
    return _run(args, demo=False)


def run_demo(args) -> int:
    return _run(args, demo=True)


# --- the run ----------------------------------------------------------------------------------------


def _run(args, demo: bool) -> int:
    streams = Streams.make(args, stdout_taken=STDOUT in (args.json, args.html))
    if args.quiet:  # other torchrun ranks: no report files either
        args.json = args.html = None
    outputs = [("--json", args.json), ("--html", args.html), ("--checkpoint", getattr(args, "checkpoint", None))]
    problem = first_output_problem(outputs, file_only=("--checkpoint",))
    if problem:  # before any work: a bad path costs nothing
        streams.error(problem)
        return EXIT_ERROR
    from ..errors import KcertError

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
            streams.note(found.describe() + chosen)
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR

    outcomes, interrupted = _certify_each(cases, args, casefile, streams)
    certs = [o for _, o in outcomes if not isinstance(o, str)]
    written = _write_reports(certs, args, streams)
    if interrupted:
        saved = f"; state saved to {args.checkpoint}, continue with --resume" if getattr(args, "checkpoint", None) else ""
        streams.note(f"kcert: interrupted{saved}")
        return INTERRUPTED
    if demo:
        return _demo_outcome(certs, streams.out) if written and len(certs) == len(cases) else EXIT_ERROR
    code, deciders, why = exit_code(outcomes, written)
    if len(cases) > 1:
        from ..report.terminal import render_summary

        render_summary(outcomes, code, deciders, why, streams.out)
    return code


def certify_with_bar(case, args, streams: Streams, **options):
    """One certification under the replicates progress bar, with the run options every certifying
    command shares (``args``: replicates, horizon, seed, max_replicates, device, algebra_proof,
    batch_memory); ``options`` are the command's own."""
    from ..certification import certify
    from .progress import replicates_bar

    with replicates_bar(case.name, streams.err) as bar:
        task = bar.add_task("replicates", total=args.replicates)

        def tick(done, planned):
            bar.update(task, completed=done, total=planned)

        return certify(case, args.replicates, args.horizon, args.seed, max_replicates=args.max_replicates,
                       device=args.device, progress=tick, algebra_proof=args.algebra_proof,
                       batch_memory=args.batch_memory, **options)


def _certify_each(cases, args, casefile: str | None, streams: Streams) -> tuple[list, bool]:
    """(case name, certificate or error text) per case, and whether Ctrl-C stopped the run."""
    from ..errors import KcertError
    from ..report.terminal import render

    outcomes: list = []
    for case in cases:
        saving = {}
        if getattr(args, "checkpoint", None) is not None:
            saving = dict(checkpoint=checkpoint_path(args.checkpoint, case.name, len(cases)), resume=args.resume,
                          checkpoint_every=args.checkpoint_every, checkpoint_seconds=args.checkpoint_seconds)
        try:
            cert = certify_with_bar(case, args, streams, command=reproduce_command(args, casefile, case.name),
                                    accept_untested_algebra=getattr(args, "accept_untested_algebra", False),
                                    adequacy=getattr(args, "adequacy", False),
                                    peer_rules=getattr(args, "peer_rules", True),
                                    shapes=True if getattr(args, "shapes", False) else None, **saving)
        except KcertError as exc:
            _report_error(exc, args, streams)
            outcomes.append((case.name, str(exc)))
            continue
        except KeyboardInterrupt:
            return outcomes, True
        outcomes.append((case.name, cert))
        render(cert, streams.out)
    return outcomes, False


def _report_error(exc: BaseException, args, streams: Streams) -> None:
    cause = exc.__cause__
    if args.traceback and not args.quiet:
        streams.err.print("".join(traceback.format_exception(exc)).rstrip(), markup=False, highlight=False,
                          soft_wrap=True)
    hint = "; --traceback prints the full traceback" if cause is not None and not args.traceback else ""
    streams.error(f"{exc}{hint}")


def _write_reports(certs, args, streams: Streams) -> bool:
    """Write --json and --html; False when one could not be written where asked (it was saved elsewhere)."""
    ok = True
    if not certs:
        return ok
    if args.json:
        from ..report.jsonio import dumps

        written = write_output("--json", args.json, dumps(certs) + "\n", streams)
        if written and args.json != STDOUT:
            streams.note(f"JSON report: {args.json}")
        ok &= written
    if args.html:
        from ..report.html import render_html

        written = write_output("--html", args.html, render_html(certs), streams)
        if written and args.html != STDOUT:
            streams.note(f"HTML report: {args.html}")
        ok &= written
    return ok


# --- outcome ----------------------------------------------------------------------------------------


def exit_code(outcomes: list, reports_written: bool = True) -> tuple[int, set[str], str]:
    """The exit code of a run, the cases that decided it, and why (for the summary table)."""
    from ..verdict import Verdict

    errors = {name for name, o in outcomes if isinstance(o, str)}
    if errors or not reports_written:
        why = "an input or kernel error" if errors else "a report could not be written where asked"
        return EXIT_ERROR, errors, why
    fails = {name for name, c in outcomes if c.verdict is Verdict.FAIL}
    if fails:
        return EXIT_FAIL, fails, "a FAIL"
    review = {name for name, c in outcomes if c.verdict is not Verdict.PASS}
    if review:
        return EXIT_REVIEW, review, "a WARN or SKIPPED to review, no FAIL"
    return EXIT_PASS, set(), "every verdict PASS"


def reproduce_command(args, casefile: str | None, case: str) -> str:
    """The command line that certifies ``case`` again with this run's options (:mod:`kcert.reproduce`)."""
    words = ["kcert", "certify", casefile, "--case", case] if casefile else ["kcert", "demo"]
    flags = []
    if getattr(args, "batch_memory", None) is not None:
        flags += ["--batch-memory", str(args.batch_memory)]
    for flag, on in (("--no-algebra-proof", not args.algebra_proof),
                     ("--accept-untested-algebra", getattr(args, "accept_untested_algebra", False)),
                     ("--adequacy", getattr(args, "adequacy", False)), ("--shapes", getattr(args, "shapes", False)),
                     ("--no-peer-rules", not getattr(args, "peer_rules", True))):
        if on:
            flags.append(flag)
    return command_line(words, replicates=args.replicates, horizon=args.horizon, seed=args.seed,
                        max_replicates=args.max_replicates, device=args.device, flags=flags)


def safe_name(name: str) -> str:
    """A case name as one file-name component: characters other than letters, digits, '.', '_' and
    '-' become '_', leading and trailing dots go (no '..', no hidden file), and a name that had to
    change gets a short hash of the original so that two names never share a file."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:80]
    if stem == name:
        return stem
    return f"{stem or 'case'}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def checkpoint_path(path: str, case: str, n_cases: int) -> str:
    """The checkpoint file of ``case``: ``path`` itself for one case, else ``stem.<case>.npz`` beside it."""
    if n_cases == 1:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{safe_name(case)}{p.suffix or '.npz'}"))


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
