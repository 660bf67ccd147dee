"""Null calibration arithmetic: false-alarm rates of a threshold over known-good outputs and the
threshold a family would want (issue 4, item 5). Pure numpy/scipy; kcert.calibration runs the
controls and feeds the numbers in.

A known-good output is a null draw: any WARN or FAIL it gets is a false alarm. The variance
gate's WARN line is the only threshold a family can move without touching the method, so the
proposal picks the lowest line of a fixed ladder whose null false-alarm rate stays at or under a
target. A rate measured on n outputs is itself uncertain: with no alarm in n, the one-sided 95 %
Clopper-Pearson bound is 1 - 0.05**(1/n) (19 % at n = 14), so the bound is reported beside the
rate and a proposal resting on few outputs says so through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

LADDER = (2.0, 3.0, 5.0)  # candidate WARN lines for U; the shipped default is the first
TARGET_RATE = 0.05  # the null false-alarm rate a WARN line may have
CONFIDENCE = 0.95  # of the reported upper bound on a rate


def rate_upper_bound(alarms: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Clopper-Pearson upper bound on a rate observed as ``alarms`` in ``n`` (1.0 when n = 0)."""
    if n < 0 or not 0 <= alarms <= max(n, 0):
        raise ValueError(f"need 0 <= alarms <= n, got alarms={alarms!r}, n={n!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    if n == 0 or alarms == n:
        return 1.0
    return float(beta.ppf(confidence, alarms + 1, n - alarms))


@dataclass(frozen=True)
class Rate:
    """``alarms`` of ``n`` null outputs, with the rate and its one-sided upper bound."""

    alarms: int
    n: int

    @property
    def rate(self) -> float:
        return self.alarms / self.n if self.n else float("nan")

    @property
    def upper(self) -> float:
        return rate_upper_bound(self.alarms, self.n)

    def to_dict(self) -> dict:
        rate = self.rate
        return {"alarms": self.alarms, "n": self.n, "rate": rate if self.n else None, "upper_95": self.upper}


def exceedances(values, line: float) -> Rate:
    """How many of ``values`` lie above ``line``; None (no bound was computed) never exceeds."""
    u = np.array([np.nan if v is None else v for v in values], np.float64)
    # nan > line is False: an output without U was not judged against the line
    return Rate(int(np.sum(u > line)), int(u.size))


@dataclass(frozen=True)
class WarnLineProposal:
    """The WARN line a family's null U sample supports.

    ``structural``: null WARN/FAIL that no WARN line removes (a rejected bounded tail refuses
    PASS, too few positive K for a fit, undefined or infinite K, a FAIL); ``by_line``: the outputs
    that are not structural alarms and whose U is above each ladder line (the alarms the line
    itself makes), both over all outputs, so their sum is the rate of WARN or worse at that line.
    ``proposal`` is the lowest ladder line whose own rate is <= ``target``, None when none is."""

    by_line: dict[float, Rate]
    structural: Rate
    default: float
    target: float
    proposal: float | None

    @property
    def default_rate(self) -> Rate:
        return self.by_line[self.default]

    @property
    def proposal_rate(self) -> Rate | None:
        return None if self.proposal is None else self.by_line[self.proposal]

    @property
    def holds(self) -> bool:
        """The shipped line meets the target on this sample."""
        return self.proposal == self.default

    def to_dict(self) -> dict:
        return {
            "default": self.default,
            "target": self.target,
            "proposal": self.proposal,
            "holds": self.holds,
            "by_line": {f"{line:g}": r.to_dict() for line, r in self.by_line.items()},
            "structural": self.structural.to_dict(),
        }


def propose_warn_line(upper_bounds, structural, default: float = LADDER[0], ladder=LADDER,
                      target: float = TARGET_RATE) -> WarnLineProposal:
    """Choose the WARN line from ``ladder`` (ascending) for a null sample of U (``upper_bounds``,
    None where the gate computed none) with ``structural`` flags per output."""
    ladder = tuple(float(x) for x in ladder)
    if not ladder or list(ladder) != sorted(set(ladder)):
        raise ValueError(f"ladder must be a non-empty strictly increasing sequence, got {ladder!r}")
    if float(default) not in ladder:
        raise ValueError(f"the default line {default!r} must be on the ladder {ladder!r}")
    if not 0.0 <= target < 1.0:
        raise ValueError(f"target must lie in [0, 1), got {target!r}")
    upper_bounds = list(upper_bounds)
    flags = np.asarray(list(structural), bool)
    if flags.size != len(upper_bounds):
        raise ValueError(f"{len(upper_bounds)} upper bounds but {flags.size} structural flags")
    # a structural alarm stays whatever the line: the line's own alarms are counted on the other outputs
    # (over every output, so that structural + line = the WARN-or-worse rate at that line)
    free = [None if flag else u for u, flag in zip(upper_bounds, flags)]
    by_line = {line: exceedances(free, line) for line in ladder}
    # an empty sample supports nothing: no line is shown to meet the target
    proposal = next((line for line in ladder if by_line[line].n and by_line[line].rate <= target), None)
    return WarnLineProposal(by_line, Rate(int(flags.sum()), int(flags.size)), float(default), float(target), proposal)
