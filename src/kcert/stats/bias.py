"""Bias test per bucket (docs/method.md, "Gate 2"): is prod - ref coherently non-zero?

Input: per-bucket moments over replicates of one statistic (the replicate is the unit),
the bucket's true ULP, and optionally the biases of prod and ref against the float64 oracle
for attribution (docs/method.md, "Gate 2"). Output: z, standardized effect, effect in ULP and a
verdict per bucket.

Significance: |z| above the critical value of :func:`kcert.stats.power.critical_z`, the Student t(n - 1)
quantile (n: the bucket's replicates) whose two-sided tail is the normal's at z*, so a bucket's false
signal rate is 2 Phi(-z*) at every R (z divides by the sample sd: beyond z* itself it is 1.18x that rate
at R = 1024 and 2700x at R = 8). "|z| > z*" below means |z| above that critical value. A zero-spread
bucket (|z| infinite) is significant from :func:`kcert.stats.power.constant_run_minimum` replicates on (22 at
z* = 5): below it a constant run is a chance a sign test cannot reject.

Rules, per bucket and statistic:
- FAIL when |z| > z*, |mean|/s > s_min and |mean| > c * ulp, and prod's own bias against the
  oracle is above the ULP floor too (the bias is not ref's alone);
- PASS (attributed to ref) when significant but prod's own bias against the oracle is within the
  ULP floor and no larger than ref's: prod is at least as accurate as ref in this bucket, the
  difference is the reference's rounding, not a migration defect;
- PASS (shared with ref) when prod's own bias is above the floor but has ref's sign and is no larger
  than ref's: prod moved from ref towards the oracle without crossing it, and what is left of its own
  bias is a bias ref carries too (the working precision's, e.g. a gradient made by cancellation);
- WARN when otherwise significant (|z| > z*) but under the effect or ULP floor;
- PASS otherwise: "not detected", never "proved equal".
Then, per output (:func:`against_ref_profile`, the profile rule): its bucket-wise FAILs become WARNs where they lie
within ref's own bias profile on the output (the swap test does not reject and no FAILing bucket is beyond lambda
times ref's own bias at its rank; on fewer than log2(1 / alpha) tested buckets, no FAILing bucket above ref's own
bias at its rank): the working precision's rounding bias, which two equally correct implementations carry on
different buckets where few distinct inputs make it reach the floor.
s == 0 is its own case: all differences identical; zero mean is PASS, a non-zero constant is
a bias with no noise, judged by the ULP floor alone.
Without an oracle there is no attribution and the rules are the report's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .power import constant_run_minimum, critical_z
from .thresholds import REPORT_RULES, BiasThresholds  # noqa: F401  (their home before kcert.stats.thresholds)

PASS, WARN, FAIL = 0, 1, 2

# Reasons attached to each bucket verdict (integer codes keep results array-shaped).
NOT_SIGNIFICANT = 0
UNDER_EFFECT_FLOOR = 1
UNDER_ULP_FLOOR = 2
ATTRIBUTED_TO_REF = 3
DETECTED = 4
IDENTICAL = 5
UNTESTED = 6
PROD_UNDER_FLOOR = 7
SHARED_WITH_REF = 8
WITHIN_REF_PROFILE = 9  # a bucket-wise FAIL of an output whose FAILs lie within ref's own bias profile: WARN
REF_SIDE = (ATTRIBUTED_TO_REF, SHARED_WITH_REF)  # a significant bias judged ref's, not prod's: PASS
REASON_TEXT = {
    NOT_SIGNIFICANT: "not significant",
    UNDER_EFFECT_FLOOR: "significant, standardized effect under s_min",
    UNDER_ULP_FLOOR: "significant, under the ULP floor",
    ATTRIBUTED_TO_REF: "significant, but not prod's: prod's own bias against the oracle is within the floor and no "
                       "larger than ref's, insignificant, or negligible",
    DETECTED: "coherent bias",
    IDENTICAL: "all differences zero",
    UNTESTED: "fewer than 2 replicates populated this bucket",
    PROD_UNDER_FLOOR: "above the floor against ref, but prod's own bias against the oracle is under the ULP floor",
    SHARED_WITH_REF: "significant, but shared: prod's own bias against the oracle is above the floor, in ref's "
                     "direction and no larger than ref's",
    WITHIN_REF_PROFILE: "coherent bias, but within ref's own bias profile on this output: prod's profile no more "
                        "biased than ref's by the swap test, and no bucket's own bias more than lambda times ref's at "
                        "the same rank (on an output too small for the swap test: none above ref's at its rank)",
}
# Their names in the JSON report (docs/json-schema.md, "bias"): the constants' names in lower case.
REASON_CODE = {
    NOT_SIGNIFICANT: "not_significant",
    UNDER_EFFECT_FLOOR: "under_effect_floor",
    UNDER_ULP_FLOOR: "under_ulp_floor",
    ATTRIBUTED_TO_REF: "attributed_to_ref",
    DETECTED: "detected",
    IDENTICAL: "identical",
    UNTESTED: "untested",
    PROD_UNDER_FLOOR: "prod_under_floor",
    SHARED_WITH_REF: "shared_with_ref",
    WITHIN_REF_PROFILE: "within_ref_profile",
}


@dataclass(frozen=True)
class BucketTestResult:
    """One statistic (raw or sign-aligned mean difference) tested over every bucket."""

    statistic: str
    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    z: np.ndarray
    standardized_effect: np.ndarray
    effect_ulp: np.ndarray
    prod_bias_ulp: np.ndarray | None
    ref_bias_ulp: np.ndarray | None
    verdict: np.ndarray
    reason: np.ndarray
    critical: np.ndarray  # per bucket: the |z| its significance needs (Student t at its count; inf untested)

    @property
    def significant(self) -> np.ndarray:
        """Per bucket: |z| above its critical value (a NaN z counts as 0)."""
        return np.abs(np.nan_to_num(self.z)) > self.critical

    @property
    def tested(self) -> int:
        return int(np.sum(self.count >= 2))

    def confidence_interval(self, level: float = 0.999) -> tuple[np.ndarray, np.ndarray]:
        """Normal-theory interval for each bucket's mean difference."""
        from scipy.stats import norm

        half = norm.ppf(0.5 + level / 2) * self.std / np.sqrt(np.maximum(self.count, 1))
        return self.mean - half, self.mean + half


def judge_buckets(
    statistic: str,
    count: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    ulp: np.ndarray,
    thresholds: BiasThresholds,
    horizon: float,
    prod_bias: np.ndarray | None = None,
    ref_bias: np.ndarray | None = None,
    prod_bias_z: np.ndarray | None = None,
) -> BucketTestResult:
    """Apply the three FAIL rules (and attribution) to every bucket of one statistic."""
    count = np.asarray(count, np.int64)
    mean = np.asarray(mean, np.float64)
    std = np.asarray(std, np.float64)
    ulp = np.asarray(ulp, np.float64)
    tested = count >= 2
    # A spread this small against the mean is float64 noise from accumulating identical values.
    zero_var = tested & ((std == 0) | (std <= 1e-12 * np.abs(mean)))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(zero_var, np.sign(mean) * np.inf, np.sqrt(count) * mean / std)
        rho = np.where(zero_var, np.where(mean == 0, 0.0, np.inf), np.abs(mean) / std)
        effect_ulp = np.abs(mean) / ulp
    z = np.where(zero_var & (mean == 0), 0.0, z)
    z = np.where(tested, z, 0.0)
    rho = np.where(tested, rho, 0.0)

    critical = critical_z(count, thresholds.z_star)
    # a constant non-zero difference has no spread to scale by: at small R it is significant only where a run
    # of one sign that long is as rare as the stated rate (power.constant_run_minimum)
    critical = np.where(zero_var & (mean != 0) & (count < constant_run_minimum(thresholds.z_star)), np.inf, critical)
    significant = tested & (np.abs(z) > critical)
    above_effect = rho > thresholds.s_min(horizon)
    above_ulp = effect_ulp > thresholds.ulp_floor
    prod_bias_ulp = ref_bias_ulp = None
    prod_clear = np.zeros_like(significant)  # prod within the floor of the oracle
    prod_no_worse = np.zeros_like(significant)  # ... and no more biased than ref
    shared = np.zeros_like(significant)  # prod above the floor, but its bias is a part of ref's
    if thresholds.attribution and prod_bias is not None and ref_bias is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            prod_bias_ulp = np.asarray(prod_bias, np.float64) / ulp
            ref_bias_ulp = np.asarray(ref_bias, np.float64) / ulp
        prod_clear = np.abs(prod_bias_ulp) <= thresholds.ulp_floor
        # the bias is not prod's when prod's own bias is no larger than ref's, not significant by
        # itself (at the bucket's critical value: the oracle rows hold at most its replicates), or
        # negligible (a quarter of the floor: the rounding bias correct kernels show)
        own_insignificant = (np.zeros_like(prod_clear) if prod_bias_z is None
                             else np.abs(np.asarray(prod_bias_z, np.float64)) <= critical)
        negligible = np.abs(prod_bias_ulp) <= thresholds.negligible_fraction * thresholds.ulp_floor
        no_larger = np.abs(prod_bias_ulp) <= np.abs(ref_bias_ulp)
        prod_no_worse = prod_clear & (no_larger | own_insignificant | negligible)
        if thresholds.shared_bias:
            # prod - ref = p - r with p, r of one sign and |p| <= |r|: the migration moves the output towards
            # the oracle and stops short of it; p is a bias ref carries too, not one prod brings
            shared = ~prod_clear & no_larger & (np.sign(prod_bias_ulp) == np.sign(ref_bias_ulp))

    reason = np.full(mean.shape, NOT_SIGNIFICANT, np.int8)
    reason[significant & ~above_effect] = UNDER_EFFECT_FLOOR
    reason[significant & above_effect & ~above_ulp] = UNDER_ULP_FLOOR
    detected = significant & above_effect & above_ulp
    reason[detected & prod_clear] = PROD_UNDER_FLOOR
    reason[detected & ~prod_clear] = DETECTED
    reason[significant & prod_no_worse] = ATTRIBUTED_TO_REF
    reason[significant & shared] = SHARED_WITH_REF
    reason[zero_var & (mean == 0)] = IDENTICAL
    reason[~tested] = UNTESTED

    review = significant & ~np.isin(reason, REF_SIDE)
    if not thresholds.warn_below_floor:
        review &= ~np.isin(reason, (UNDER_ULP_FLOOR, PROD_UNDER_FLOOR))
    verdict = np.where(reason == DETECTED, FAIL, np.where(review, WARN, PASS)).astype(np.int8)
    return BucketTestResult(
        statistic=statistic,
        count=count,
        mean=mean,
        std=std,
        z=z,
        standardized_effect=rho,
        effect_ulp=effect_ulp,
        prod_bias_ulp=prod_bias_ulp,
        ref_bias_ulp=ref_bias_ulp,
        verdict=verdict,
        reason=reason,
        critical=np.asarray(critical, np.float64).reshape(mean.shape),
    )


def rank_matched_ref_bias(prod_bias_ulp: np.ndarray, ref_bias_ulp: np.ndarray, tested: np.ndarray) -> np.ndarray:
    """Per bucket: ref's own bias against the oracle (magnitude, in ULP) at the rank prod's own bias holds in
    prod's profile over the output's tested buckets: for the bucket with prod's k-th largest own bias, ref's
    k-th largest (NaN where prod's is not finite or untested; 0 past ref's finite buckets).

    One of the profile rule's two figures (docs/method.md, "Gate 2", "The working precision's own bias"). The gate
    compares the two sides bucket by bucket; two equally correct roundings of one computation put their rounding biases
    on different buckets, so where the data make those biases reach the floor one side FAILs on buckets the
    other left alone. The ratio of prod's own bias to this value says whether prod's profile is beyond ref's
    (a ratio far above 1) or ref carries as much at the same rank (near or below 1)."""
    prod = np.abs(np.asarray(prod_bias_ulp, np.float64))
    ref = np.abs(np.asarray(ref_bias_ulp, np.float64))
    tested = np.asarray(tested, bool)
    pool = np.sort(ref[tested & np.isfinite(ref)])[::-1]
    ranked = tested & np.isfinite(prod)
    order = np.argsort(-np.where(ranked, prod, -np.inf), kind="stable")  # prod's largest first
    matched = np.zeros(int(ranked.sum()))  # ranks past ref's finite buckets meet a bias of 0
    shared = min(matched.size, pool.size)
    matched[:shared] = pool[:shared]
    out = np.full(prod.shape, np.nan)
    out[order[:matched.size]] = matched
    return out


def ref_profile_ratio(test: BucketTestResult) -> np.ndarray:
    """Per bucket of one statistic: |prod's own bias| over ref's own bias at the same rank of its profile
    (:func:`rank_matched_ref_bias`); NaN without attribution, inf where ref's at that rank is 0."""
    if test.prod_bias_ulp is None or test.ref_bias_ulp is None:
        return np.full(test.mean.shape, np.nan)
    matched = rank_matched_ref_bias(test.prod_bias_ulp, test.ref_bias_ulp, test.count >= 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(test.prod_bias_ulp) / matched


# On an output of fewer buckets than the swap test needs, the profile rule asks every FAILing bucket's own bias to
# be at most this many times ref's at the same rank: prod no more biased than ref at any rank of the profile
# (docs/method.md, "The working precision's own bias": outputs of fewer than 7 buckets).
FEW_BUCKETS_RATIO = 1.0


@dataclass(frozen=True)
class StatisticProfile:
    """One statistic's FAILing buckets against ref's own bias profile on an output."""

    statistic: str
    tested: int  # the output's tested buckets under this statistic
    highest_ratio: float  # the largest ratio over its FAILing buckets (NaN/inf where one has no finite ratio)
    swap_p: float  # profile_swap_p over the tested buckets


@dataclass(frozen=True)
class RefProfileEvidence:
    """An output's FAILing buckets set against ref's own bias profile (docs/method.md, "The working precision's own
    bias"), and whether the profile rule turned its FAIL into a WARN (``within``)."""

    buckets: int  # FAILing buckets with a finite ratio, a bucket FAILing on both statistics counted once
    lowest_ratio: float | None  # over those buckets, each at its larger ratio (None: no finite ratio)
    highest_ratio: float | None
    statistics: tuple[StatisticProfile, ...] = ()  # each statistic with a FAILing bucket
    within: bool = False  # the rule (BiasThresholds.profile_alpha) judged the FAILs within ref's profile: WARN
    alpha: float | None = None  # the rule's level, ratio and fewest buckets it was judged at (None: the rule was off)
    ratio_limit: float | None = None
    min_buckets: int | None = None

    @property
    def swap_p(self) -> tuple[tuple[str, float], ...]:
        """(statistic, profile_swap_p) for each statistic with a FAILing bucket."""
        return tuple((s.statistic, s.swap_p) for s in self.statistics)

    def keeps_fail(self, s: StatisticProfile) -> str | None:
        """Why statistic ``s`` keeps the output's FAIL under the rule (None: it does not)."""
        if self.alpha is None:
            return "the rule is off"
        if s.tested < self.min_buckets:  # no swap test can reach alpha: prod no more biased than ref at every rank
            if s.highest_ratio <= FEW_BUCKETS_RATIO:
                return None
            return (f"{s.tested} tested buckets (too few for the swap test) and a bucket at {s.highest_ratio:.3g}x "
                    f"ref's own bias at its rank > {FEW_BUCKETS_RATIO:g} ({s.statistic})")
        if not s.swap_p > self.alpha:
            return f"swap test p = {s.swap_p:.2g} <= {self.alpha:g} ({s.statistic})"
        if not s.highest_ratio <= self.ratio_limit:
            return (f"a bucket at {s.highest_ratio:.3g}x ref's own bias at its rank > {self.ratio_limit:g} "
                    f"({s.statistic})")
        return None


def against_ref_profile(tests, thresholds: BiasThresholds | None = None) -> RefProfileEvidence | None:
    """The ratios (:func:`ref_profile_ratio`) of one output's FAILing buckets and the swap test
    (:func:`profile_swap_p`) of each statistic that has one, and the profile rule's decision under ``thresholds``
    (``profile_alpha``, ``profile_ratio``; None: the rule off): ``within`` when every FAILing statistic has
    attribution and either p > alpha with no FAILing bucket above lambda times ref's at its rank or, on an output
    too small for the swap test, no FAILing bucket above ref's own bias at its rank (:data:`FEW_BUCKETS_RATIO`).
    None when no bucket FAILs or there is no attribution. Computed once per judged output (kcert.gates.bias)."""
    attributed = [t for t in tests if t.prod_bias_ulp is not None and t.ref_bias_ulp is not None]
    failing_tests = [t for t in attributed if np.any(t.verdict == FAIL)]
    if not failing_tests:
        return None
    ratios = np.stack([np.where(t.verdict == FAIL, ref_profile_ratio(t), np.nan) for t in attributed])
    failing = np.any(~np.isnan(ratios), axis=0)
    worst = np.nanmax(ratios[:, failing], axis=0) if failing.any() else np.zeros(0)
    statistics = []
    for t, row in zip(attributed, ratios):  # row: the statistic's ratios, NaN off its FAILing buckets
        if not np.any(t.verdict == FAIL):
            continue
        ratio = row[t.verdict == FAIL]
        highest = float(np.nan if np.any(np.isnan(ratio)) else ratio.max())  # NaN keeps the FAIL: no ratio to judge
        statistics.append(StatisticProfile(statistic=t.statistic, tested=t.tested, highest_ratio=highest,
                                           swap_p=profile_swap_p(t.prod_bias_ulp, t.ref_bias_ulp, t.count >= 2)))
    alpha = None if thresholds is None else thresholds.profile_alpha
    evidence = RefProfileEvidence(
        buckets=int(failing.sum()),
        lowest_ratio=float(worst.min()) if worst.size else None,
        highest_ratio=float(worst.max()) if worst.size else None,
        statistics=tuple(statistics),
        alpha=alpha,
        ratio_limit=None if alpha is None else thresholds.profile_ratio,
        min_buckets=None if alpha is None else thresholds.profile_min_buckets,
    )
    # every FAILing statistic must be attributed: a FAIL without the oracle's split has no profile to judge
    unattributed = any(np.any(t.verdict == FAIL) for t in tests if t.prod_bias_ulp is None or t.ref_bias_ulp is None)
    within = alpha is not None and not unattributed and all(evidence.keeps_fail(s) is None for s in statistics)
    return dataclasses.replace(evidence, within=within)


def warn_within_ref_profile(tests):
    """``tests`` with every FAILing bucket turned into a WARN for the reason WITHIN_REF_PROFILE (the profile
    rule's verdict, :func:`against_ref_profile`'s ``within``)."""
    out = []
    for t in tests:
        failing = t.verdict == FAIL
        out.append(dataclasses.replace(t, verdict=np.where(failing, WARN, t.verdict).astype(t.verdict.dtype),
                                       reason=np.where(failing, WITHIN_REF_PROFILE, t.reason).astype(t.reason.dtype)))
    return tuple(out)


# the swaps drawn for profile_swap_p (a p-value's resolution is 1 / (PROFILE_SWAPS + 1)); below 2**G of them
# every swap of the G buckets is enumerated instead (exact)
PROFILE_SWAPS = 9999


def profile_swap_p(prod_bias_ulp: np.ndarray, ref_bias_ulp: np.ndarray, tested: np.ndarray,
                   swaps: int = PROFILE_SWAPS, seed: int = 0) -> float:
    """One-sided p-value that prod's own-bias profile over an output's buckets is more biased than ref's.

    Statistic: prod's largest |own bias| over ref's largest (the rank-1 ratio of :func:`rank_matched_ref_bias`).
    Null: the two sides are equally good implementations, so within each bucket prod's and ref's own biases are
    exchangeable; each swap exchanges them bucket by bucket with probability 1/2 (all 2**G swaps when that is
    at most ``swaps``, exactly; else ``swaps`` of them drawn from ``seed``, p = (k + 1) / (swaps + 1)). Paired by
    bucket, the test sees a prod that is more biased than ref on many buckets even where its largest bias is
    only a few times ref's; a prod less biased than ref (a single rounding against a double) gives p near 1.
    NaN when no bucket has both biases finite. The buckets' exchangeability is the assumption. Blind to a
    defect on few buckets: with k buckets far above everything else p is about 2**-k whatever their size, so
    the profile rule (:func:`against_ref_profile`) also bounds the FAILing buckets' ratio to ref's profile
    (docs/method.md, "The working precision's own bias")."""
    tested = np.asarray(tested, bool)
    prod = np.abs(np.asarray(prod_bias_ulp, np.float64))
    ref = np.abs(np.asarray(ref_bias_ulp, np.float64))
    both = tested & np.isfinite(prod) & np.isfinite(ref)
    prod, ref = prod[both], ref[both]
    if prod.size == 0:
        return float("nan")
    observed = _top_ratio(prod.max(), ref.max())
    # Exact reduction: under any swap each side holds one of every bucket's two values, so each side's largest is
    # at least the largest of the buckets' smaller values; a bucket whose larger value is under that never holds
    # a side's largest and cannot move the statistic. What is left is a few buckets (often few enough to
    # enumerate every swap), where an output of 65,536 buckets took 10 s of drawn swaps.
    relevant = np.maximum(prod, ref) >= np.minimum(prod, ref).max()
    prod, ref = prod[relevant], ref[relevant]
    if prod.size < 31 and 2 ** prod.size <= swaps:  # every swap, the identity included: exact
        masks = (np.arange(2 ** prod.size)[:, None] >> np.arange(prod.size)) & 1 == 1
        return float(np.mean(_swapped_ratio(prod, ref, masks) >= observed))
    rng = np.random.default_rng(seed)
    exceed, left = 0, swaps
    while left:  # blocks bound the memory: block x G booleans
        block = min(left, max(1, 2 ** 22 // prod.size))
        exceed += int(np.sum(_swapped_ratio(prod, ref, rng.random((block, prod.size)) < 0.5) >= observed))
        left -= block
    return (exceed + 1) / (swaps + 1)


def _top_ratio(top_prod, top_ref):
    """prod's largest over ref's; inf over a zero, 1 for two zeros (no side more biased)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(top_ref > 0, top_prod / np.where(top_ref > 0, top_ref, 1.0),
                        np.where(top_prod > 0, np.inf, 1.0))


def _swapped_ratio(prod, ref, masks):
    """The statistic under each swap (a row of ``masks``: True where that bucket's two biases are exchanged)."""
    return _top_ratio(np.where(masks, ref, prod).max(axis=1), np.where(masks, prod, ref).max(axis=1))


def attribution_z(count, mean, std):
    """z of prod's bucket means against the oracle, for the attribution (:func:`judge_buckets`'s ``prod_z``):
    a constant non-zero mean counts as infinitely significant whatever its sign.

    Its zero-variance rule is not the bucket test's, and the two are kept apart on purpose. The bucket
    test sets z = 0 below two replicates (an untested bucket) and calls a spread within 1e-12 of the mean
    zero (z = +-inf); here a spread of exactly 0 is zero and std is nan below two replicates. On every
    input a run can produce (count >= 2 with a finite mean and spread, or count < 2 with a nan spread)
    only ``|z| <= critical`` is used, and the two agree on it except in one case: a bucket whose oracle rows
    hold exactly one replicate with a non-zero mean (the oracle non-finite in the bucket's other
    replicates while prod and ref are finite). There this rule calls prod's own bias significant and the
    bucket test's would call it insignificant, which would attribute more biases to ref and could turn a
    FAIL into a PASS; tests/test_bias_stats.py checks where the two differ."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.sqrt(count) * mean / std
    return np.where(std > 0, z, np.where(mean == 0, 0.0, np.inf))
