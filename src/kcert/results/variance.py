"""Gate 3's result: the error tail of one output against the float64 oracle (docs/method.md, "Gate 3")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnostics import Diagnostic
from ..stats.observed import ObservedTail
from ..stats.paired import PairedBound
from ..stats.rare import RareEventLimit
from ..stats import tail as tailstats
from ..stats.tail import TailFitResult
from ..stats.tail_ratio import TailRatioInterval
from ..stats.thresholds import VarianceThresholds
from ..verdict import Verdict


@dataclass(frozen=True, kw_only=True)
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

    def positive_amplification(self) -> np.ndarray:
        """The positive finite K, replicate order (the ones a histogram of K can show)."""
        k = self.amplification
        return k[np.isfinite(k) & (k > 0)]

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

    def errors_in_units(self, side: str) -> np.ndarray:
        """prod's (``side="prod"``) or ref's finite errors against the oracle in harm units, replicate order."""
        units = {"prod": self.error_prod_units, "ref": self.error_ref_units}[side]
        if units is None:
            units = (self.error_prod if side == "prod" else self.error_ref) / self.epsilon
        return units[np.isfinite(units)]

    def error_median(self, side: str) -> float:
        """The median of one side's errors in harm units (:meth:`errors_in_units`)."""
        return float(np.median(self.errors_in_units(side)))

    def observed_return_levels(self, side: str, most: int = 200) -> tuple[np.ndarray, np.ndarray]:
        """One side's ``most`` largest positive errors (harm units, descending) and their return periods
        in calls: the i-th largest of N is seen once in N / i calls."""
        x = self.errors_in_units(side)
        levels = np.sort(x)[::-1]
        levels = levels[levels > 0][:most]
        return x.size / np.arange(1, levels.size + 1), levels

    def return_level_curves(self, points: int = 60) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """The fitted GPD return level of each side at ``points`` horizons, geometric from prod's mean
        exceedance period out to ten times the horizon: (horizons, {"prod": levels, "ref": levels});
        None without an interval. Both sides' exceedance rates are per prod's finite replicates."""
        iv = self.interval
        if iv is None:
            return None
        n = self.errors_in_units("prod").size
        horizons = np.geomspace(1.0 / max(iv.exceedances_prod / n, 1e-12), 10.0 * iv.horizon, points)
        curves = {}
        for side, u, k, shape, scale in (
                ("prod", iv.threshold_prod, iv.exceedances_prod, iv.shape_prod, iv.scale_prod),
                ("ref", iv.threshold_ref, iv.exceedances_ref, iv.shape_ref, iv.scale_ref)):
            # return_level takes one horizon at a time
            curves[side] = np.array([float(tailstats.return_level(u, k / n, h, shape, scale)) for h in horizons])
        return horizons, curves

    def tail_qq(self, side: str) -> tuple[np.ndarray, np.ndarray]:
        """One side's QQ points against its fitted GPD: (model quantiles at the plotting positions
        (i - 0.5) / n, the sorted observed excesses over its threshold). Needs an interval."""
        iv = self.interval
        if iv is None:
            raise ValueError(f"variance result for {self.output!r} has no tail fit: {self.reason}")
        u, shape, scale = ((iv.threshold_prod, iv.shape_prod, iv.scale_prod) if side == "prod"
                           else (iv.threshold_ref, iv.shape_ref, iv.scale_ref))
        x = self.errors_in_units(side)
        excess = np.sort(x[x > u] - u)
        p = (np.arange(1, excess.size + 1) - 0.5) / excess.size
        return tailstats.gpd_quantile(p, shape, scale), excess

    def error_summary(self, side: str, levels=(0.5, 0.99, 1.0)) -> dict[float, float]:
        """Quantiles of prod's (``side="prod"``) or ref's error against the oracle, in harm ULPs."""
        finite = self.errors_in_units(side)
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
