"""The algebra block and the L0 (bitwise) block of a certificate, built once as plain rows of text and
rendered twice: by the terminal (:mod:`kcert.report.terminal`) and by the HTML page
(:mod:`kcert.report.html`). Every number is formatted here; the renderers only lay the rows out.

Pure: no rich, no matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..certificate import AlgebraResult, BiasResult, BitwiseResult, Provenance
from ..numbers import fmt
from ..results.gates import BUILTIN
from ..stats.bias import FAIL, PASS, WARN
from ..stats.bitwise import COHERENT

# --- the algebra gate's evidence ------------------------------------------------------------------


@dataclass(frozen=True)
class ProofView:
    """The symbolic proof level of Gate 1."""

    outcome: str  # "proved", "disproved" or "not reached"
    reason: str  # why it was not reached
    seconds: str  # "0.12"
    shape: str  # the small shape it was evaluated at: "x (2, 4, 8), w (8,)"
    note: str  # what was shown, or why the proof was not reached
    witness: str  # "witness output at [1, 2, 4]: ref ..., prod ... (relative ..., algebra draw 3)"; "" if none

    @property
    def reached(self) -> bool:
        return self.outcome != "not reached"


@dataclass(frozen=True)
class RungView:
    """One precision of the precision ladder."""

    dtype: str
    used: bool
    reason: str  # why prod's rung was refused or dropped
    errors: tuple[tuple[str, str], ...]  # per output: prod's and ref's relative error ("-": ref did not run)


@dataclass(frozen=True)
class LadderView:
    """The precision ladder: every precision tried and the decision per output."""

    oracle: str
    grid: str
    points: int
    outputs: tuple[str, ...]
    rungs: tuple[RungView, ...]
    decisions: tuple[str, ...]  # one sentence per judged output


@dataclass(frozen=True)
class AlgebraView:
    level: str  # "proof", "identity test", "precision ladder" or "skipped"
    level_text: str  # the evidence in words (AlgebraResult.level_text)
    proof: ProofView | None  # None: the proof was not attempted
    ladder: LadderView | None  # None: the ladder did not run
    untested_limit: str | None  # what an accepted untested algebra leaves untested; None when not accepted


def algebra_view(a: AlgebraResult) -> AlgebraView:
    return AlgebraView(a.level, a.level_text, _proof(a), _ladder(a), a.untested_limit if a.untested_accepted else None)


def _proof(a: AlgebraResult) -> ProofView | None:
    p = a.proof
    if p is None:
        return None
    witness = ""
    if p.witness is not None:
        w = p.witness
        witness = (f"witness {w['output']} at {w['index']}: ref {w['ref']:.6g}, prod {w['prod']:.6g} "
                   f"(relative {w['relative_difference']:.3g}, algebra draw {w['point']})")
    return ProofView(p.outcome, p.reason, f"{p.seconds:.2f}", p.shape_text, p.note, witness)


def _ladder(a: AlgebraResult) -> LadderView | None:
    lad = a.ladder
    if lad is None:
        return None
    rungs = tuple(RungView(r.dtype, r.accepted, r.reason,
                           tuple((f"{pe:.2g}", "-" if re is None else f"{re:.2g}")
                                 for pe, re in zip(r.prod_error, r.ref_error)))
                  for r in lad.rungs)
    decisions = tuple(_ladder_decision(o, lad) for o in lad.outputs if o.judged)
    return LadderView(lad.oracle, lad.grid, lad.points + lad.wide_points + lad.small_points,
                      tuple(o.output for o in lad.outputs), rungs, decisions)


_BOUND_TEXT = {"oracle": " (from prod's own error)", "ref": " (from prod - ref)"}


def _ladder_decision(o, lad) -> str:
    computed = f" (computed at {o.internal})" if o.internal and o.internal != o.judged else ""
    where = f", largest at {o.worst_point}" if o.worst_point and o.outcome in ("FAIL", "WARN") else ""
    group = " on the small-magnitude points" if o.points == "small" else ""
    return (f"{o.output}: {o.outcome}, judged at {o.judged}{computed}{group}, K = {fmt(o.amplification, 3)} "
            f"(<= {lad.rounding_multiple:g} is rounding){where}; resolution{_BOUND_TEXT.get(o.bound, '')} "
            f"{o.resolution:.2g} relative = "
            f"{fmt(o.resolution_harm, 2)} {o.harm_format} harm ULPs at the peak")


# --- L0, the bitwise layer --------------------------------------------------------------------------

# Mantissa bits per output format: beyond 2**(bits + 6) ULPs, two values of one sign differ by more
# than a factor 2**64, which no pair of outputs of one function does; such distances are pairs
# across or at zero (a sign flip, or one side 0 or subnormal), not large errors.
_MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float32": 23, "float64": 52}
_FAR_OFFSET = 6
_FIRST_DISTANCE_BIN = 3  # bin k >= 3 holds distances (2**(k-2), 2**(k-1)]


def zero_crossing_bins(dtype: str, bins: int) -> range:
    """The histogram bins (finite distances) that hold pairs across or at zero for ``dtype``."""
    bits = _MANTISSA_BITS.get(dtype)
    if bits is None:
        return range(0)
    first = max(_FIRST_DISTANCE_BIN, bits + _FAR_OFFSET + 2)
    return range(first, bins - 1)  # the last bin is the non-finite one


def ulp_histogram_text(b: BitwiseResult) -> str:
    """The non-empty ULP-distance bins as shares of the elements: ``0: 76.7% · 1: 23.3%``; the
    distances only a pair across or at zero can have (bf16: above 8192 ULPs) are summed apart, so a
    sign flip around zero does not read as a huge error."""
    total = b.elements
    far = zero_crossing_bins(b.dtype, len(b.ulp_histogram))
    text = " · ".join(f"{label}: {100 * c / total:.3g}%" for k, (label, c) in
                      enumerate(zip(b.bin_labels, b.ulp_histogram)) if c and k not in far)
    crossing = int(sum(b.ulp_histogram[k] for k in far))
    if crossing:
        limit = 2 ** (_MANTISSA_BITS[b.dtype] + _FAR_OFFSET)
        text += (f"; across or at zero: {100 * crossing / total:.3g}% ({crossing:,} elements beyond {limit} ULPs: "
                 f"a sign flip, or one side 0 or subnormal; two {b.dtype} values of one sign that far apart "
                 f"differ by more than 2^64x)")
    return text


# --- which buckets are significant, and what the bias gate made of them ------------------------------


@dataclass(frozen=True)
class Significance:
    """The buckets significant (|z| above the critical value, z* as a Student t quantile at the run's R) on the
    bias gate's statistics (raw or sign-aligned mean of prod - ref) and the bias gate's verdict on each: the
    one count that the bias block and L0 both quote."""

    significant: int
    fail: int
    warn: int
    ref_bias: int  # PASS: the bias is ref's own against the float64 oracle, not prod's
    z_star: float
    ulp_floor: float
    shared: int = 0  # of ref_bias: prod's own bias above the floor, but a part of ref's (same sign, no larger)
    critical: float | None = None  # the |z| significance needed at the run's R (None: z* itself)
    within_profile: int = 0  # of warn: bucket-wise FAILs the profile rule judged within ref's own bias profile

    @property
    def passed(self) -> int:
        return self.significant - self.fail - self.warn

    def text(self) -> str:
        """``393 buckets significant (|z| > 5.03 on mean(prod - ref), raw or sign-aligned; z* = 5 at this R):
        0 FAIL, 0 WARN, 393 PASS as ref's own bias (...)``."""
        critical = self.z_star if self.critical is None else self.critical
        head = (f"{self.significant} bucket{'s' * (self.significant != 1)} significant (|z| > {critical:.3g} on "
                f"mean(prod - ref), raw or sign-aligned; z* = {self.z_star:g} at this R)")
        if not self.significant:
            return head
        parts = [f"{self.fail} FAIL", f"{self.warn} WARN" + (
            f" ({self.within_profile} a FAIL bucket by bucket, within ref's own bias profile)" if self.within_profile
            else "")]
        within = self.ref_bias - self.shared
        if within:
            parts.append(f"{within} PASS as ref's own bias (prod's bias against the float64 oracle is within "
                         f"the {self.ulp_floor:g}-ULP floor and no larger than ref's)")
        if self.shared:
            parts.append(f"{self.shared} PASS as a bias shared with ref (prod's own bias against the float64 oracle "
                         f"is above the floor but in ref's direction and no larger than ref's)")
        other = self.passed - self.ref_bias
        if other:
            parts.append(f"{other} PASS otherwise (all differences zero, or judged on the other statistic)")
        return f"{head}: {', '.join(parts)}"


def significance(b: BiasResult) -> Significance:
    """Count the significant buckets of ``b`` by the bias gate's verdict on them."""
    if not b.tests:
        return Significance(0, 0, 0, 0, b.thresholds.z_star, b.thresholds.ulp_floor)
    significant, verdicts, to_ref = b.significant_buckets(), b.bucket_verdicts(), b.attributed_to_ref()
    passed = significant & (verdicts == PASS)
    return Significance(int(significant.sum()), int((significant & (verdicts == FAIL)).sum()),
                        int((significant & (verdicts == WARN)).sum()), int((passed & to_ref).sum()),
                        b.thresholds.z_star, b.thresholds.ulp_floor, int((passed & b.shared_with_ref()).sum()),
                        b.critical_z(), int((significant & b.within_ref_profile()).sum()))


def reconcile(bw: BitwiseResult, b: BiasResult | None) -> str:
    """Why L0 can call a difference coherent where the bias gate PASSes (the two compare different
    things: L0 prod with ref, the bias gate also each side with the float64 oracle); "" when they agree."""
    if b is None or bw.classification != COHERENT:
        return ""
    sig = significance(b)
    if sig.fail or sig.warn:
        return f"the bias gate on these buckets: {sig.fail} FAIL, {sig.warn} WARN (see the bias block)"
    return (f"the bias gate PASSes them: L0 sees a coherent difference between prod and ref; the bias gate also "
            f"asks whose it is, and {sig.ref_bias} of the {sig.significant} buckets are ref's own bias against the "
            f"float64 oracle, not prod's (a PASS: prod is at least as accurate there)")


@dataclass(frozen=True)
class GrowthView:
    """The growth test of the bias statistics' |z| from about R/4 to R."""

    significant: int  # buckets with |z| above the threshold at R
    threshold: str
    replicates: int
    early_replicates: int
    median_growth: str  # median z(R) / z(early)
    expected: str  # what a coherent bias gives
    cut: str  # growth counts above this


@dataclass(frozen=True)
class BitwiseView:
    output: str
    dtype: str
    replicates: int
    classification: str
    reason: str  # why a part of the layer was not computed
    compared: bool  # any element was compared
    elements: str  # "1,024"
    equal: str  # bitwise-equal elements
    equal_share: str  # "76.7%" ("" when nothing was compared)
    all_equal: bool
    distances: str  # ulp_histogram_text
    farthest: str | None  # the farthest non-empty ULP-distance bin
    growth: GrowthView | None
    reconcile: str = ""  # what the bias gate made of the buckets L0 calls a coherent difference


def bitwise_view(b: BitwiseResult, bias: BiasResult | None = None) -> BitwiseView:
    compared = b.elements > 0
    g = b.growth
    growth = None if g is None else GrowthView(g.significant, f"{g.threshold:.3g}", g.replicates, g.early_replicates,
                                                fmt(g.median_growth), f"{g.expected:.3g}", f"{g.cut:.3g}")
    return BitwiseView(
        b.output, b.dtype, b.replicates, b.classification, b.reason, compared,
        elements=f"{b.elements:,}",
        equal=f"{b.bitwise_equal:,}",
        equal_share=f"{100 * b.fraction_equal:.3g}%" if compared else "",
        all_equal=b.fraction_equal == 1.0,
        distances=ulp_histogram_text(b) if compared else "",
        farthest=b.max_distance,
        growth=growth,
        reconcile=reconcile(b, bias),
    )


# --- the gates of several certificates ------------------------------------------------------------------


def gate_names(certs) -> list[str]:
    """The gates of ``certs`` as the columns of a table of several cases: the built-in three, then any
    other a certificate carries, in order of first appearance."""
    return list(dict.fromkeys(g.name for g in (*BUILTIN, *(g for c in certs for g in c.gate_list))))


# --- time per stage ------------------------------------------------------------------------------------

_STAGE_NAMES = {"l0": "L0", "peer_rules": "peer rules", "shape_sweep": "shape sweep"}  # any other: its own name


def _seconds(x: float) -> str:
    return f"{x:.2g}" if x < 1 else f"{x:.1f}"


def timing_text(p: Provenance) -> str:
    """The run's wall time and its split per stage: ``12.3 s (replicates 10.1, algebra 1.9, bias 0.01,
    ...)``, and how much a resumed run took from its checkpoint."""
    text = f"{p.wall_time_s:.1f} s"
    if p.timings:
        text += " (" + ", ".join(f"{_STAGE_NAMES.get(k, k)} {_seconds(v)}" for k, v in p.timings.items()) + ")"
    if p.resumed:
        text += f"; resumed from {p.resumed['checkpoint']} with {p.resumed['replicates']} replicates"
    return text
