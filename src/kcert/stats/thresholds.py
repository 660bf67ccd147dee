"""The decision thresholds of the bias gate (Gate 2) and the variance gate (Gate 3), in one place.

Pure data (no torch, no numpy): :mod:`kcert.stats.bias` and :mod:`kcert.gates.variance` judge with them,
the certificates keep them, checkpoints fingerprint them field by field (``dataclasses.asdict``: the
field names, defaults and order are part of a checkpoint's identity). docs/method.md ("Defaults and
why") says where each default comes from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ParameterError


@dataclass(frozen=True)
class BiasThresholds:
    """Decision thresholds of the bias gate (docs/method.md, "Gate 2" and "Defaults and why").

    Parameters
    ----------
    z_star : float, default 5.0
        |z| a bucket's mean difference must exceed to be significant.
    ulp_floor : float, default 0.25
        c, in true ULPs (of the harm format) at the bucket's mean reference magnitude; 0.25 separates
        the Gemma (1+w)-in-bf16 defect from single-vs-double rounding and fused epilogues.
    min_standardized_effect : float, optional
        s_min; default the harm boundary T**-0.5 of the horizon (:meth:`s_min`).
    power : float, default 0.8
        The power at which the certificate quotes the smallest detectable effect.
    sign_aligned : bool, default True
        Also test mean((prod - ref) * sign(ref)) per bucket.
    attribution : bool, default True
        Split a bias into prod's and ref's through the oracle (a bias that is ref's is not prod's defect).
    negligible_fraction : float, default 0.25
        prod's own bias under this fraction of c is never prod's defect.
    shared_bias : bool, default True
        With attribution: prod's own bias above c that lies in ref's direction and is no larger than ref's is
        a bias both sides carry (the working precision's), not prod's defect; False FAILs it (the rule before).
    profile_alpha : float or None, default 0.01
        With attribution: an output's bias FAIL becomes a WARN when it lies within ref's own bias profile on the
        output: on every statistic with a FAILing bucket, the swap test (:func:`kcert.stats.bias.profile_swap_p`)
        does not reject at this level and no FAILing bucket's own bias exceeds ``profile_ratio`` times ref's at
        the same rank; on outputs with fewer than log2(1 / alpha) tested buckets (7 at 0.01), too few for the swap
        test, when no FAILing bucket's own bias exceeds ref's at the same rank. None keeps every bucket-wise FAIL
        (docs/method.md, "The working precision's own bias").
    profile_ratio : float, default 2.0
        lambda of ``profile_alpha``'s rule: a FAILing bucket whose own bias is more than this many times ref's at
        the same rank of its profile keeps the output's FAIL, whatever the swap test says (a defect on a few
        buckets, which the swap test cannot see).
    warn_below_floor : bool, default True
        A significant bias under the ULP floor (or prod's own under it) WARNs, the report's rule. False
        PASSes it (its bucket is still reported): for a floor at the harm unit itself, where a bias
        under one ULP of the format is an arrangement of its rounding (``kcert kernelbench``).

    Examples
    --------
    >>> import kcert
    >>> t = kcert.BiasThresholds(z_star=6.0)
    >>> t.ulp_floor, round(t.s_min(625000), 5)
    (0.25, 0.00126)
    """

    z_star: float = 5.0
    ulp_floor: float = 0.25
    min_standardized_effect: float | None = None
    power: float = 0.8
    sign_aligned: bool = True  # also test mean((prod - ref) * sign(ref)) per bucket
    attribution: bool = True  # split a bias into prod's and ref's through the oracle
    # prod's own bias under this fraction of c is never prod's defect: a quarter of the floor, chosen on
    # the tuning half of the controls (correct compiled and fused kernels reach 0.045 ULP, the bias
    # gate's negatives 0.32 ULP and more; docs/method.md, "Defaults and why")
    negligible_fraction: float = 0.25
    warn_below_floor: bool = True
    # prod moved from ref towards the oracle without crossing it: what is left of its own bias ref has too
    shared_bias: bool = True
    # a FAIL within ref's own bias profile WARNs: the working precision's rounding bias on few distinct inputs,
    # which two equally correct implementations carry on different buckets (docs/method.md, "The working
    # precision's own bias": the rule, written before it was tested, and its evidence)
    profile_alpha: float | None = 0.01
    profile_ratio: float = 2.0

    @property
    def profile_min_buckets(self) -> int | None:
        """The fewest tested buckets at which the swap test can reject at ``profile_alpha`` (2**-G <= alpha): an
        output with fewer is judged by its ratios alone. None when the rule is off."""
        if self.profile_alpha is None:
            return None
        return max(1, math.ceil(math.log2(1.0 / self.profile_alpha) - 1e-12))

    def s_min(self, horizon: float) -> float:
        if self.min_standardized_effect is not None:
            return self.min_standardized_effect
        return float(horizon) ** -0.5


# The technical report's rules: raw mean only, c = 1 ULP, no attribution (for comparison tables).
REPORT_RULES = BiasThresholds(ulp_floor=1.0, sign_aligned=False, attribution=False)


@dataclass(frozen=True)
class VarianceThresholds:
    """The variance verdict against the report's lines 2 and 10, on the tail ratio A_T (prod's T-call
    return level of its error, less ``slack`` harm units, over ref's).

    PASS needs U <= warn; FAIL needs the estimate of A_T above ``fail``; anything else WARNs. A bound
    above ``fail`` with an estimate below it is a WARN: evidence of harm, not lack of data, blocks a
    migration (``fail_on="bound"`` restores the report's rule, FAIL when U > fail). U is the
    profile-likelihood upper bound of A_T, one-sided at ``1 - alpha`` over the whole run (``alpha``
    is split evenly over the planned looks); ``alpha = 0.00135`` is the report's 3 sigma. The two tails
    share one shape unless a likelihood-ratio test finds prod's heavier at ``heterogeneity_level``; the
    FAIL line judges the common-shape estimate of A_T unless that test's p is below
    ``separate_fail_level`` (then the separate-shapes estimate).
    ``threshold_quantile`` and ``min_exceedances`` place each side's threshold; ``bootstrap`` resamples
    only feed the report's rule on K, shown beside U for comparison, and the plots' bands. A PASS also
    needs the bound with one shape per side (one-sided at ``1 - separate_alpha``) or the paired bound
    (kcert.stats.paired) and the observed
    ratio of the largest errors at or under ``warn``, and the exact test of the observed range
    (``observed_level``) not to reject (docs/method.md, "Gate 3").

    Parameters
    ----------
    warn, fail : float, default 2.0, 10.0
        The lines on A_T: PASS needs U <= ``warn``; FAIL needs the estimate above ``fail``.
    threshold_quantile : float, default 0.90
        Each side's threshold, a quantile of its positive errors.
    min_exceedances : int, default 10
        Exceedances each side needs for a tail model.
    bootstrap : int, default 1000
        Resamples of the report's rule on K (comparison and plots only).
    alpha : float, default 0.00135
        One-sided error rate of U over the whole run.
    heterogeneity_level : float, default 0.05
        Level of the likelihood-ratio test for prod's tail heavier in shape than ref's.
    fail_on : {"estimate", "bound"}, default "estimate"
        What must exceed ``fail`` for a FAIL.
    slack : float, default 1.0
        Harm units prod may add to its error at no cost (the report's eps).
    separate_fail_level : float, default 0.001
        Below this p of the shape test, FAIL judges the separate-shapes estimate.
    separate_alpha : float, default 0.03
        One-sided level of the bound with one shape per side that a PASS also needs at or under ``warn``
        (split over the planned looks like ``alpha``): it bounds a shape difference the test cannot see.
    observed_level : float, default 0.05
        A PASS also needs the exact test of prod's largest errors above the PASS line at or above this p.
    observed_depth : float, default 0.1
        That test scans the pooled top ``observed_depth * R`` errors.
    rare_confidence : float, default 0.95
        The confidence of the rare-event statement (the rule of three: a rate of about 3/R at 95 %).
    tied_share : float, default 0.5
        A side whose positive errors have fewer distinct values than this share of their count is on a
        lattice: its errors are spread within their cells before the tail fit.

    Raises
    ------
    ParameterError
        ``fail_on`` is neither "estimate" nor "bound".

    Examples
    --------
    >>> import kcert
    >>> kcert.VarianceThresholds(fail_on="bound").fail
    10.0
    >>> kcert.VarianceThresholds(fail_on="upper")
    Traceback (most recent call last):
    ...
    kcert.errors.ParameterError: VarianceThresholds.fail_on must be 'estimate' or 'bound', got 'upper'
    """

    warn: float = 2.0
    fail: float = 10.0
    threshold_quantile: float = 0.90
    min_exceedances: int = 10
    bootstrap: int = 1000
    alpha: float = 0.00135
    heterogeneity_level: float = 0.05
    fail_on: str = "estimate"  # FAIL when A_T's estimate (or, "bound": when U) exceeds ``fail``
    slack: float = 1.0  # harm units prod may add to its error at no cost (the report's eps)
    # FAIL judges the separate-shapes estimate only when the shapes differ beyond doubt (the heterogeneity
    # test's p below this), else the common-shape one: separate fits extrapolate two free shapes
    separate_fail_level: float = 0.001
    # PASS needs the bound with one shape per side under the line too, at this one-sided level over the run:
    # a shape difference the test cannot see at R (prod's tail heavier by xi ~ 0.1-0.2) let 23-61 % of pairs
    # with a true A_T of 2.05 PASS. Chosen on simulation (tuning seeds): the largest level on a grid whose
    # false-PASS rate on the three mismatch laws stays 1 binomial se (400 runs) under 5 % (docs/method.md,
    # "Tuning discipline"); 0.05 gave 3.0-5.0 %, 0.03 gives 0.5-2.5 %
    separate_alpha: float = 0.03
    # PASS needs the observed range not to contradict it: the exact scan test of prod's largest errors at the
    # PASS line (stats/observed.py) at or above this p; the test only holds a PASS back, it never FAILs
    observed_level: float = 0.05
    observed_depth: float = 0.1  # the scan's depth, a share of R: the top of the pooled errors the tails rest on
    rare_confidence: float = 0.95  # the rule of three's confidence (about 3/R)
    # a side's positive errors with fewer distinct values than this share of their count are on a lattice and
    # are spread within their cells before the fit (stats/lattice.py); the tied_exceedances diagnostic's rule
    tied_share: float = 0.5

    def __post_init__(self):
        if self.fail_on not in ("estimate", "bound"):
            raise ParameterError(f"VarianceThresholds.fail_on must be 'estimate' or 'bound', got {self.fail_on!r}")
