"""Result dataclasses. They keep their samples (K values, per-bucket moments) and never touch
torch; derived numbers are methods with parameters. Rendering only reads them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checks.results import AdequacyResult, PeerRulesResult, ShapeSweepResult
from .diagnostics import Diagnostic
from .stats import identity
from .stats.bias import FAIL, REASON_TEXT, WARN, BucketTestResult
from .stats.bitwise import BIN_LABELS, GrowthTest
from .stats.observed import ObservedTail
from .stats.paired import PairedBound
from .stats.rare import RareEventLimit
from .stats.tail import TailFitResult
from .stats.tail_ratio import TailRatioInterval
from .stats.thresholds import BiasThresholds, VarianceThresholds
from .verdict import Verdict, combine


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
class LadderRungResult:
    """One precision of the precision ladder (docs/method.md, Gate 1): whether prod accepted it (and
    why not), and per output the relative error of prod and of ref against the float64 oracle."""

    dtype: str
    accepted: bool
    reason: str = ""  # why prod's rung was refused or dropped
    prod_error: tuple[float, ...] = ()
    ref_error: tuple[float | None, ...] = ()  # None: ref did not run at this precision
    output_dtypes: tuple[str, ...] = ()
    ref_reason: str = ""  # why ref did not run at this precision


@dataclass(frozen=True)
class LadderOutputResult:
    """The ladder's decision for one output. ``outcome``: "PASS", "FAIL", "WARN", "not resolved" (no
    algebraic difference above the resolution measured, but the resolution is not far below the harm
    unit: no algebra test) or "not compared" (an integer output). ``amplification`` is K, prod's error
    over the yardstick at the ``judged`` rung; ``internal`` the precision that yardstick is the rounding
    of (the judged rung's own, or the coarser precision a saturated rung computes at); ``resolution``
    the relative size (to the output's peak) below which an algebraic difference is not excluded, and
    ``resolution_harm`` the same in unit roundoffs of ``harm_format`` (an upper bound in harm ULPs at
    the peak; ``bound``: what gave it, "yardstick", or prod's own error against the oracle ("oracle")
    or the observed ``prod - ref`` ("ref") bounding the difference directly: kcert.stats.ladder). ``points``: the point group the outcome rests on ("probe": the probe and wide
    draws; "small": the small-magnitude draws), ``worst_point`` the point where prod's error was largest."""

    output: str
    outcome: str
    judged: str = ""
    amplification: float = 0.0
    resolution: float = 0.0
    yardsticks: tuple[float, ...] = ()  # per accepted rung, in ladder order
    error: float = 0.0  # prod's relative error against the oracle at the judged rung
    internal: str = ""
    resolution_harm: float = 0.0
    harm_format: str = ""
    amplifications: tuple[float, ...] = ()  # K per accepted rung, in ladder order
    points: str = "probe"
    worst_point: str = ""
    bound: str = "yardstick"  # what gave the resolution: "yardstick", "oracle" or "ref"

    @property
    def verdict(self) -> Verdict:
        return {"PASS": Verdict.PASS, "FAIL": Verdict.FAIL, "WARN": Verdict.WARN}.get(self.outcome, Verdict.SKIPPED)


@dataclass(frozen=True)
class LadderResult:
    """The precision ladder: prod (and ref) run at every precision prod accepts on the same real
    inputs, each compared with the float64 oracle (kcert.stats.ladder has the rule). With one rung, or
    when every finer rung is saturated at the coarsest, it is a *same-precision comparison*."""

    rungs: tuple[LadderRungResult, ...]  # every precision tried, coarse to fine
    outputs: tuple[LadderOutputResult, ...]
    oracle: str  # "ref in real mode" or "the given oracle"
    grid: str  # every probe value is representable in this format (the coarsest accepted rung)
    working_dtype: str
    points: int
    wide_points: int
    rounding_multiple: float
    small_points: int = 0

    @property
    def accepted(self) -> tuple[str, ...]:
        return tuple(r.dtype for r in self.rungs if r.accepted)

    @property
    def same_precision(self) -> bool:
        """One accepted precision, or every output that rounding explains is explained by rounding at
        the coarsest one (the finer rungs are saturated there)."""
        accepted = self.accepted
        if len(accepted) == 1:
            return True
        explained = [o for o in self.outputs if o.judged and o.outcome not in ("FAIL", "WARN")]
        return bool(explained) and len(explained) == len([o for o in self.outputs if o.judged]) \
            and all(o.internal == accepted[0] for o in explained)

    @property
    def text(self) -> str:
        """"float32 vs bfloat16": the finest judged rung against the coarsest accepted one (against the
        next rung when nothing finer than the coarsest was resolved); "bfloat16 alone" for one rung."""
        accepted = self.accepted
        if not accepted:
            return "no precision accepted"
        if len(accepted) == 1:
            return f"{accepted[0]} alone"
        judged = [o.judged for o in self.outputs if o.judged in accepted]
        finest = max(judged, key=accepted.index) if judged else accepted[0]
        return f"{finest} vs {accepted[0]}" if finest != accepted[0] else f"{accepted[0]} vs {accepted[1]}"


@dataclass(frozen=True)
class AlgebraResult:
    """Gate 1: does prod compute the same real function as ref? (docs/method.md, "Gate 1")

    Attributes
    ----------
    verdict : Verdict
        PASS, WARN, FAIL or SKIPPED (no algebra test could run).
    reason : str
        The verdict in one sentence, with the figure behind it.
    level : str
        The evidence the verdict rests on: "proof", "identity test", "precision ladder" or "skipped"
        (``level_text`` says it in words).
    points, wide_points, small_points : int
        Points of the identity test (and the precision ladder): draws of the case's probes, of widened
        probes, and of probes scaled to small magnitudes (where an eps or an offset dominates).
    ref_side, prod_side : str
        How each side was evaluated (real mode in float64, or why it could not be).
    outputs : tuple of AlgebraOutputResult
        Per output: the float64 and float32 discrepancies of the identity test.
    fail_floor, rounding_shrink : float
        The identity test's FAIL floor and the shrink float32 -> float64 expected of rounding alone.
    diagnostics : tuple of Diagnostic
        Named findings (code, meaning, remedy).
    proof : AlgebraProofResult or None
        The symbolic proof at a small shape (None when not attempted), with its witness when disproved.
    ladder : LadderResult or None
        The precision ladder, for a prod real mode cannot follow (an opaque kernel).
    untested_accepted : bool
        SKIPPED and accepted by the user (``accept_untested_algebra``); ``untested_limit`` says what
        stays untested.

    Examples
    --------
    >>> import torch, kcert
    >>> case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
    ...                   inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
    >>> cert = kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False)
    >>> cert.algebra.verdict.value, cert.algebra.level
    ('PASS', 'identity test')
    """

    verdict: Verdict
    reason: str
    level: str  # the evidence the verdict rests on: "proof", "identity test", "precision ladder" or "skipped"
    points: int
    wide_points: int
    ref_side: str
    prod_side: str
    outputs: tuple[AlgebraOutputResult, ...] = ()
    fail_floor: float = 1e-9
    rounding_shrink: float = 2.0**19
    diagnostics: tuple[Diagnostic, ...] = ()
    proof: AlgebraProofResult | None = None  # None when the proof was not attempted
    ladder: LadderResult | None = None  # the precision ladder, when real mode could not run prod
    untested_accepted: bool = False  # SKIPPED and accepted by the user (Case/--accept-untested-algebra)
    untested_limit: str = ""  # what an accepted untested algebra leaves untested
    small_points: int = 0  # draws scaled to small magnitudes, after the probe and wide ones

    @property
    def level_text(self) -> str:
        """The evidence in words: "proof at shape ...", "identity test (real mode)", "precision ladder
        (float32 vs bfloat16)", "none" (with "accepted" when the user accepted an untested algebra)."""
        if self.level == "proof" and self.proof is not None:
            return f"proof at shape {self.proof.shape_text}" if self.proof.shape else "proof"
        if self.level == "identity test":
            return "identity test (real mode)"
        if self.level == "precision ladder" and self.ladder is not None:
            if self.ladder.same_precision:
                return f"same-precision comparison at {self.ladder.accepted[0]}"
            return f"precision ladder ({self.ladder.text})"
        return "none (accepted)" if self.untested_accepted else "none"


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
class VarianceResult:
    """Gate 3 for one output: does prod's error tail against the float64 oracle outgrow ref's over
    ``horizon`` calls? (docs/method.md, "Gate 3")

    The errors are kept per replicate, in their own units and in harm units (one ULP of
    ``harm_format`` at the replicate's peak |oracle|, ``epsilon``).

    Attributes
    ----------
    output, dtype : str
        The output and its format.
    verdict : Verdict
        PASS when U <= ``thresholds.warn``, FAIL when the estimate of A_T is above ``thresholds.fail``.
    reason : str
        The verdict in one sentence, with U and A_T.
    interval : TailRatioInterval or None
        The profile-likelihood interval of the tail ratio A_T the verdict rests on
        (``upper_bound`` is U, ``estimate`` the maximum-likelihood A_T).
    error_prod, error_ref, epsilon : numpy.ndarray
        Per replicate: max |prod - oracle|, max |ref - oracle| and the harm unit.
    error_prod_units, error_ref_units : numpy.ndarray or None
        The same errors in harm units.
    amplification, tail : numpy.ndarray, TailFitResult or None
        The technical report's ratio K per replicate and its fit, kept for comparison and plots.
    looks : tuple of int
        Replicate counts at which the verdict was examined; ``stopping_rule`` says how alpha was spent.
    threshold_stability, confirmation : tuple
        A_T re-estimated at other thresholds, and on the even and odd replicates (for a FAIL).
    fail_estimate : float or None
        The estimate of A_T the FAIL line judged.
    observed : ObservedTail or None
        The observed ratio of the largest errors and the exact test of prod's largest errors above the
        PASS line (before any extrapolation; a PASS needs both under the line).
    rare_events : RareEventLimit or None
        The smallest per-call rate of a rare defect the replicates could have shown (rule of three) and
        what it means at the horizon.
    lattice_spacing : tuple of float
        The lattice cells prod's and ref's tied errors were spread over before the fit (0: not tied).
    paired : PairedBound or None
        The shape difference bounded through the pairs (prod's error as ref's plus a difference), when
        U was at or under the PASS line and the separate-shapes bound above it; None otherwise.
    assumptions : tuple of str
        What the interval assumes, in words.
    diagnostics : tuple of Diagnostic
        Named findings (code, meaning, remedy).

    Examples
    --------
    >>> import torch, kcert
    >>> case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
    ...                   inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
    >>> cert = kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False)
    >>> v = cert.variance[0]
    >>> v.verdict.value, v.replicates
    ('PASS', 128)
    """

    output: str
    dtype: str
    verdict: Verdict
    reason: str
    thresholds: VarianceThresholds
    horizon: float
    amplification: np.ndarray  # the report's K per replicate (inf and nan kept), replicate order: comparison
    error_prod: np.ndarray  # E_prod per replicate
    error_ref: np.ndarray  # E_ref per replicate
    epsilon: np.ndarray  # the harm unit at the peak of each replicate
    tail: TailFitResult | None  # the report's fit of K (xi <= 0, exceedance bootstrap): plots, comparison
    looks: tuple[int, ...]  # replicate counts at which the verdict was examined
    diagnostics: tuple[Diagnostic, ...] = ()
    interval: TailRatioInterval | None = None  # the bound the verdict rests on
    stopping_rule: str = ""
    threshold_stability: tuple[tuple[float, float], ...] = ()  # (quantile of positive errors, A_T estimate)
    confirmation: tuple[float, float] | None = None  # A_T estimates on the even and odd replicates
    harm_format: str = ""
    error_prod_units: np.ndarray | None = None  # E_prod / epsilon
    error_ref_units: np.ndarray | None = None
    fail_estimate: float | None = None  # the estimate of A_T the FAIL line judged (None: no interval)
    assumptions: tuple[str, ...] = ()  # what the interval assumes, in words (the gate's)
    observed: ObservedTail | None = None  # the observed range against the PASS line, before any extrapolation
    rare_events: RareEventLimit | None = None  # the smallest per-call rate of a rare defect R could have shown
    lattice_spacing: tuple[float, float] = (0.0, 0.0)  # cells prod's / ref's tied errors were spread over (0: none)
    paired: PairedBound | None = None  # the shape difference bounded through the pairs, when it decided

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
        """U, the bound the verdict rests on (profile likelihood of the tail ratio A_T)."""
        return None if self.interval is None else self.interval.upper

    @property
    def pass_bound(self) -> float | None:
        """What a PASS needs at or under ``thresholds.warn``: the largest of U, the bound on a shape
        difference (the bound with one shape per side, or the paired bound when it is the smaller; not
        asked when prod's and ref's errors are the same numbers in every replicate) and the observed
        ratio of the largest errors; None without an interval. (A PASS also needs the exact test of the
        observed range not to reject: ``observed.p_value``.)"""
        iv = self.interval
        if iv is None:
            return None
        parts = [iv.upper, 0.0 if self.observed is None else self.observed.ratio]
        if self.prod_tied_share != 1.0 and not np.isnan(iv.separate_upper):
            shapes = iv.separate_upper
            if self.paired is not None:
                shapes = min(shapes, self.paired.ratio_upper)
            parts.append(shapes)
        return float(max(parts))

    @property
    def estimate(self) -> float | None:
        """The maximum-likelihood estimate of the tail ratio A_T."""
        return None if self.interval is None else self.interval.estimate

    @property
    def report_upper_bound(self) -> float | None:
        """The report's U = r_T + 3 se on K (xi clipped, exceedance bootstrap), for comparison only."""
        return None if self.tail is None else self.tail.upper_bound

    def quantiles(self, levels=(0.5, 0.9, 0.99, 1.0)) -> dict[float, float]:
        """Quantiles of the report's K (comparison)."""
        finite = self.amplification[np.isfinite(self.amplification)]
        if finite.size == 0:
            return {q: float("nan") for q in levels}
        return {q: float(np.quantile(finite, q)) for q in levels}

    def error_summary(self, side: str, levels=(0.5, 0.99, 1.0)) -> dict[float, float]:
        """Quantiles of prod's (``side="prod"``) or ref's error against the oracle, in harm ULPs."""
        units = {"prod": self.error_prod_units, "ref": self.error_ref_units}[side]
        if units is None:
            units = (self.error_prod if side == "prod" else self.error_ref) / self.epsilon
        finite = units[np.isfinite(units)]
        if finite.size == 0:
            return {q: float("nan") for q in levels}
        return {q: float(np.quantile(finite, q)) for q in levels}

    def _paired_errors(self) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.error_prod_units, self.error_ref_units
        if a is None or b is None:
            a, b = self.error_prod, self.error_ref
        keep = np.isfinite(a) & np.isfinite(b)
        return a[keep], b[keep]

    @property
    def prod_closer_share(self) -> float | None:
        """The share of replicates in which prod's error is strictly smaller than ref's (ties are
        neither side's: ``prod_tied_share``)."""
        a, b = self._paired_errors()
        return float(np.mean(a < b)) if a.size else None

    @property
    def prod_tied_share(self) -> float | None:
        a, b = self._paired_errors()
        return float(np.mean(a == b)) if a.size else None


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
    timings: dict = field(default_factory=dict)  # seconds per stage (replicates, algebra, bias, ...)
    resumed: dict | None = None  # a resumed run: its checkpoint and the replicates it took from it


@dataclass(frozen=True)
class Certificate:
    """What :func:`kcert.certify` returns: the three gates' results, the checks around them, and the
    provenance that reproduces the run. ``verdict`` combines them (docs/verdicts.md).

    Attributes
    ----------
    case, description : str
        The case's name and description.
    algebra : AlgebraResult
        Gate 1.
    bias, variance : tuple of BiasResult, tuple of VarianceResult
        Gates 2 and 3, one result per output (``variance`` is empty when no oracle could run:
        ``variance_skipped_reason`` says why).
    outputs : tuple of OutputInfo
        Each output's name, shape, dtypes, bucket count and bucket rule.
    provenance : Provenance
        Seed, replicates, horizon, dtype, device, probes, the reproduce command, the environment
        (hardware, library versions), date and wall time.
    notes : tuple of str
        What the run noted (a recompile, an early stop and why).
    bitwise : tuple of BitwiseResult
        L0, informational: ULP distances between prod and ref.
    adequacy, peer_rules, shape_sweep : optional
        The checks of docs/kernelbench.md, None when not run.

    Examples
    --------
    >>> import torch, kcert
    >>> case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
    ...                   inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
    >>> cert = kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False)
    >>> cert.verdict.value
    'PASS'
    >>> cert.gates["bias"].value, cert.provenance.seed
    ('PASS', 0)
    >>> cert.provenance.command
    'kcert.certify(<half>, replicates=128, horizon=625000, seed=0, algebra_proof=False, peer_rules=False)'
    """

    case: str
    algebra: AlgebraResult
    bias: tuple[BiasResult, ...]
    variance: tuple[VarianceResult, ...]
    outputs: tuple[OutputInfo, ...]
    provenance: Provenance
    variance_skipped_reason: str | None = None
    description: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    bitwise: tuple[BitwiseResult, ...] = ()  # L0, informational: not part of gates or verdict
    # checks around the gates (kcert.checks, docs/kernelbench.md): None when not run
    adequacy: AdequacyResult | None = None  # fakes: one not FAILed (or a degenerate ref) holds a PASS at WARN
    peer_rules: PeerRulesResult | None = None  # informational: what the common rules say on the same samples
    shape_sweep: ShapeSweepResult | None = None  # a FAIL at a derived shape FAILs the certificate

    def gate_verdict(self, gate: str) -> Verdict:
        if gate == "algebra":
            return self.algebra.verdict
        results = {"bias": self.bias, "variance": self.variance}[gate]
        return Verdict.worst(r.verdict for r in results)

    @property
    def gates(self) -> dict[str, Verdict]:
        return {g: self.gate_verdict(g) for g in ("algebra", "bias", "variance")}

    @property
    def accepted_skips(self) -> tuple[str, ...]:
        """Gates whose SKIPPED the user accepted explicitly (an untested algebra, docs/verdicts.md)."""
        return ("algebra",) if self.algebra.untested_accepted else ()

    @property
    def verdict(self) -> Verdict:
        """The gates' verdict (:func:`kcert.verdict.combine`), then the checks: a FAIL at a shape of the
        sweep FAILs the certificate; a fake the certification does not FAIL, or a degenerate ref, holds a
        PASS at WARN (docs/kernelbench.md). Peer rules never change it."""
        verdict = combine(self.gates, self.accepted_skips)
        if self.shape_sweep is not None and self.shape_sweep.failed:
            return Verdict.FAIL
        if verdict is Verdict.PASS and self.adequacy is not None and self.adequacy.blocks_pass:
            return Verdict.WARN
        return verdict
