"""The domain rules of a certification's parameters, in one place and without torch.

:meth:`kcert.settings.Settings.check` applies them to :func:`kcert.certify`'s arguments and the
command line applies the same rules to its options before anything heavy is imported (a bad
``-R 0`` costs 0.1 s, not the seconds of importing torch and the case file). Each check returns the
checked value or raises :class:`~kcert.errors.ParameterError` naming the parameter, the rule and
the value.
"""

from __future__ import annotations

import math

from .errors import ParameterError

MIN_REPLICATES = 2


def integer(name: str, value, minimum: int) -> int:
    """``value`` as an integer >= ``minimum`` (a bool is not an integer here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def flag(name: str, value, none: bool = False) -> None:
    """``value`` must be True or False (or None when ``none``)."""
    if not isinstance(value, bool) and not (none and value is None):
        raise ParameterError(f"{name} must be {'None, ' if none else ''}True or False, got {value!r}")


def horizon(name: str, value) -> float:
    """The horizon T: a finite number > 1 (kernel calls)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number > 1, got {value!r}") from None
    if not math.isfinite(number) or number <= 1:
        raise ParameterError(f"{name} must be a finite number > 1, got {number!r}")
    return number


def seconds(name: str, value, allow_zero: bool = False) -> float:
    """A duration in seconds: a finite number > 0 (>= 0 when ``allow_zero``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number of seconds > 0, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise ParameterError(f"{name} must be a finite number of seconds {'>=' if allow_zero else '>'} 0, "
                             f"got {value!r}")
    return number


def replicates(name: str, value, max_name: str | None = None, max_value=None) -> tuple[int, int]:
    """The first look's replicates (>= 2) and the cap of the adaptive looks (default 4 x R, >= R)."""
    r = integer(name, value, MIN_REPLICATES)
    cap = 4 * r if max_value is None else max_value
    integer(max_name or "max_replicates", cap, r)
    return r, cap


def doubles_from(replicates: int, cap: int) -> bool:
    """Whether ``cap`` is ``replicates`` times a power of 2: the looks R, 2R, 4R, ... reach it without a step cut
    short, so a larger cap's looks begin with them (docs/method.md, "Raising the cap after the last look")."""
    doublings, rest = divmod(cap, replicates)
    return rest == 0 and doublings >= 1 and not doublings & (doublings - 1)


def ulp_floor(name: str, value) -> float:
    """The bias gate's floor in ULPs: a finite number >= 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a finite number >= 0, got {value!r}") from None
    if not (math.isfinite(number) and number >= 0):
        raise ParameterError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def byte_count(name: str, value) -> int | None:
    """A number of bytes: an integer >= 1, or None (the default)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ParameterError(f"{name} must be an integer number of bytes >= 1 or None, got {value!r}")
    return value
