"""Command line: parse, call, render, exit code. Nothing else lives here.

Exit codes: 0 every verdict PASS; 1 any FAIL; 3 a WARN or SKIPPED and no FAIL; 2 a usage or
input error (it wins over verdicts: a run with an error is not a certification).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.text import Text

from . import __version__
from .certificate import Certificate
from .certification import DEFAULT_HORIZON, certify
from .errors import KcertError
from .verdict import Verdict

EXIT_PASS, EXIT_FAIL, EXIT_ERROR, EXIT_REVIEW = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with the usage line, like argparse, but say kcert
        self.print_usage(sys.stderr)
        sys.stderr.write(f"kcert: error: {message}\n")
        raise SystemExit(EXIT_ERROR)


class _Rate(ProgressColumn):
    """Replicates per second (rich's own speed columns speak of bytes or hide the rate)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:.1f} rep/s" if task.speed else "", style="cyan")


def _error(errors: Console, message) -> None:
    # soft_wrap: an error is one line however narrow the terminal, so it can be grepped and quoted
    errors.print(f"[bold red]kcert: error:[/] {rich_escape(str(message))}", soft_wrap=True, highlight=False)


def _integer(text: str) -> int:
    # ranges are checked once, by kcert.certify, whose messages name the rule and the value
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _run_options(p: argparse.ArgumentParser, replicates: int) -> None:
    p.add_argument("--replicates", "-R", type=_integer, default=replicates, metavar="R",
                   help=f"replicates (default {replicates}); the variance gate may add up to 4x")
    p.add_argument("--max-replicates", type=_integer, default=None, metavar="M",
                   help="cap for adaptive replicates (default 4 x R)")
    p.add_argument("--horizon", "-T", type=float, default=DEFAULT_HORIZON, metavar="T",
                   help=f"horizon in kernel calls (default {DEFAULT_HORIZON:g}, one optimizer step)")
    p.add_argument("--seed", "-s", type=_integer, default=0, metavar="S", help="seed (default 0)")
    p.add_argument("--device", default="cpu", help="torch device for the case's tensors (default cpu)")
    p.add_argument("--no-algebra-proof", dest="algebra_proof", action="store_false",
                   help="skip the symbolic proof of the algebra gate (the identity test still runs)")
    p.add_argument("--json", metavar="OUT", help="write the JSON report (kcert.certificate/1); '-' for stdout")
    p.add_argument("--html", metavar="OUT", help="write an HTML report")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kcert", description="Certify that a production kernel computes what its reference computes.")
    parser.add_argument("--version", action="version", version=f"kcert {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("certify", help="certify the cases of a case file")
    c.add_argument("casefile", metavar="CASES.py")
    c.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    _run_options(c, 1024)
    c.add_argument("--checkpoint", metavar="PATH",
                   help="save the run's state to PATH (.npz) periodically, on error and on Ctrl-C; with several "
                        "cases, one file per case: PATH's stem + '.' + case name")
    c.add_argument("--resume", action="store_true", help="continue from --checkpoint PATH to the same certificate")
    c.add_argument("--checkpoint-every", type=_integer, default=1024, metavar="N",
                   help="save after every N replicates (default 1024; at block boundaries of 64)")
    c.add_argument("--checkpoint-seconds", type=float, default=300.0, metavar="S",
                   help="or after S seconds (default 300)")
    d = sub.add_parser("demo", help="certify the embedded Gemma RMSNorm pair, correct and defective")
    _run_options(d, 1024)
    k = sub.add_parser("controls", help="run the negative and positive control suite and print the detection table")
    k.add_argument("--family", action="append", metavar="F", help="only this family (repeatable)")
    k.add_argument("--control", action="append", metavar="NAME", help="only this control (repeatable)")
    k.add_argument("--quick", action="store_true", help="the quick subset, at most 256 replicates each")
    k.add_argument("--seed", "-s", type=_integer, default=0, metavar="S", help="seed (default 0)")
    k.add_argument("--json", metavar="OUT", help="write every row and certificate as JSON (kcert.controls/1)")
    k.add_argument("--markdown", metavar="OUT", help="write the table as Markdown (docs/controls.md)")
    cal = sub.add_parser("calibrate", help="run the positive controls over seeds: null rates of the thresholds")
    cal.add_argument("--family", action="append", metavar="F", help="only this family (repeatable)")
    cal.add_argument("--control", action="append", metavar="NAME", help="only this positive control (repeatable)")
    cal.add_argument("--seeds", type=_integer, default=2, metavar="N", help="seeds 0..N-1 per control (default 2)")
    cal.add_argument("--replicates", "-R", type=_integer, default=None, metavar="R",
                     help="replicates per run (default: each control's declared count)")
    cal.add_argument("--quick", action="store_true", help="at most 256 replicates per run")
    cal.add_argument("--json", metavar="OUT",
                     help="write every output's record as JSON (kcert.calibration/1); '-' for stdout")
    cal.add_argument("--markdown", metavar="OUT", help="write the tables as Markdown (docs/calibration.md)")
    return parser


def _exit_code(certs: list[Certificate]) -> int:
    verdicts = [c.verdict for c in certs]
    if Verdict.FAIL in verdicts:
        return EXIT_FAIL
    if any(v is not Verdict.PASS for v in verdicts):
        return EXIT_REVIEW
    return EXIT_PASS


def _command(args, casefile: str | None, case: str) -> str:
    words = ["kcert", "certify", casefile, "--case", case] if casefile else ["kcert", "demo"]
    words += ["--replicates", str(args.replicates), "--horizon", f"{args.horizon:g}", "--seed", str(args.seed)]
    if args.max_replicates is not None:
        words += ["--max-replicates", str(args.max_replicates)]
    if args.device != "cpu":
        words += ["--device", args.device]
    if not args.algebra_proof:
        words += ["--no-algebra-proof"]
    return shlex.join(words)


def _checkpoint_path(args, case, n_cases: int) -> str | None:
    path = getattr(args, "checkpoint", None)
    if path is None or n_cases == 1:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{case.name}{p.suffix or '.npz'}"))


def _run(cases, args, casefile: str | None, console: Console, errors: Console) -> tuple[list[Certificate], bool]:
    certs, failed = [], False
    cases = list(cases)
    for case in cases:
        saving = {}
        if getattr(args, "checkpoint", None) is not None:
            saving = dict(checkpoint=_checkpoint_path(args, case, len(cases)), resume=args.resume,
                          checkpoint_every=args.checkpoint_every, checkpoint_seconds=args.checkpoint_seconds)
        progress = Progress(TextColumn(f"[bold]{case.name}"), BarColumn(), MofNCompleteColumn(),
                            _Rate(), TimeElapsedColumn(), TimeRemainingColumn(),
                            console=errors, transient=True, disable=not errors.is_terminal)
        try:
            with progress:
                task = progress.add_task("replicates", total=args.replicates)

                def tick(done, planned):
                    progress.update(task, completed=done, total=planned)

                cert = certify(case, args.replicates, args.horizon, args.seed, max_replicates=args.max_replicates,
                               device=args.device, command=_command(args, casefile, case.name), progress=tick,
                               algebra_proof=args.algebra_proof, **saving)
        except KcertError as exc:
            _error(errors, exc)
            failed = True
            continue
        certs.append(cert)
        from .report.terminal import render

        render(cert, console)
    return certs, failed


def _write_reports(certs: list[Certificate], args, errors: Console) -> None:
    if not certs:
        return
    if args.json:
        from .report.jsonio import dumps

        text = dumps(certs)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
            errors.print(f"JSON report: {args.json}", highlight=False)
    if args.html:
        from .report.html import render_html

        Path(args.html).write_text(render_html(certs), encoding="utf-8")
        errors.print(f"HTML report: {args.html}", highlight=False)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "resume", False) and args.checkpoint is None:
        build_parser().error("--resume needs --checkpoint PATH, the file to resume from")
    from .execution import distributed

    if not distributed.launched_by_torchrun():
        return _main(args)
    # torchrun: one process per rank; they share the replicates, rank 0 alone prints and writes
    if args.command in ("controls", "calibrate"):
        if os.environ.get("RANK", "0") == "0":
            _error(Console(stderr=True), f"kcert {args.command} does not run under torchrun; run it as one process")
        return EXIT_ERROR
    args.device = distributed.local_device(args.device)
    try:
        group = distributed.process_group(args.device)
        comm = group.__enter__()
    except (RuntimeError, ValueError) as exc:
        _error(Console(stderr=True), f"torch.distributed could not start (WORLD_SIZE={os.environ.get('WORLD_SIZE')}): {exc}")
        return EXIT_ERROR
    try:
        code = _main(args, quiet=comm.rank != 0)
        comm.barrier()  # reports are written before any rank exits
    finally:
        group.__exit__(None, None, None)
    # torchrun stops every rank as soon as one exits non-zero: rank 0 alone carries the outcome
    return code if comm.rank == 0 else EXIT_PASS


def _main(args, quiet: bool = False) -> int:
    errors = Console(stderr=True, soft_wrap=False, quiet=quiet)
    console = errors if args.json == "-" else Console(quiet=quiet)
    if quiet:  # other ranks: no report files either
        args.json = args.html = None
    if not console.is_terminal:
        console.width = max(console.width, 132)  # tables stay readable in logs and CI output
    for flag in ("--json", "--html", "--markdown"):
        value = getattr(args, flag[2:], None)
        if value and value != "-" and not Path(value).resolve().parent.is_dir():
            _error(errors, f"{flag} {value}: the folder {str(Path(value).resolve().parent)!r} does not exist")
            return EXIT_ERROR
    if args.command == "controls":
        return _controls(args, console, errors)
    if args.command == "calibrate":
        return _calibrate(args, console, errors)
    try:
        if args.command == "demo":
            from . import demo

            cases, casefile = list(demo.CASES), None
        else:
            from .casefile import load_cases

            cases, casefile = load_cases(args.casefile, args.case), args.casefile
        certs, failed = _run(cases, args, casefile, console, errors)
    except KcertError as exc:
        _error(errors, exc)
        return EXIT_ERROR
    except KeyboardInterrupt:
        saved = f"; state saved to {args.checkpoint}, continue with --resume" if getattr(args, "checkpoint", None) else ""
        errors.print(f"kcert: interrupted{saved}", highlight=False)
        return 130
    _write_reports(certs, args, errors)
    if failed:
        return EXIT_ERROR
    if args.command == "demo":
        return _demo_outcome(certs, console)
    return _exit_code(certs)


def _controls(args, console: Console, errors: Console) -> int:
    from .controls.registry import FAMILIES, all_controls
    from .controls.suite import run_controls, summarize
    from .report import controls as render

    controls = all_controls()
    names = {c.name for c in controls}
    for family in args.family or ():
        if family not in FAMILIES:
            _error(errors, f"--family {family!r} is not a control family; families: {', '.join(FAMILIES)}")
            return EXIT_ERROR
    for name in args.control or ():
        if name not in names:
            _error(errors, f"--control {name!r} is not a control; run `kcert controls --quick` to list them")
            return EXIT_ERROR
    if args.family:
        controls = [c for c in controls if c.family in args.family]
    if args.control:
        controls = [c for c in controls if c.name in args.control]
    if args.quick:
        controls = [c for c in controls if c.quick] if not args.control else controls
    if not controls:
        _error(errors, "no control matches the selection")
        return EXIT_ERROR
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=errors, transient=True, disable=not errors.is_terminal) as progress:
        task = progress.add_task("controls", total=len(controls))

        def tick(control, i, n):
            progress.update(task, completed=i, description=control.name)

        results = run_controls(controls, seed=args.seed, quick=args.quick, progress=tick)
    summary = summarize(results)
    render.render_table(results, summary, console)
    words = ["kcert", "controls", "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
    for family in args.family or ():
        words += ["--family", family]
    for name in args.control or ():
        words += ["--control", name]
    if args.markdown:
        Path(args.markdown).write_text(render.markdown(results, summary, shlex.join(words)), encoding="utf-8")
    if args.json:
        text = render.dumps(results, summary)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    whole = not (args.family or args.control or args.quick)
    ok = summary.meets_bar if whole else all(r.meets_bar for r in results)
    return EXIT_PASS if ok else EXIT_FAIL


def _calibrate(args, console: Console, errors: Console) -> int:
    from rich.table import Table

    from . import calibration

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=errors, transient=True, disable=not errors.is_terminal) as progress:
        task = progress.add_task("calibration", total=None)

        def tick(control, seed, done, total):
            progress.update(task, completed=done, total=total, description=f"{control} (seed {seed})")

        try:
            result = calibration.calibrate(args.family, seeds=args.seeds, replicates=args.replicates, quick=args.quick,
                                           controls=args.control, progress=tick)
        except KcertError as exc:
            _error(errors, exc)
            return EXIT_ERROR
    for title, header, rows in (("variance gate on known-good outputs", calibration.VARIANCE_HEADER,
                                 calibration.variance_rows(result)),
                                ("bias gate on known-good outputs", calibration.BIAS_HEADER,
                                 calibration.bias_rows(result))):
        t = Table(*header, header_style="bold", title=f"kcert calibrate: {title}", title_justify="left")
        for row in rows:
            t.add_row(*row)
        console.print(t)
    for e in result.errors:
        _error(errors, e)
    words = ["kcert", "calibrate", "--seeds", str(args.seeds)]
    words += ["--replicates", str(args.replicates)] if args.replicates is not None else []
    words += ["--quick"] if args.quick else []
    for family in args.family or ():
        words += ["--family", family]
    for name in args.control or ():
        words += ["--control", name]
    if args.markdown:
        Path(args.markdown).write_text(result.markdown(shlex.join(words)), encoding="utf-8")
        errors.print(f"Markdown: {args.markdown}", highlight=False)
    if args.json:
        import json

        text = json.dumps(result.to_dict(), indent=1)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
            errors.print(f"JSON: {args.json}", highlight=False)
    # a run some control could not finish is not a calibration
    return EXIT_ERROR if result.errors else EXIT_PASS


def _demo_outcome(certs: list[Certificate], console: Console) -> int:
    from .demo import EXPECTED

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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
