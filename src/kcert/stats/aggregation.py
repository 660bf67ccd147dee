"""Naming the aggregation behind a training step's deviation (docs/training-graph.md, "Diagnosis").

Pure numpy/scipy. For one output of one configuration, over ``D`` replicates, the caller measures
(relative to the float64 oracle's norm, per replicate):

- ``deviation``: ``|prod - oracle| / |oracle|``; ``ref_error``: ``|ref - oracle| / |oracle|``, the
  rounding a correct step makes (the *yardstick* is its median, floored at the output format's unit
  roundoff);
- ``ratio``: the least-squares scale of prod on the oracle, ``<prod, oracle> / <oracle, oracle>``,
  and ``scaled_residual``: ``|prod - ratio * oracle| / |oracle|``, what no scale explains;
- optionally *hypotheses*: named aggregations of the step's cells (a rank's micro-batch), each the
  oracle's per-cell outputs combined another way (the mean of micro-batch means, rank 0's share
  only...), with their residual ``|prod - hypothesis| / |oracle|``.

:func:`judge_aggregation` decides, in this order: the output **agrees** (its deviation is within
``MATCH`` yardsticks); a **hypothesis** reproduces prod (its median residual is within ``MATCH``
yardsticks: prod computes that aggregation, up to rounding); prod is a **constant factor** times
ref (the ratio varies by at most ``MATCH`` yardsticks over the replicates and scaling explains the
deviation), matched against the configuration's quantities; the ratio **tracks** a per-replicate
quantity of the configuration (a valid-token share: Spearman's rank correlation, Bonferroni over the
quantities at ``ASSOCIATION_LEVEL``); otherwise **unexplained**, with the closest hypothesis.

A hypothesis also wins over **agrees** when the deviation is within rounding but the hypothesis
reproduces prod better than ref's aggregation in more replicates than a sign test allows by chance
(a mean of micro-batch means moves a loss whose tokens all cost about the same by little).

``MATCH = 4`` is a choice made before the controls ran, not tuned on them: a correct aggregation
evaluated by a different schedule (micro-batches, ranks) rounds differently from ref, by about one
yardstick; 4 leaves room for that and is far below the deviations of the aggregation defects (a
few percent and up, hundreds of yardsticks in bf16).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

MATCH = 4.0  # yardsticks within which a deviation is rounding, a hypothesis or a factor reproduces prod
ASSOCIATION_LEVEL = 0.01  # family-wise level of the association tests (Bonferroni over the quantities)
AGREES, HYPOTHESIS, FACTOR, TRACKS, UNEXPLAINED = "agrees", "hypothesis", "factor", "tracks", "unexplained"


@dataclass(frozen=True)
class RatioSummary:
    """The per-replicate ratio prod/ref: median, quartiles, robust relative spread (1.4826 MAD / |median|)."""

    median: float
    low: float
    high: float
    spread: float
    replicates: int


def ratio_summary(ratio) -> RatioSummary:
    r = np.asarray(ratio, np.float64)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return RatioSummary(math.nan, math.nan, math.nan, math.nan, 0)
    med = float(np.median(r))
    mad = float(scipy_stats.median_abs_deviation(r, scale="normal"))
    spread = mad / abs(med) if med != 0 else math.inf
    low, high = (float(q) for q in np.quantile(r, [0.25, 0.75]))
    return RatioSummary(med, low, high, spread, int(r.size))


@dataclass(frozen=True)
class Hypothesis:
    """A named aggregation of the step's cells and its residual against prod per replicate
    (``short``: a few words for tables)."""

    name: str
    text: str
    residual: np.ndarray
    short: str = ""
    reference: bool = False  # ref's own aggregation: its residual is the deviation itself

    @property
    def median(self) -> float:
        r = self.residual[np.isfinite(self.residual)]
        return float(np.median(r)) if r.size else math.inf


@dataclass(frozen=True)
class Association:
    """The per-replicate quantity the ratio tracks best, Spearman's rho and its Bonferroni-adjusted p."""

    quantity: str
    rho: float
    p_value: float


@dataclass(frozen=True)
class AggregationFinding:
    """What :func:`judge_aggregation` decided for one output (module docstring). ``factor``: the
    matched quantity's name and value (``factor_value``; None when the constant matches none);
    ``hypothesis``/``hypothesis_text``/``residual``: the best hypothesis (reproducing prod when
    ``status`` is "hypothesis", else the closest); ``explained_share``: ``1 - residual / deviation``."""

    status: str
    deviation: float
    yardstick: float
    ratio: RatioSummary
    constant: bool
    factor: str | None = None
    factor_value: float | None = None
    hypothesis: str | None = None
    hypothesis_text: str | None = None
    hypothesis_short: str | None = None
    residual: float | None = None
    explained_share: float | None = None
    association: Association | None = None


def _median(values) -> float:
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else math.inf


def constant_names(quantities: dict[str, float]) -> list[tuple[str, float]]:
    """Each quantity ``q`` and its reciprocal ``1 / q`` (not 1), in the given order; quantities of equal
    value share one entry whose name lists them all ("... = ..."), the first given first."""
    merged: dict[float, list[str]] = {}
    for name, q in quantities.items():
        inverse = f"1 / ({name})" if (" / " in name or " x " in name) else f"1 / {name}"
        for label, v in ((name, q), (inverse, 1.0 / q)):
            if v != 1.0 and math.isfinite(v):
                merged.setdefault(round(v, 12), []).append(label)
    return [(" = ".join(dict.fromkeys(labels)), v) for v, labels in merged.items()]


def match_constant(value: float, tolerance: float, quantities: dict[str, float]) -> tuple[str, float] | None:
    """The first quantity ``q`` (in the given order), or its reciprocal ``1 / q``, within relative
    ``tolerance`` of ``value`` (with every quantity of the same value named); None when none is.
    Quantities equal to 1 are skipped (a factor of 1 is agreement, judged before)."""
    for label, v in constant_names(quantities):
        if abs(value / v - 1.0) <= tolerance:
            return label, v
    return None


def beats(residual, deviation, level: float = ASSOCIATION_LEVEL) -> bool:
    """Whether a hypothesis reproduces prod better than ref's aggregation in more replicates than chance
    allows (one-sided sign test at ``level``): a deviation within rounding that an aggregation still
    explains is that aggregation (a token mean over similar losses moves a loss by little)."""
    r, d = np.asarray(residual, np.float64), np.asarray(deviation, np.float64)
    ok = np.isfinite(r) & np.isfinite(d) & (r != d)
    if ok.sum() == 0:
        return False
    wins = int((r[ok] < d[ok]).sum())
    return scipy_stats.binomtest(wins, int(ok.sum()), 0.5, alternative="greater").pvalue < level


def associate(ratio, quantities: dict[str, np.ndarray], level: float = ASSOCIATION_LEVEL) -> Association | None:
    """The per-replicate quantity most associated with the ratio (Spearman), if significant after
    Bonferroni over the quantities that vary; None otherwise."""
    r = np.asarray(ratio, np.float64)
    best = None
    tested = [(n, np.asarray(q, np.float64)) for n, q in quantities.items()]
    tested = [(n, q) for n, q in tested if q.size == r.size and np.ptp(q[np.isfinite(q)]) > 0]
    for name, q in tested:
        ok = np.isfinite(r) & np.isfinite(q)
        if ok.sum() < 5 or np.ptp(r[ok]) == 0:
            continue
        rho, p = scipy_stats.spearmanr(r[ok], q[ok])
        p = min(1.0, float(p) * len(tested))
        if p < level and (best is None or abs(rho) > abs(best.rho)):
            best = Association(name, float(rho), p)
    return best


def judge_aggregation(deviation, ref_error, ratio, scaled_residual, unit_roundoff: float,
                      constants: dict[str, float], hypotheses: tuple[Hypothesis, ...] = (),
                      quantities: dict[str, np.ndarray] | None = None) -> AggregationFinding:
    """Decide how prod's output relates to ref's (module docstring)."""
    yardstick = max(_median(ref_error), unit_roundoff)
    dev = _median(deviation)
    summary = ratio_summary(ratio)
    proportional = _median(scaled_residual) <= MATCH * yardstick * max(1.0, abs(summary.median))
    constant = bool(proportional and summary.spread <= MATCH * yardstick)
    base = dict(deviation=dev, yardstick=yardstick, ratio=summary, constant=constant)
    best = min(hypotheses, key=lambda h: h.median) if hypotheses else None
    closest = {}
    if best is not None:
        share = 1.0 - best.median / dev if dev > 0 and math.isfinite(dev) else math.nan
        closest = dict(hypothesis=best.name, hypothesis_text=best.text, hypothesis_short=best.short or best.text,
                       residual=best.median, explained_share=share)
    if best is not None and not best.reference and best.median <= MATCH * yardstick and (
            dev > MATCH * yardstick or beats(best.residual, deviation)):
        return AggregationFinding(HYPOTHESIS, **base, **closest)
    if dev <= MATCH * yardstick:
        return AggregationFinding(AGREES, **base, **closest)
    if constant:
        tolerance = MATCH * yardstick + 3.0 * summary.spread / math.sqrt(max(summary.replicates, 1))
        found = match_constant(summary.median, tolerance, constants)
        name, value = found if found is not None else (None, None)
        return AggregationFinding(FACTOR, **base, factor=name, factor_value=value, **closest)
    found = associate(ratio, quantities or {})
    if found is not None:
        return AggregationFinding(TRACKS, **base, association=found, **closest)
    return AggregationFinding(UNEXPLAINED, **base, **closest)


def short_sentence(f: AggregationFinding) -> str:
    """A few words for a table cell."""
    r = f.ratio
    if f.status == AGREES:
        return "agrees"
    if f.status == HYPOTHESIS:
        return f"= {f.hypothesis_short}"
    if f.status == FACTOR:
        return f"= ref's x {r.median:.4g}" + (f" = {f.factor}" if f.factor is not None else "")
    if f.status == TRACKS:
        return f"ratio {r.median:.3g} depends on the {f.association.quantity}"
    return f"deviates by {f.deviation:.2g} (ratio {r.median:.3g}, varies)"


def sentence(output: str, f: AggregationFinding) -> str:
    """One line naming the aggregation (what the reports print)."""
    r = f.ratio
    ratio = (f"ratio prod/ref {r.median:.4g} (quartiles {r.low:.4g}-{r.high:.4g})" if r.replicates else "no ratio")
    if f.status == AGREES:
        return f"{output}: agrees with ref within rounding (deviation {f.deviation:.2g}, ref's own {f.yardstick:.2g})"
    if f.status == HYPOTHESIS:
        what = f"prod's = {f.hypothesis_text}" if f.hypothesis_text.startswith("ref's x") else \
            f"prod computes {f.hypothesis_text}"
        return (f"{output}: {what} (residual {f.residual:.2g}, at the rounding of ref, {f.yardstick:.2g}; deviation "
                f"from ref {f.deviation:.2g}; {ratio})")
    if f.status == FACTOR:
        if f.factor is not None:
            return (f"{output}: prod's = ref's x {r.median:.4g} = {f.factor} ({f.factor_value:.4g}), the same factor in "
                    f"every replicate (spread {r.spread:.2g})")
        return (f"{output}: prod's = ref's x {r.median:.4g}, the same factor in every replicate (spread "
                f"{r.spread:.2g}), which matches no quantity of the configuration")
    closest = ""
    if f.hypothesis_text is not None and f.explained_share is not None and f.explained_share > 0.5:
        closest = f"; closest aggregation: {f.hypothesis_text} ({100 * f.explained_share:.0f}% of the deviation)"
    if f.status == TRACKS:
        a = f.association
        return (f"{output}: deviates by {f.deviation:.2g}; the {ratio} depends on the {a.quantity} (Spearman "
                f"{a.rho:+.2f}, p = {a.p_value:.2g}){closest}")
    return f"{output}: deviates by {f.deviation:.2g}; the {ratio} varies per replicate{closest}"


# --- across configurations -------------------------------------------------------------------------


def sweep_dependence(rows: list[dict]) -> str:
    """Which property of the configuration separates the ones that deviate from the ones that agree.

    ``rows``: one dict per configuration with ``label``, ``deviates`` (bool), ``accumulation``,
    ``window``, ``world``, ``split`` and ``deviation`` (a magnitude, e.g. the largest median relative
    deviation over the outputs). Returns a sentence; it names a property only when it separates the
    configurations exactly, and says when the deviation grows with the accumulation steps or the
    world size among the configurations that deviate."""
    if not rows:
        return "no configuration was certified"
    bad = [r for r in rows if r["deviates"]]
    if not bad:
        return f"every configuration agrees with ref ({len(rows)} certified)"
    if len(bad) == len(rows):
        head = "every configuration deviates"
    else:
        predicates = (
            ("accumulation > 1", lambda r: r["accumulation"] > 1),
            ("a partial window (fewer micro-batches than the accumulation steps)", lambda r: r["window"] < r["accumulation"]),
            ("world > 1", lambda r: r["world"] > 1),
            ("a context split", lambda r: r["world"] > 1 and r["split"] == "context"),
            ("a tensor split", lambda r: r["world"] > 1 and r["split"] == "tensor"),
            ("more than one micro-batch", lambda r: r["window"] > 1),
        )
        head = None
        for text, pred in predicates:
            if all(pred(r) == r["deviates"] for r in rows):
                head = f"deviates exactly at the configurations with {text}"
                break
        if head is None:
            head = "deviates at " + ", ".join(r["label"] for r in bad) + "; agrees at " + ", ".join(
                r["label"] for r in rows if not r["deviates"])
    growth = []
    for key, name in (("accumulation", "accumulation steps"), ("world", "world size")):
        others = [k for k in ("accumulation", "window", "world", "split") if k != key]
        groups: dict[tuple, list[dict]] = {}
        for r in bad:
            groups.setdefault(tuple(r[k] for k in others if k != "window" or key != "accumulation"), []).append(r)
        for group in groups.values():
            if len(group) >= 2:
                group = sorted(group, key=lambda r: r[key])
                devs = [r["deviation"] for r in group]
                if all(b > 1.1 * a for a, b in zip(devs, devs[1:])):  # grows beyond noise
                    steps = ", ".join(f"{r[key]}: {r['deviation']:.2g}" for r in group)
                    growth.append(f"grows with the {name} ({steps})")
    return head + ("; the deviation " + "; ".join(growth) if growth else "")
