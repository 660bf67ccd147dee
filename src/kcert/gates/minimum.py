"""The fewest replicates behind each gate's PASS (docs/verdicts.md, "Too few replicates").

A PASS says "not detected under this probe"; it means something only if the run could have
detected what the gate looks for. Below a gate's minimum it could not, so the gate WARNs instead
of PASSing (a FAIL stays a FAIL: evidence is evidence at any R) and names the diagnostic
``too_few_replicates`` with the minimum and why. Every gate's minimum lives here:

- **bias**: the replicates that detect, with the gate's own power (0.8) at its own z* (5), a bias
  as large as the per-replicate noise (standardized effect rho = 1): 47 replicates at the defaults
  (``(z* + z_power)**2`` = 35 with the normal's tail; z* is a Student t quantile at the run's R, 5.8 at
  R = 47: :func:`kcert.stats.power.critical_z`); the run then covers a horizon of at least one call (see
  :func:`kcert.stats.power.horizon_covered`). At R = 8 a bias must be 7 noise standard deviations to be
  seen with that power, at R = 2 about 785,000 (|z| then follows Student's t with one degree of freedom,
  a Cauchy tail).
- **variance**: the tail model needs ``min_exceedances`` excesses (10) over the 0.90 quantile of each
  side's positive errors: ``min_exceedances / (1 - threshold_quantile)`` = 100 replicates at the
  defaults. Below it there is no tail to extrapolate to the horizon, and "prod within one harm unit
  in every replicate" rests on too few replicates to say anything about a 1 - 1/T quantile.

The algebra gate does not run replicates: its identity test draws a fixed number of points.
"""

from __future__ import annotations

import functools

from ..diagnostics import Code, Diagnostic, diagnostic
from ..stats import power
from ..verdict import Verdict

BIAS_REFERENCE_EFFECT = 1.0  # rho the bias gate must be able to see before it may PASS


@functools.lru_cache(maxsize=16)  # asked for every output at every look; a search over the critical value
def bias_minimum(z_star: float, power_level: float) -> int:
    """Replicates behind a bias PASS: ``rho = BIAS_REFERENCE_EFFECT`` detected with ``power_level`` at ``z_star``."""
    return power.replicates_needed(BIAS_REFERENCE_EFFECT ** -2, z_star, power_level)


def judge_minimum(gate: str, verdict: Verdict, replicates: int, minimum: int, why: str
                  ) -> tuple[Verdict, Diagnostic | None]:
    """A gate's verdict under its minimum: below ``minimum`` replicates a PASS becomes WARN and the
    ``too_few_replicates`` diagnostic says why (``why``: what the minimum lets the gate see); a FAIL
    stays FAIL without it."""
    if replicates >= minimum or verdict is Verdict.FAIL:
        return verdict, None
    return Verdict.worst([verdict, Verdict.WARN]), diagnostic(Code.TOO_FEW_REPLICATES,
        f"{gate} gate: R = {replicates} is below the {minimum} replicates behind a PASS ({why})",
    )


def variance_minimum(min_exceedances: int, threshold_quantile: float) -> int:
    """Replicates behind a variance PASS: enough for ``min_exceedances`` over the threshold quantile."""
    return int(round(min_exceedances / (1.0 - threshold_quantile)))
