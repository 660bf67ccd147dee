"""Gate 2's results: per-bucket bias tests of one output (docs/method.md, "Gate 2")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnostics import Diagnostic
from ..stats.bias import (FAIL, REASON_TEXT, REF_SIDE, SHARED_WITH_REF, WARN, WITHIN_REF_PROFILE, BucketTestResult,
                          RefProfileEvidence, ref_profile_ratio)
from ..stats.thresholds import BiasThresholds
from ..verdict import Verdict


@dataclass(frozen=True)
class BucketFinding:
    """One bucket's evidence, ready to print: what, where, which way, how large."""

    output: str
    bucket: int
    label: str
    statistic: str
    verdict: Verdict
    reason: str
    direction: str  # raw: "prod > ref" / "prod < ref"; sign-aligned: "|prod| > |ref|" / "|prod| < |ref|"
    mean: float
    std: float
    z: float
    standardized_effect: float
    effect_ulp: float
    ulp: float
    reference_magnitude: float
    prod_bias_ulp: float | None
    ref_bias_ulp: float | None
    # |prod's own bias| over ref's own bias at the same rank of ref's profile on this output (None without
    # an oracle): far above 1, beyond any bias ref carries; near or below 1, ref is as biased elsewhere
    # (kcert.stats.bias.ref_profile_ratio; docs/method.md, "The working precision's own bias")
    ref_profile_ratio: float | None = None


@dataclass(frozen=True, eq=False)
class BiasResult:
    """Gate 2 for one output: is there a coherent difference between prod and ref that adds up over
    ``horizon`` calls? (docs/method.md, "Gate 2")

    Per bucket, the mean of prod - ref (raw) and of (prod - ref) * sign(ref) (sign-aligned) over the
    replicates is z-tested; a significant bias larger than the ULP floor and harmful within the
    horizon FAILs, unless the oracle attributes it to ref.

    Attributes
    ----------
    output, dtype, prod_dtype : str
        The output's name and the formats of ref's and prod's values.
    verdict : Verdict
        The worst bucket's verdict.
    thresholds : BiasThresholds
        What the buckets were judged against.
    horizon : float
        T, kernel calls.
    replicates : int
        Replicates behind the means.
    bucket_labels : tuple of str
        One label per bucket (e.g. "channel 17").
    reference_magnitude, ulp : numpy.ndarray
        Per bucket: mean |ref| and one ULP of the harm format there.
    tests : tuple of BucketTestResult
        One per statistic (raw, sign-aligned): z, effect in ULP, verdict and reason per bucket.
    familywise_error_bound, min_detectable_effect, horizon_covered, replicates_for_horizon, s_min : float
        The power of the run: the false-alarm bound over all tests, the smallest standardized effect
        detected with the thresholds' power, the horizon that effect covers, the replicates the
        declared horizon needs, and the harm boundary.
    nonfinite_prod, nonfinite_ref : int
        Elements where one side is non-finite and the other is not (``nonfinite_replicates``: where).
    attribution, oracle : bool
        Whether the verdicts split biases into prod's and ref's through the oracle, and whether an
        oracle was available.
    moments : dict
        Row -> (count, mean, std) per bucket: the evidence, kept so the result can be judged again.
    diagnostics : tuple of Diagnostic
        Named findings (code, meaning, remedy).

    Examples
    --------
    >>> import torch, kcert
    >>> case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
    ...                   inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
    >>> cert = kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False)
    >>> [b.verdict.value for b in cert.bias]
    ['PASS']
    >>> cert.bias[0].findings()  # buckets at WARN or worse, the worst first
    []
    """

    output: str
    dtype: str
    prod_dtype: str
    verdict: Verdict
    thresholds: BiasThresholds
    horizon: float
    replicates: int
    bucket_labels: tuple[str, ...]
    reference_magnitude: np.ndarray
    ulp: np.ndarray
    tests: tuple[BucketTestResult, ...]
    familywise_error_bound: float
    min_detectable_effect: float
    horizon_covered: float
    replicates_for_horizon: int
    s_min: float
    nonfinite_prod: int
    nonfinite_ref: int
    nonfinite_replicates: tuple[int, ...]
    attribution: bool  # the verdicts used the oracle to split biases into prod's and ref's
    oracle: bool  # an oracle was available (attribution possible under other thresholds)
    moments: dict  # row -> (count, mean, std) per bucket: the evidence, kept for rejudging
    diagnostics: tuple[Diagnostic, ...] = ()
    dtypes_may_differ: bool = False  # the case declared that prod's output dtype may differ from ref's
    harm_format: str = ""  # the format whose ULP the floor counts (docs/method.md, "The harm scale")
    # FAILing buckets set against ref's own bias profile (None: no FAIL, or no attribution)
    ref_profile: RefProfileEvidence | None = None

    @property
    def buckets(self) -> int:
        return len(self.bucket_labels)

    def bucket_verdicts(self) -> np.ndarray:
        """Worst verdict code per bucket over the statistics."""
        return np.max(np.stack([t.verdict for t in self.tests]), axis=0) if self.tests else np.zeros(0, np.int8)

    def significant_buckets(self) -> np.ndarray:
        """Per bucket: whether any statistic's |z| exceeds its critical value (``BucketTestResult.critical``:
        z* as a Student t quantile at the bucket's replicates; a zero-variance z of NaN counts as 0)."""
        return np.logical_or.reduce([t.significant for t in self.tests])

    def critical_z(self) -> float:
        """The largest finite critical |z| over the tested buckets (the one at the fewest replicates), or z*
        when none was tested: what the reports quote beside z*."""
        values = [t.critical[np.isfinite(t.critical)] for t in self.tests]
        values = [v for v in values if v.size]
        return float(max(v.max() for v in values)) if values else float(self.thresholds.z_star)

    def attributed_to_ref(self) -> np.ndarray:
        """Per bucket: whether any statistic's PASS was attributed to ref's own bias (prod within the floor,
        or its bias shared with ref's)."""
        return np.logical_or.reduce([np.isin(t.reason, REF_SIDE) for t in self.tests])

    def shared_with_ref(self) -> np.ndarray:
        """Per bucket: whether any statistic's PASS rests on prod's own bias (above the floor) being a part of
        ref's, in its direction and no larger."""
        return np.logical_or.reduce([t.reason == SHARED_WITH_REF for t in self.tests])

    def within_ref_profile(self) -> np.ndarray:
        """Per bucket: whether a statistic's bucket-wise FAIL was judged within ref's own bias profile (a WARN)."""
        return np.logical_or.reduce([t.reason == WITHIN_REF_PROFILE for t in self.tests])

    def signed_effect_ulp(self, test: BucketTestResult) -> np.ndarray:
        """One statistic's signed mean per bucket in the bucket's ULP (NaN where the ULP is not positive);
        the test's ``effect_ulp`` is its magnitude."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.ulp > 0, test.mean / self.ulp, np.nan)

    def count(self, verdict: Verdict) -> int:
        code = {Verdict.FAIL: FAIL, Verdict.WARN: WARN}[verdict]
        return int(np.sum(self.bucket_verdicts() == code))

    def findings(self, minimum: Verdict = Verdict.WARN, limit: int | None = None) -> list[BucketFinding]:
        """Buckets at or above ``minimum``, the worst (largest ULP effect among the most severe) first;
        each bucket appears once, with the statistic that judged it most severely."""
        floor = {Verdict.WARN: WARN, Verdict.FAIL: FAIL}[minimum]
        best: dict[int, tuple] = {}
        for t in self.tests:
            for g in np.nonzero(t.verdict >= floor)[0]:
                key = (int(t.verdict[g]), float(t.effect_ulp[g]))
                if g not in best or key > best[g][0]:
                    best[int(g)] = (key, t)
        ordered = sorted(best.items(), key=lambda kv: kv[1][0], reverse=True)
        if limit is not None:
            ordered = ordered[:limit]
        ratios = {id(t): ref_profile_ratio(t) for t in self.tests}
        out = []
        for g, (_, t) in ordered:
            sign = np.sign(t.mean[g])
            if t.statistic == "raw":
                direction = "prod > ref" if sign > 0 else "prod < ref"
            else:
                direction = "|prod| > |ref|" if sign > 0 else "|prod| < |ref|"
            out.append(
                BucketFinding(
                    output=self.output,
                    bucket=g,
                    label=self.bucket_labels[g],
                    statistic=t.statistic,
                    verdict=Verdict.from_code(t.verdict[g]),
                    reason=REASON_TEXT[int(t.reason[g])],
                    direction=direction,
                    mean=float(t.mean[g]),
                    std=float(t.std[g]),
                    z=float(t.z[g]),
                    standardized_effect=float(t.standardized_effect[g]),
                    effect_ulp=float(t.effect_ulp[g]),
                    ulp=float(self.ulp[g]),
                    reference_magnitude=float(self.reference_magnitude[g]),
                    prod_bias_ulp=None if t.prod_bias_ulp is None else float(t.prod_bias_ulp[g]),
                    ref_bias_ulp=None if t.ref_bias_ulp is None else float(t.ref_bias_ulp[g]),
                    ref_profile_ratio=None if t.prod_bias_ulp is None else float(ratios[id(t)][g]),
                )
            )
        return out
