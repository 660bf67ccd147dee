"""Result dataclasses. They keep their samples (K values, per-bucket moments) and never touch
torch; derived numbers are methods with parameters. Rendering only reads them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .diagnostics import Diagnostic
from .stats import identity
from .stats.bias import FAIL, REASON_TEXT, WARN, BiasThresholds, BucketTestResult
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
class AlgebraResult:
    verdict: Verdict
    reason: str
    level: str  # "identity test" or "skipped"
    points: int
    wide_points: int
    ref_side: str
    prod_side: str
    outputs: tuple[AlgebraOutputResult, ...] = ()
    fail_floor: float = 1e-9
    rounding_shrink: float = 2.0**19
    diagnostics: tuple[Diagnostic, ...] = ()


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
    """U <= warn: PASS; warn < U <= fail: WARN; U > fail: FAIL (the report's 2 / 10)."""

    warn: float = 2.0
    fail: float = 10.0
    threshold_quantile: float = 0.90
    min_exceedances: int = 10
    bootstrap: int = 1000


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
    tail: TailFitResult | None
    looks: tuple[int, ...]  # replicate counts at which the verdict was examined
    diagnostics: tuple[Diagnostic, ...] = ()

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
        return None if self.tail is None else self.tail.upper_bound

    def quantiles(self, levels=(0.5, 0.9, 0.99, 1.0)) -> dict[float, float]:
        finite = self.amplification[np.isfinite(self.amplification)]
        if finite.size == 0:
            return {q: float("nan") for q in levels}
        return {q: float(np.quantile(finite, q)) for q in levels}


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
