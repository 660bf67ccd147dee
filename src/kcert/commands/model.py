"""``kcert model FILE``: certify model pairs module by module (:func:`kcert.certify_model`, docs/model.md).
Light at import: torch is imported inside :func:`run`.

Exit codes as ``kcert certify``: 0 every row PASS and every module matched, 1 any FAIL, 3 a WARN, SKIPPED
or unmatched module to review and no FAIL, 2 a usage or input error (a file that does not load, a
selection that matches nothing, a model that raises: the other pairs still run), 124 --max-time, 130
Ctrl-C, 143 SIGTERM (each pair runs through :class:`kcert.commands.session.CommandRun`).

Under ``torchrun --nproc-per-node N -m kcert model FILE`` every rank builds the same rows and each row's
replicates are shared among the ranks as ``kcert certify`` shares a case's (docs/scaling.md), or, with
``--shard rows``, each rank takes whole rows from one queue; rank 0 prints and writes the reports.
"""

from __future__ import annotations

import argparse

from . import EXIT_ERROR, EXIT_PASS
from .options import add_run_options, bias_thresholds, check_run_options, run_flags, settings_values
from .output import STDOUT, Streams, first_output_problem

EPILOG = ("A model file defines kcert.ModelPair objects (or functions named *pair* returning them). Exit 0: every "
          "row PASS; 1: a FAIL; 3: a WARN, SKIPPED or unmatched module; 2: usage or input error. docs/model.md")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("modelfile", metavar="FILE")
    p.add_argument("--case", action="append", metavar="NAME", help="only this pair (repeatable)")
    p.add_argument("--modules", action="append", metavar="PATTERN",
                   help="select modules by qualified name (fnmatch, repeatable; default: the pair's selection, else "
                        "every module that computes something itself)")
    p.add_argument("--types", action="append", metavar="CLASS", help="select modules of this class name (repeatable)")
    p.add_argument("--depth", type=int, default=None, metavar="D", help="select modules at most D dots deep")
    p.add_argument("--leaves", action="store_true", help="select leaf modules")
    p.add_argument("--no-backward", dest="backward", action="store_false",
                   help="certify the forward rows only (default: forward and backward)")
    p.add_argument("--no-end-to-end", dest="end_to_end", action="store_false",
                   help="leave out the row of the model's own outputs")
    pad = p.add_mutually_exclusive_group()
    pad.add_argument("--padding", metavar="INPUT", default=None,
                     help="the input marking padded positions (1 a token, 0 padding): outputs there are zeroed on both "
                          "sides (default: the pair's, else attention_mask when the inputs have it; docs/model.md)")
    pad.add_argument("--no-padding", action="store_true", help="compare every position, padded or not")
    p.add_argument("--rename", action="append", metavar="PATTERN=NAME",
                   help="rename prod's modules to ref's before matching (prod in another framework's layout): a "
                        "regular expression on prod's whole qualified name, then ref's name (\\1 for groups); "
                        "repeatable, the first that matches renames; replaces the pair's own rename (docs/model.md)")
    p.add_argument("--autocast", choices=("bfloat16", "float16"), default=None,
                   help="mixed precision as training runs it: the models' float32 parameters, every forward under "
                        "torch.autocast of this dtype, harm in its ULPs; replaces the pair's own (docs/model.md)")
    p.add_argument("--shard", choices=("replicates", "rows"), default="replicates",
                   help="under torchrun, what the ranks share: each row's replicates (default), or whole rows taken "
                        "from one queue, costliest first: faster at a low -R with many rows (the same certificate "
                        "either way; docs/model.md)")
    settle = p.add_mutually_exclusive_group()
    settle.add_argument("--settle", type=int, default=None, metavar="N",
                        help="rows WARNing only for lack of evidence at their last look go on to N replicates from "
                             "their state (default: 4 times the cap, 16R, unless --max-replicates is given; "
                             "docs/model.md)")
    settle.add_argument("--no-settle", dest="settle", action="store_false",
                        help="rows stop at their planned looks (the settle command is printed instead)")
    p.add_argument("--export-case", nargs=2, metavar=("MODULE", "OUT.py"), default=None,
                   help="write a case file for MODULE (its recorded inputs as the probe) for `kcert certify OUT.py`, "
                        "and certify nothing")
    why = {"algebra_proof": " here: modules close over their sizes, so the proof is rarely reached and costs "
                            "minutes per large row; docs/model.md"}
    helps = {"json": "write the JSON report (kcert.model/1: one object for one pair, an array for several); '-' "
                     "for stdout",
             "checkpoint": "save each row's state to PATH's stem.<row>.npz; --resume continues the rows (finished "
                           "rows load from their files)"}
    add_run_options(p, defaults={"algebra_proof": False}, why=why, helps=helps)
    p.epilog = EPILOG
    p.set_defaults(check_arguments=_check)


def _check(args) -> str | None:
    problem = check_run_options(args)
    if problem:
        return problem
    if args.depth is not None and args.depth < 0:
        return f"--depth must be >= 0, got {args.depth}"
    if args.settle is not None and args.settle is not False:  # a number: checked before anything is imported
        from .. import settings
        from ..errors import ParameterError
        from ..settling import settle_cap

        flags = {"settle": "--settle", **{k: f.name for k, f in settings.FLAGS.items()}}
        try:
            settle_cap(args.settle, args.replicates, args.max_replicates or 4 * args.replicates, args.max_replicates,
                       "kcert model", flags.get)
        except ParameterError as exc:
            return str(exc)
    return None


def _selection(args, pair):
    from ..model import Modules

    if args.modules or args.types or args.depth is not None or args.leaves:
        return Modules(names=tuple(args.modules or ()), types=tuple(args.types or ()), depth=args.depth,
                       leaves=args.leaves)
    return pair.modules


def _command(args, pair: str) -> str:
    from ..reproduce import command_line

    words = ["kcert", "model", args.modelfile, "--case", pair]
    for flag, values in (("--modules", args.modules), ("--types", args.types)):
        words += [w for v in values or () for w in (flag, v)]
    if args.depth is not None:
        words += ["--depth", str(args.depth)]
    words += ["--leaves"] * args.leaves + ["--no-backward"] * (not args.backward) + \
        ["--no-end-to-end"] * (not args.end_to_end) + ["--no-padding"] * args.no_padding
    if args.padding:
        words += ["--padding", args.padding]
    if args.autocast:
        words += ["--autocast", args.autocast]
    if args.settle is not None:
        words += ["--no-settle"] if args.settle is False else ["--settle", str(args.settle)]
    return command_line(words, replicates=args.replicates, horizon=args.horizon, seed=args.seed,
                        max_replicates=args.max_replicates, device=args.device, flags=run_flags(args, {}))


def run(args) -> int:
    streams = Streams.make(args, stdout_taken=STDOUT in (args.json, args.html))
    if args.silent:  # other torchrun ranks: they share each row's replicates (or rows), rank 0 reports
        args.json = args.html = None
    outputs = [("--json", args.json), ("--html", args.html), ("--checkpoint", args.checkpoint)]
    problem = first_output_problem(outputs, file_only=("--checkpoint",))
    if problem:
        streams.error(problem)
        return EXIT_ERROR
    from .runtime import Clock, human, set_threads

    set_threads(args.threads)
    from ..errors import KcertError
    from ..model import load_pairs
    from ..model import report
    from .session import CommandRun, exit_code

    try:
        pairs = load_pairs(args.modelfile, args.case)
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    if args.export_case:
        return _export(args, pairs, streams)
    thresholds = bias_thresholds(args)
    session = CommandRun(args, streams)
    saved = (f"; finished rows and this one's state are saved beside {args.checkpoint}: continue with --resume"
             if args.checkpoint else "; nothing is saved (give --checkpoint PATH)")

    def render(cert) -> None:
        if not args.quiet:
            report.render(cert, streams.out)
        else:
            streams.out.print(report.headline(cert), highlight=False, markup=False, soft_wrap=True)
        hint = _settle_hint(args, cert, len(pairs))
        if hint:
            streams.note(hint)

    clock = Clock(args.max_time)  # --max-time bounds the whole command: every pair, every row

    def ran_out(pair, exc) -> str:
        where = f"in row {exc.row} after {exc.done} replicates" if exc.done else f"before row {exc.row}"
        later = [p.name for p in pairs[pairs.index(pair) + 1:]]
        return (f"--max-time {human(args.max_time)} reached in pair {pair.name!r} {where} ({exc.finished} of "
                f"{exc.rows} rows finished)" + (f"; not started: {', '.join(later)}" if later else ""))

    outcomes, stop = session.each(
        pairs, lambda pair: _certify(args, streams, pair, len(pairs), thresholds, clock.remaining()),
        lambda pair: f" in pair {pair.name!r}", lambda: saved, render, ran_out)
    if stop is not None:
        streams.note(stop.message)
        return stop.code
    certs = [c for _, c in outcomes if not isinstance(c, str)]
    settle = {c.name: found[1] for c in certs if (found := _settle(args, c, len(pairs)))}
    written = not certs or session.write((("json", None, lambda: report.dumps(certs, settle) + "\n"),
                                          ("html", None, lambda: report.render_html(certs))))
    return exit_code(outcomes, written)[0]


def _settle(args, cert, n_pairs: int) -> tuple[list, str] | None:
    """The rows WARNing only for lack of evidence (:func:`kcert.commands.settle.lack_of_evidence`), each with its
    last look, and the command that lets their looks go on (their modules, the end-to-end row only if it is one of
    them); None when there are none."""
    import shlex
    from argparse import Namespace

    from .session import checkpoint_path
    from .settle import lack_of_evidence, settle_flags

    open_rows = [(r, looks) for r in cert.rows if r.certificate is not None
                 and (looks := lack_of_evidence(r.certificate))]
    if not open_rows:
        return None
    names = list(dict.fromkeys(r.module for r, _ in open_rows if r.module))
    again = Namespace(**{**vars(args), "modules": names, "types": None, "depth": None, "leaves": False,
                         "max_replicates": 4 * max(looks for _, looks in open_rows), "prior_max_replicates": None,
                         "end_to_end": any(not r.module for r, _ in open_rows), "settle": None})
    checkpoint = checkpoint_path(args.checkpoint, cert.name, n_pairs) if args.checkpoint else None
    # the rows' last plan: the run's cap, or the settle cap for rows that went on (started over, the command names it)
    last_cap = max(r.certificate.provenance.max_replicates for r, _ in open_rows)
    return open_rows, _command(again, cert.name) + " " + shlex.join(settle_flags(args, checkpoint, last_cap))


def _settle_hint(args, cert, n_pairs: int) -> str | None:
    """The line naming the rows WARNing only for lack of evidence and the command that settles them, or None."""
    from .settle import how

    found = _settle(args, cert, n_pairs)
    if found is None:
        return None
    open_rows, command = found
    rows = ", ".join(f"{r.label} {r.direction}" for r, _ in open_rows)
    return (f"kcert: {len(open_rows)} WARN row(s) only for lack of evidence at their last look ({rows}: the variance "
            f"gate's looks ran out before it decided, its interval across a line or a PASS held back); "
            f"{how(bool(args.checkpoint))} {command}")


def _certify(args, streams, pair, n_pairs: int, thresholds, remaining: float | None):
    """One pair certified under its progress bar (its label names the row being certified); ``remaining``:
    seconds left of --max-time (the pair stops before its first row when none are)."""
    from ..model import certify_model
    from .progress import replicates_bar
    from .session import checkpoint_path

    settings = settings_values(args)
    if remaining is not None:
        settings["max_time"] = max(remaining, 1e-3)
    if args.checkpoint:
        settings["checkpoint"] = checkpoint_path(args.checkpoint, pair.name, n_pairs)
    options = dict(pair.options)  # the pair's own, unless the command line turns a part off
    options.update({k: False for k in ("backward", "end_to_end") if not getattr(args, k)})
    if args.no_padding or args.padding:
        options["padding"] = None if args.no_padding else args.padding
    if args.rename:
        options["rename"] = args.rename
    if args.autocast:
        import torch

        options["autocast"] = getattr(torch, args.autocast)
    with replicates_bar(pair.name, streams.err) as bar:
        task = bar.add_task("replicates", total=args.replicates)

        def tick(done, planned):
            bar.update(task, completed=done, total=planned)

        def event(kind, detail):
            if kind in ("row", "settle"):
                label = f"{pair.name}: {detail['module'] or '(model)'} {detail['direction']} " \
                        f"({detail['index'] + 1}/{detail['rows']})"
                if kind == "settle":
                    label += f", held back at {detail['from']}: on to {detail['to']}"
                bar.update(task, description=label, **({"completed": 0} if kind == "row" else {}))

        return certify_model(pair.ref, pair.prod, pair.inputs, modules=_selection(args, pair), loss=pair.loss,
                             dtype=pair.dtype, name=pair.name, progress=tick, on_event=event, shard=args.shard,
                             settle=args.settle,
                             **{**settings, "bias_thresholds": thresholds, "command": _command(args, pair.name)},
                             **options)


def _export(args, pairs, streams) -> int:
    from ..errors import KcertError
    from ..model.export import write_case_file

    module, out = args.export_case
    if args.padding or args.no_padding or args.rename or args.autocast:
        what, flags = ("rename", "--rename") if args.rename else ("autocast", "--autocast") if args.autocast else \
            ("padding", "--padding/--no-padding")
        streams.error(f"--export-case writes a file that rebuilds the pair from the model file, with the pair's own "
                      f"{what}: set it there (ModelPair(..., options={{{what!r}: ...}})), not with {flags}")
        return EXIT_ERROR
    if len(pairs) != 1:
        streams.error(f"--export-case needs one pair; the file defines {[p.name for p in pairs]}: pick one with --case")
        return EXIT_ERROR
    try:
        names = write_case_file(pairs[0], args.modelfile, module, out, args.backward)
    except KcertError as exc:
        streams.error(exc)
        return EXIT_ERROR
    except OSError as exc:
        streams.error(f"--export-case: cannot write {out!r}: {exc}")
        return EXIT_ERROR
    streams.note(f"kcert: wrote {out} ({', '.join(names)}); continue with: kcert certify {out}")
    return EXIT_PASS
