"""The options every certifying command shares (``certify``, ``demo``, ``kernelbench``), declared once so
that they are spelt, defaulted and checked alike: the everyday ones first, the rarely used ones in an
"advanced" group. Light at import (argparse only).

Their ranges are checked before anything heavy is imported (:func:`check_run_options`, with the rules
of :mod:`kcert.parameters` that :func:`kcert.certify` applies too), so ``-R 0`` costs no import of
torch or of the case file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass

from .. import parameters, settings
from ..errors import ParameterError
from ..reproduce import flag_words
from ..settings import Flag
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


# The options of a certifying command that are not settings of the certification (how the command runs
# and reports). Each: its flag, default, rule (checked before any import, like the settings') and whether a
# value other than the command's default enters the reproduce command.
@dataclass(frozen=True)
class _Own:
    flag: Flag
    default: object = None
    rule: object = None
    reproduce: bool = False


_OWN = {
    "threads": _Own(Flag(("--threads",), "torch threads (default {default}: measured fastest on a shared machine, "
                                         "docs/benchmarks.md; give the idle cores of a machine of your own)",
                         parse="integer", metavar="N"),
                    DEFAULT_THREADS, lambda name, v: parameters.integer(name, v, 1), reproduce=True),
    "json": _Own(Flag(("--json",), "write the JSON report (kcert.certificate/1: one object for one case, an array "
                                   "for several); '-' for stdout", metavar="OUT")),
    "html": _Own(Flag(("--html",), "write the HTML report; '-' for stdout", metavar="OUT")),
    "quiet": _Own(Flag(("--quiet", "-q"), "print one verdict line per case (and errors and warnings) instead of the "
                                          "full reports", kind="switch"), False),
    "ulp_floor": _Own(Flag(("--ulp-floor",), "the bias gate's floor c in ULPs of the harm format (default 0.25: "
                                             "docs/method.md, 'Gate 2')", parse="number", metavar="C"),
                      None, lambda name, v: None if v is None else parameters.ulp_floor(name, v), reproduce=True),
    "bucket_wise_bias": _Own(Flag(("--bucket-wise-bias",), "judge a bias bucket by bucket only: a FAIL within ref's "
                                                           "own bias profile stays a FAIL instead of a WARN "
                                                           "(docs/method.md, 'The working precision's own bias')",
                                  kind="switch", advanced=True), False, reproduce=True),
    "progress_every": _Own(Flag(("--progress-every",), f"without a terminal, print a progress line every S seconds "
                                                       f"(default {DEFAULT_INTERVAL:g}, none with --quiet; 0 turns "
                                                       "it off)", parse="float", metavar="S", advanced=True),
                           None, lambda name, v: None if v is None else parameters.seconds(name, v, allow_zero=True)),
    "traceback": _Own(Flag(("--traceback",), "print the full traceback of a kernel that raises (default: its file "
                                             "and line)", kind="switch", advanced=True), False),
}
# the options in the order of the command's help (a name of kcert.settings.Settings or of _OWN)
ORDER = ("replicates", "horizon", "seed", "device", "threads", "max_time", "json", "html", "quiet", "checkpoint",
         "resume", "algebra_proof", "shapes", "ulp_floor", "bucket_wise_bias", "accept_untested_algebra", "peer_rules",
         "max_replicates", "prior_max_replicates", "batch_memory", "checkpoint_every", "checkpoint_seconds",
         "progress_every", "traceback")
_PARSERS = {"integer": integer, "float": float, "number": number, "bytes": byte_count, "duration": duration}


def _option(name: str) -> tuple[Flag, object]:
    """The flag of option ``name`` and its default (the settings' or the command's own)."""
    if name in _OWN:
        return _OWN[name].flag, _OWN[name].default
    return settings.FLAGS[name], settings.DEFAULTS[name]


def add_option(p: argparse.ArgumentParser, name: str, default=None, *, why: str = "", help: str | None = None,
               **fixed) -> None:
    """Option ``name`` (a setting of :class:`kcert.settings.Settings` or one of the command's own) on ``p``,
    with the command's ``default`` (None: the shared one), its note ``why`` on that default or a
    whole ``help`` of its own."""
    flag, shared = _option(name)
    default = shared if default is None else default
    kwargs = dict(dest=name, default=default, help=help or flag.help_text(default, why))
    if flag.kind == "switch":
        kwargs["action"] = "store_true"
    elif flag.kind == "toggle":
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs.update(type=_PARSERS.get(flag.parse), metavar=flag.metavar)
    (advanced_group(p) if flag.advanced else p).add_argument(*flag.names, **(kwargs | fixed))


def add_run_options(p: argparse.ArgumentParser, defaults: dict | None = None, *, why: dict | None = None,
                    helps: dict | None = None) -> None:
    """The options every certifying command shares, in :data:`ORDER`; ``defaults``, ``why`` and
    ``helps`` (option name -> value) are the command's own defaults, notes on them and help texts."""
    defaults, why, helps = defaults or {}, why or {}, helps or {}
    for name in ORDER:
        add_option(p, name, defaults.get(name), why=why.get(name, ""), help=helps.get(name))


def settings_values(args) -> dict:
    """The settings of :class:`kcert.settings.Settings` that the command's options hold (name -> value)."""
    return {name: getattr(args, name) for name in settings.NAMES if hasattr(args, name)}


def bias_thresholds(args, base=None):
    """The bias gate's thresholds the options ask for: ``base`` (None: kcert's defaults) with ``--ulp-floor`` and
    ``--bucket-wise-bias``; None when neither is given and there is no ``base`` (the certifier's defaults)."""
    from ..stats.thresholds import BiasThresholds

    changes = {}
    if getattr(args, "ulp_floor", None) is not None:
        changes["ulp_floor"] = args.ulp_floor
    if getattr(args, "bucket_wise_bias", False):
        changes["profile_alpha"] = None
    if base is None and not changes:
        return None
    return dataclasses.replace(base or BiasThresholds(), **changes)


def check_run_options(args) -> str | None:
    """Why the run options cannot work (checked before any import of torch, by the rules
    :meth:`kcert.settings.Settings.check` applies), or None."""
    try:
        settings.check_values(settings_values(args), spell=lambda name: settings.FLAGS[name].name)
        for name, own in _OWN.items():
            if own.rule is not None and hasattr(args, name):
                own.rule(own.flag.name, getattr(args, name))
    except ParameterError as exc:
        return str(exc)
    if args.resume and args.checkpoint is None:
        return "--resume needs --checkpoint PATH, the file to resume from"
    if args.json == STDOUT and args.html == STDOUT:
        return "--json - and --html - cannot both write to stdout; give one of them a file name"
    return None


def check_threads(args) -> str | None:
    """Why ``--threads`` cannot work (commands whose other options need no check), or None."""
    own = _OWN["threads"]
    try:
        own.rule(own.flag.name, args.threads)
    except ParameterError as exc:
        return str(exc)
    return None


def run_flags(args, defaults: dict) -> list[str]:
    """The options of ``args`` that change the certificate and differ from the command's ``defaults``
    (the reproduce command's flags), in :data:`ORDER`, then the command's other settings."""
    flags = []
    for name in (*ORDER, *(n for n in settings.FLAGS if n not in ORDER)):
        reproduce = _OWN[name].reproduce if name in _OWN else name in settings.REPRODUCED
        if not reproduce or not hasattr(args, name):
            continue
        flag, shared = _option(name)
        value = getattr(args, name)
        if value is not None and value != defaults.get(name, shared):
            flags += flag_words(flag, value)
    return flags
