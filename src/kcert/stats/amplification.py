"""Per-replicate error amplification K of prod over ref against the oracle (docs/method.md, "Gate 3").

``E_prod <= K * E_ref + eps`` solved for the smallest K; eps (one true ULP at the output's peak)
sits on the right-hand side, never in the denominator.
"""

from __future__ import annotations

import numpy as np


def amplification_ratios(e_prod, e_ref, eps) -> np.ndarray:
    """K per replicate. 0: both within eps of the oracle (trivially aligned), or prod within eps.
    inf: ref exact (or finite) where prod is not within eps and ref is (a FAIL by itself).
    nan: both prod and ref non-finite against a finite oracle: no ratio exists; callers count it.
    """
    e_prod = np.asarray(e_prod, np.float64)
    e_ref = np.asarray(e_ref, np.float64)
    eps = np.broadcast_to(np.asarray(eps, np.float64), e_prod.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.maximum(0.0, (e_prod - eps) / e_ref)
    k = np.where(e_prod <= eps, 0.0, k)
    k = np.where((e_ref == 0) & (e_prod > eps), np.inf, k)
    k = np.where(np.isinf(e_prod) & np.isfinite(e_ref), np.inf, k)
    k = np.where(np.isinf(e_prod) & np.isinf(e_ref), np.nan, k)
    return k
