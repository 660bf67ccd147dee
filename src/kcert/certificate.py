"""Result dataclasses. They keep their samples (K values, per-bucket moments) and never touch
torch; derived numbers are methods with parameters. Rendering only reads them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .diagnostics import Diagnostic
from .errors import ParameterError
from .stats import identity
from .stats.bias import FAIL, REASON_TEXT, WARN, BiasThresholds, BucketTestResult
from .stats.bitwise import BIN_LABELS, GrowthTest
from .stats.profile import ReturnLevelInterval, ShapeTest
from .stats.tail import TailFitResult
from .verdict import Verdict, overall


@dataclass(frozen=True)
class AlgebraOutputResult:
    """Identity test of one output: max relative real-mode discrepancy between ref and prod."""

    output: str
    discrepancy_float64: float
    discrepancy_float32: float
    verdict: Verdict

    @property
    def shrink(self) -> float:
        """How much the discrepancy shrinks from float32 to float64 real mode (rounding: ~2**29)."""
        return identity.shrink(self.discrepancy_float64, self.discrepancy_float32)


@dataclass(frozen=True)
class AlgebraProofResult:
    """The symbolic proof level of Gate 1: ref and prod evaluated on tensors of real symbols at a small
    shape, ``ref - prod`` simplified. ``outcome``: "proved" (zero for every element of every output),
    "disproved" (a non-zero difference, confirmed at ``witness``) or "not reached" (``reason`` names
    why: "unsupported", "shape", "too large", "budget", "undecided", "mismatch", "error")."""

    outcome: str
    note: str  # what was shown, or why the proof was not reached
    shape: dict = field(default_factory=dict)  # probe name -> the small shape it was evaluated at
    held: tuple[str, ...] = ()  # probes held at concrete values (integers, Fixed tensors)
    reason: str = ""
    seconds: float = 0.0
    witness: dict | None = None  # output, index, point, ref, prod, relative_difference, difference

    @property
    def shape_text(self) -> str:
        return ", ".join(f"{k} {tuple(v)}" for k, v in self.shape.items())


@dataclass(frozen=True)
class AlgebraResult:
    verdict: Verdict
    reason: str
    level: str  # the evidence the verdict rests on: "proof", "identity test" or "skipped"
    points: int
    wide_points: int
    ref_side: str
    prod_side: str
    outputs: tuple[AlgebraOutputResult, ...] = ()
    fail_floor: float = 1e-9
    rounding_shrink: float = 2.0**19
    diagnostics: tuple[Diagnostic, ...] = ()
    proof: AlgebraProofResult | None = None  # None when the proof was not attempted


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


@dataclass(frozen=True, eq=False)
class BiasResult:
    """Gate 2 for one output."""

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

    @property
    def buckets(self) -> int:
        return len(self.bucket_labels)

    def bucket_verdicts(self) -> np.ndarray:
        """Worst verdict code per bucket over the statistics."""
        return np.max(np.stack([t.verdict for t in self.tests]), axis=0) if self.tests else np.zeros(0, np.int8)

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
                )
            )
        return out


@dataclass(frozen=True)
class VarianceThresholds:
    """The variance verdict against the report's lines 2 and 10.

    PASS needs U <= warn; FAIL needs the estimate of r_T above ``fail``; anything else WARNs. A bound
    above ``fail`` with an estimate below it is a WARN: evidence of harm, not lack of data, blocks a
    migration (``fail_on="bound"`` restores the report's rule, FAIL when U > fail). U is the
    profile-likelihood upper bound of r_T, one-sided at ``1 - alpha`` over the whole run (``alpha``
    is split evenly over the planned looks); ``alpha = 0.00135`` is the report's 3 sigma. A bounded
    tail (xi <= 0) is assumed unless a likelihood-ratio test rejects it at ``shape_test_level``
    (then PASS is refused); the bootstrap (``bootstrap`` resamples) only feeds the report's rule,
    shown beside U for comparison, and the plots' bands."""

    warn: float = 2.0
    fail: float = 10.0
    threshold_quantile: float = 0.90
    min_exceedances: int = 10
    bootstrap: int = 1000
    alpha: float = 0.00135
    shape_test_level: float = 0.25
    fail_on: str = "estimate"  # FAIL when r_T's estimate (or, "bound": when U) exceeds ``fail``

    def __post_init__(self):
        if self.fail_on not in ("estimate", "bound"):
            raise ParameterError(f"VarianceThresholds.fail_on must be 'estimate' or 'bound', got {self.fail_on!r}")


@dataclass(frozen=True)
class VarianceResult:
    """Gate 3 for one output."""

    output: str
    dtype: str
    verdict: Verdict
    reason: str
    thresholds: VarianceThresholds
    horizon: float
    amplification: np.ndarray  # K per replicate (inf and nan kept), replicate order
    error_prod: np.ndarray  # E_prod per replicate
    error_ref: np.ndarray  # E_ref per replicate
    epsilon: np.ndarray  # one true ULP at the peak of each replicate
    tail: TailFitResult | None  # the report's fit (xi <= 0, exceedance bootstrap): plots, comparison
    looks: tuple[int, ...]  # replicate counts at which the verdict was examined
    diagnostics: tuple[Diagnostic, ...] = ()
    interval: ReturnLevelInterval | None = None  # the bound the verdict rests on
    shape_test: ShapeTest | None = None
    stopping_rule: str = ""
    threshold_stability: tuple[tuple[float, float], ...] = ()  # (quantile of positive K, r_T estimate)
    confirmation: tuple[float, float] | None = None  # r_T estimates on the even and odd replicates
    bounded_interval: ReturnLevelInterval | None = None  # xi <= 0 (equals interval unless the tail is heavy)

    @property
    def replicates(self) -> int:
        return int(self.amplification.size)

    @property
    def n_infinite(self) -> int:
        return int(np.sum(np.isinf(self.amplification)))

    @property
    def n_undefined(self) -> int:
        return int(np.sum(np.isnan(self.amplification)))

    @property
    def n_zero(self) -> int:
        return int(np.sum(self.amplification == 0))

    @property
    def n_positive(self) -> int:
        k = self.amplification
        return int(np.sum(np.isfinite(k) & (k > 0)))

    @property
    def upper_bound(self) -> float | None:
        """U, the bound the verdict rests on (profile likelihood)."""
        return None if self.interval is None else self.interval.upper

    @property
    def report_upper_bound(self) -> float | None:
        """The report's U = r_T + 3 se (xi clipped, exceedance bootstrap), for comparison only."""
        return None if self.tail is None else self.tail.upper_bound

    def quantiles(self, levels=(0.5, 0.9, 0.99, 1.0)) -> dict[float, float]:
        finite = self.amplification[np.isfinite(self.amplification)]
        if finite.size == 0:
            return {q: float("nan") for q in levels}
        return {q: float(np.quantile(finite, q)) for q in levels}


@dataclass(frozen=True, eq=False)
class BitwiseResult:
    """L0, the bitwise layer, for one output: informational, it never changes a verdict.

    ``ulp_histogram`` counts, over every element of every replicate, the ULP distance between
    prod and ref in the output's format (bins :data:`kcert.stats.bitwise.BIN_LABELS`; bin 0 is
    exactly the bitwise-equal elements). ``growth`` compares the bias statistics' |z| at
    ``growth.early_replicates`` (about R/4) with |z| at R (None when R < 256)."""

    output: str
    dtype: str
    replicates: int
    ulp_histogram: np.ndarray  # (N_BINS,) int64
    classification: str
    growth: GrowthTest | None = None
    reason: str = ""  # why a part of the layer was not computed

    @property
    def elements(self) -> int:
        return int(self.ulp_histogram.sum())

    @property
    def bitwise_equal(self) -> int:
        return int(self.ulp_histogram[0])

    @property
    def fraction_equal(self) -> float | None:
        return self.bitwise_equal / self.elements if self.elements else None

    @property
    def bin_labels(self) -> tuple[str, ...]:
        return BIN_LABELS

    @property
    def max_distance(self) -> str | None:
        """Label of the farthest non-empty bin (None when nothing was compared)."""
        nonzero = np.nonzero(self.ulp_histogram)[0]
        return BIN_LABELS[int(nonzero[-1])] if nonzero.size else None

    @property
    def significant(self) -> int:
        return 0 if self.growth is None else self.growth.significant

    @property
    def median_growth(self) -> float | None:
        return None if self.growth is None else self.growth.median_growth


@dataclass(frozen=True)
class OutputInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str
    prod_dtype: str
    buckets: int
    bucketing: dict


@dataclass(frozen=True)
class Provenance:
    """Everything needed to reproduce a run and to know what it ran on."""

    seed: int
    replicates: int
    max_replicates: int
    horizon: float
    dtype: str
    device: str
    probes: dict
    command: str
    environment: dict
    date: str
    wall_time_s: float


@dataclass(frozen=True)
class Certificate:
    case: str
    algebra: AlgebraResult
    bias: tuple[BiasResult, ...]
    variance: tuple[VarianceResult, ...]
    outputs: tuple[OutputInfo, ...]
    provenance: Provenance
    bias_skipped_reason: str | None = None
    variance_skipped_reason: str | None = None
    description: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    bitwise: tuple[BitwiseResult, ...] = ()  # L0, informational: not part of gates or verdict

    def gate_verdict(self, gate: str) -> Verdict:
        if gate == "algebra":
            return self.algebra.verdict
        results = {"bias": self.bias, "variance": self.variance}[gate]
        return Verdict.worst(r.verdict for r in results)

    @property
    def gates(self) -> dict[str, Verdict]:
        return {g: self.gate_verdict(g) for g in ("algebra", "bias", "variance")}

    @property
    def verdict(self) -> Verdict:
        return overall(self.gates.values())
