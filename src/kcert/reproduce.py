"""Numbers in a reproduce command, printed so that running the command gives the same certificate.

``f"{x:g}"`` keeps six significant digits: a horizon of 1234567.8 would be recorded as 1.23457e+06 and
the printed command would certify at another horizon. Every entry point (CLI, library, pytest plugin)
prints its numbers through :func:`exact_number`."""

from __future__ import annotations


def exact_number(x) -> str:
    """Short (``625000``) when that is exact, else every digit (``1234567.8``); a value that is not a
    number as it is (certify rejects it with its own message)."""
    try:
        short = f"{x:g}"
        return short if float(short) == x else repr(float(x))
    except (TypeError, ValueError):
        return repr(x)
