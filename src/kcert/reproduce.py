"""The command that reproduces a certificate, printed so that running it gives the same certificate.

Every entry point builds its command here, from the settings' flags and reproduce rules
(:mod:`kcert.settings`): the command line (``kcert certify``, ``kcert demo``) and
:func:`kcert.assert_certified` for a case in a case file through :func:`command_line`; the library
(:func:`kcert.certify`) and :func:`kcert.assert_certified` for a case built in code through
:func:`certify_call`. Their numbers go through :func:`exact_number`: ``f"{x:g}"`` keeps six
significant digits, so a horizon of 1234567.8 would be recorded as 1.23457e+06 and the printed
command would certify at another horizon.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence

from . import settings
from .settings import Flag, Settings


def exact_number(x) -> str:
    """Short (``625000``) when that is exact, else every digit (``1234567.8``); a value that is not a
    number as it is (certify rejects it with its own message)."""
    try:
        short = f"{x:g}"
        return short if float(short) == x else repr(float(x))
    except (TypeError, ValueError):
        return repr(x)


def command_line(words: Sequence[str], *, replicates: int, horizon: float, seed: int,
                 max_replicates: int | None = None, device: str = "cpu", flags: Sequence[str] = ()) -> str:
    """``words`` (the program and what names the case: ``kcert certify FILE --case NAME``, ``kcert demo``),
    then ``--replicates R --horizon T --seed S``, ``--max-replicates M`` when set, ``--device D`` off the
    CPU, and the command's own ``flags``; quoted for a POSIX shell.

    >>> command_line(["kcert", "demo"], replicates=1024, horizon=1234567.8, seed=0)
    'kcert demo --replicates 1024 --horizon 1234567.8 --seed 0'
    """
    spelled = settings.FLAGS  # the command's own ``flags`` come last
    line = [*words, *flag_words(spelled["replicates"], replicates), *flag_words(spelled["horizon"], float(horizon)),
            *flag_words(spelled["seed"], seed)]
    if max_replicates is not None:
        line += flag_words(spelled["max_replicates"], max_replicates)
    if device != "cpu":
        line += flag_words(spelled["device"], device)
    return shlex.join([*line, *flags])


def certify_call(case: str, *, replicates: int, horizon: float, seed: int, max_replicates: int | None = None,
                 device: str = "cpu", extras: Mapping[str, object] | None = None) -> str:
    """The Python call ``kcert.certify(CASE, replicates=R, horizon=T, seed=S, ...)``: ``case`` is the
    text that stands for the case (``<rms>``), then ``max_replicates`` when set, ``device`` off the
    CPU and ``extras`` (other keyword arguments, written with ``repr``).

    >>> certify_call("<rms>", replicates=1024, horizon=1234567.8, seed=0)
    'kcert.certify(<rms>, replicates=1024, horizon=1234567.8, seed=0)'
    """
    args = [case, f"replicates={replicates}", f"horizon={exact_number(horizon)}", f"seed={seed}"]
    if max_replicates is not None:
        args.append(f"max_replicates={max_replicates}")
    if device != "cpu":
        args.append(f"device={device!r}")
    args += [f"{k}={v!r}" for k, v in (extras or {}).items()]
    return f"kcert.certify({', '.join(args)})"



def flag_words(flag: Flag, value) -> list[str]:
    """How ``value`` is written on a command line under ``flag`` (toggles as ``--x`` / ``--no-x``)."""
    if flag.kind == "toggle":
        return [flag.name if value else "--no-" + flag.name.removeprefix("--")]
    if flag.kind == "switch":
        return [flag.name] if value else []
    return [flag.name, exact_number(value) if isinstance(value, float) else str(value)]


class _Code(str):
    """Text written into a call as it is (``repr`` would quote it)."""

    def __repr__(self) -> str:
        return str(self)


def library_call(case_name: str, s: Settings) -> str:
    """The ``kcert.certify(...)`` call that gives the certificate of checked settings ``s``:
    replicates, horizon and seed, then every setting that changes the certificate (``reproduce="both"``)
    and whose value is not the default (thresholds written as the ``kcert`` objects that build them)."""
    default = Settings().check()
    extras = {}
    for f in settings.FIELDS:
        value = getattr(s, f.name)
        if f.metadata["reproduce"] != "both" or value == getattr(default, f.name):
            continue
        extras[f.name] = _Code(f"kcert.{value!r}") if dataclasses.is_dataclass(value) else value
    return certify_call(f"<{case_name}>", replicates=s.replicates, horizon=s.horizon, seed=s.seed,
                        max_replicates=None if s.max_replicates == 4 * s.replicates else s.max_replicates,
                        device=str(s.device), extras=extras)
