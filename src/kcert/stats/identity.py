"""The identity test's arithmetic (docs/method.md, "Gate 1"): how much a real-mode discrepancy shrinks
from float32 to float64. Rounding shrinks by ~2**29; an algebraic difference does not."""

from __future__ import annotations

import math

FLOAT32_ROUNDING = 2.0**-24  # float32 unit roundoff: a float32 run that agrees exactly still allows one rounding
ROUNDING_SHRINK = 2.0**19  # half the 2**29 gap in orders of magnitude, leaving room for conditioning
FAIL_FLOOR = 1e-9  # relative float64 discrepancy from which a non-shrinking difference FAILs


def shrink(discrepancy_float64: float, discrepancy_float32: float) -> float:
    """Ratio of the float32 to the float64 relative discrepancy (inf when float64 agrees exactly)."""
    if discrepancy_float64 == 0:
        return math.inf
    return max(discrepancy_float32, FLOAT32_ROUNDING) / discrepancy_float64
