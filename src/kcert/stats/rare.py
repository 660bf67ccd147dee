"""What R replicates cannot see: the rule of three (docs/verdicts.md, "What a PASS does not promise").

A defect that strikes a fraction ``p`` of calls (a race, a slow path taken on rare inputs) shows up in
at least one of R independent replicates with probability ``1 - (1 - p)^R``. Below the rate at which
that probability reaches the confidence (``-ln(1 - confidence) / R``, about ``3 / R`` at 95 %: the rule
of three), a run of R replicates may show nothing, and no statistic of those replicates, tail model or
not, can tell such a defect from its absence. Over a horizon of T calls that rate still means about
``p T`` calls meeting the defect.

This module imports the standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RareEventLimit", "rare_event_limit"]


@dataclass(frozen=True)
class RareEventLimit:
    """The smallest per-call rate of a rare defect that R replicates would have shown.

    Attributes
    ----------
    replicates : int
        R, the replicates judged.
    confidence : float
        The probability of at least one occurrence in R replicates at ``rate``.
    rate : float
        ``1 - (1 - confidence)^(1/R)`` (about ``3/R`` at 95 %): rarer defects may not have occurred.
    horizon : float
        T, the calls the certificate speaks for.
    calls_at_horizon : float
        ``rate * T``: how many of T calls meet a defect at that rate.
    """

    replicates: int
    confidence: float
    rate: float
    horizon: float
    calls_at_horizon: float


def rare_event_limit(replicates: int, horizon: float, confidence: float = 0.95) -> RareEventLimit:
    """The rule of three for ``replicates`` independent replicates and a horizon of ``horizon`` calls.

    Examples
    --------
    >>> r = rare_event_limit(1024, 6.25e5)
    >>> round(r.rate * 1024, 2), round(r.calls_at_horizon)
    (2.99, 1826)
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if replicates < 1:
        return RareEventLimit(replicates=int(replicates), confidence=float(confidence), rate=1.0,
                              horizon=float(horizon), calls_at_horizon=float(horizon))
    rate = -math.expm1(math.log1p(-confidence) / replicates)
    return RareEventLimit(replicates=int(replicates), confidence=float(confidence), rate=rate, horizon=float(horizon),
                          calls_at_horizon=rate * float(horizon))
