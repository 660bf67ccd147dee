"""Which certificates more replicates would decide: a WARN given only because the variance gate's looks ran out
before it decided (docs/method.md, "Stopping" and "Raising the cap after the last look"). ``kcert certify`` and
``kcert model`` print the command that lets such looks go on (:mod:`kcert.commands.settle`); ``certify_model``
lets them go on itself (:mod:`kcert.model.settle`)."""

from __future__ import annotations

from collections.abc import Callable

from .errors import ParameterError
from .parameters import doubles_from
from .verdict import Verdict


def lack_of_evidence(cert) -> int | None:
    """The replicates of the last look when ``cert`` (a :class:`kcert.Certificate`) WARNs only because the variance
    gate's looks ran out before it decided: every other gate PASSes (or SKIPPED with the user's acceptance) and no
    check around the gates holds the verdict (a failed shape sweep, an adequacy fake not FAILed); else None."""
    from .gates.variance import undecided_at
    from .results.gates import VARIANCE

    if cert.verdict is not Verdict.WARN:
        return None
    if any(v is not Verdict.PASS and g not in cert.accepted_skips for g, v in cert.gates.items()
           if g != VARIANCE.name):
        return None
    if (cert.shape_sweep is not None and cert.shape_sweep.failed) or (
            cert.adequacy is not None and cert.adequacy.blocks_pass):
        return None
    return undecided_at(cert.variance)


def settle_cap(settle, replicates: int, max_replicates: int, given_cap: int | None, where: str,
               spell: Callable[[str], str] = str) -> int | None:
    """The cap a held-back row goes on to, or None when rows do not go on. ``settle``: None (the default: 4 times
    the cap when the caller set no ``max_replicates``, whose cap is a cap; else off), True (4 times the cap),
    False (off) or a number of replicates; ``max_replicates`` the run's cap (``given_cap`` as the caller gave it,
    None when defaulted). The looks of both plans must double from R: the cap R times a power of 2, and the
    settle cap such a multiple above it. ``where`` and ``spell`` (a parameter's name as the caller spells it: a
    command line's flags) word the errors."""
    if settle is None:
        settle = given_cap is None
    if settle is False:
        return None
    if settle is True:
        cap = 4 * max_replicates
    elif isinstance(settle, int) and not isinstance(settle, bool):
        cap = settle
    else:
        raise ParameterError(f"{where}: {spell('settle')} must be True, False, None or a number of replicates, "
                             f"got {settle!r}")
    if not doubles_from(replicates, max_replicates):
        raise ParameterError(f"{where}: rows held back cannot go on past {spell('max_replicates')} {max_replicates}: "
                             f"it is not {spell('replicates')} ({replicates}) times a power of 2, so no larger cap plans "
                             f"its looks; turn {spell('settle')} off, or give such a cap")
    if cap <= max_replicates or not doubles_from(replicates, cap):
        raise ParameterError(f"{where}: {spell('settle')} must be {spell('max_replicates')} ({max_replicates}) times a "
                             f"power of 2 above it (e.g. {4 * max_replicates}), got {cap}")
    return cap


__all__ = ["lack_of_evidence", "settle_cap"]
