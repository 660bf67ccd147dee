"""Named diagnostics: each has a stable code, a meaning and a remedy (every diagnostic has a stable code, a meaning and a remedy)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .settings import DEFAULTS


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    remedy: str

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "remedy": self.remedy}


class Code(StrEnum):
    """Every diagnostic's stable code (a ``str``: the JSON report writes its value)."""

    LOW_POWER = "low_power"
    TOO_FEW_REPLICATES = "too_few_replicates"
    ZERO_VARIANCE_BUCKET = "zero_variance_bucket"
    UNTESTED_BUCKET = "untested_bucket"
    ATTRIBUTED_TO_REF = "attributed_to_ref"
    SHARED_WITH_REF = "shared_with_ref"
    FAIL_AGAINST_REF_PROFILE = "fail_against_ref_profile"
    WITHIN_REF_PROFILE = "within_ref_profile"
    NONFINITE_PROD = "nonfinite_prod"
    NONFINITE_REF = "nonfinite_ref"
    FEW_EXCEEDANCES = "few_exceedances"
    THRESHOLD_LOWERED = "threshold_lowered"
    TAIL_HEAVIER_THAN_REF = "tail_heavier_than_ref"
    UNSTABLE_THRESHOLD = "unstable_threshold"
    FAIL_NOT_CONFIRMED = "fail_not_confirmed"
    TIED_EXCEEDANCES = "tied_exceedances"
    LATTICE_ERRORS = "lattice_errors"
    PROD_TAIL_BEYOND_SLACK = "prod_tail_beyond_slack"
    SHAPE_DIFFERENCE_NOT_EXCLUDED = "shape_difference_not_excluded"
    OBSERVED_ABOVE_LINE = "observed_above_line"
    HORIZON_TOO_SHORT = "horizon_too_short"
    UNDEFINED_RATIO = "undefined_ratio"
    INFINITE_RATIO = "infinite_ratio"
    NONFINITE_REF_ERROR = "nonfinite_ref_error"
    ORACLE_UNAVAILABLE = "oracle_unavailable"
    OUTPUT_DTYPE_DIFFERS = "output_dtype_differs"
    ILL_CONDITIONED_IDENTITY = "ill_conditioned_identity"
    PROOF_DISAGREES_WITH_IDENTITY = "proof_disagrees_with_identity"
    FAKES_NOT_REJECTED = "fakes_not_rejected"
    DEGENERATE_PROBLEM = "degenerate_problem"
    SHAPE_SWEEP_FAIL = "shape_sweep_fail"


# code -> (meaning, remedy). Messages add the figures of the run.
CATALOGUE = {
    Code.LOW_POWER: (
        "the replicate budget cannot detect a bias at the harm boundary of the declared horizon",
        "raise --replicates towards the number quoted, or read PASS as covering only the horizon quoted",
    ),
    Code.TOO_FEW_REPLICATES: (
        "the run has fewer replicates than the gate needs before it may PASS (docs/verdicts.md): it WARNs instead",
        f"raise --replicates to at least the minimum quoted (the default is {DEFAULTS['replicates']})",
    ),
    Code.ZERO_VARIANCE_BUCKET: (
        "some buckets have identical differences in every replicate: judged by the ULP floor alone",
        "check that the probe varies the inputs that reach these buckets",
    ),
    Code.UNTESTED_BUCKET: (
        "some buckets were populated by fewer than 2 replicates and were not tested",
        "widen the probe (e.g. router logits that reach every expert) or raise --replicates",
    ),
    Code.ATTRIBUTED_TO_REF: (
        "significant prod-ref biases that are ref's: prod is within the ULP floor of the oracle and no more "
        "biased than ref there (judged PASS)",
        "no action for the migration; the reference itself carries the bias",
    ),
    Code.SHARED_WITH_REF: (
        "significant prod-ref biases where prod's own bias against the oracle exceeds the ULP floor but has ref's "
        "sign and is no larger than ref's: both carry it, prod the less (judged PASS)",
        "no action for the migration (prod moves towards float64); the working precision biases this output on "
        "both sides, often a small result made by cancellation: a wider format there removes it",
    ),
    Code.FAIL_AGAINST_REF_PROFILE: (
        "FAILing buckets set against ref's own bias profile: prod's own bias against the oracle there, over ref's "
        "own bias at the same rank of its profile on this output; the FAIL stands where the swap test rejects or a "
        "bucket exceeds the ratio limit (on an output too small for the swap test: a bucket exceeds ref's at its "
        "rank)",
        "far above 1, a bias beyond any ref carries: a migration defect; near 1 with a small p, prod carries "
        "more bias than ref over many buckets; the FAIL is prod's (docs/method.md, \"The working precision's own "
        "bias\")",
    ),
    Code.WITHIN_REF_PROFILE: (
        "bias FAIL judged WARN: within ref's own bias profile on this output (prod's own bias at each FAILing "
        "bucket over ref's at the same rank of its profile; the swap test of prod's profile against ref's)",
        "two equally correct roundings put their rounding biases on different buckets where few distinct inputs (a "
        "small vocabulary, fixed rows) make them reach the floor: rerun on more varied inputs or a wider format to "
        "confirm, or export the module and inspect its buckets; BiasThresholds(profile_alpha=None) gives the "
        "bucket-wise verdict (docs/method.md, \"The working precision's own bias\")",
    ),
    Code.NONFINITE_PROD: (
        "prod produced non-finite values where ref is finite",
        "reproduce with the replicate's seed; look for overflow (exp of large logits) or 0/0",
    ),
    Code.NONFINITE_REF: (
        "ref produced non-finite values where prod is finite: the reference is broken on this probe",
        "check the probe is in the reference's domain; review the reference kernel",
    ),
    Code.FEW_EXCEEDANCES: (
        "too few positive errors on a side to fit a tail model",
        "raise --replicates; the verdict rests on the observed errors alone",
    ),
    Code.THRESHOLD_LOWERED: (
        "the 0.90 quantile of a side's positive errors left too few exceedances; its threshold was lowered",
        "raise --replicates so the 0.90 threshold keeps enough exceedances",
    ),
    Code.TAIL_HEAVIER_THAN_REF: (
        "a likelihood-ratio test finds prod's error tail heavier in shape than ref's: the two tails are not "
        "compared under one shape, each side has its own, and U is wider",
        "look for a denominator that can approach zero (cancellation, a max/sum near 0) or a data-dependent "
        "branch in prod; more replicates sharpen both shapes",
    ),
    Code.UNSTABLE_THRESHOLD: (
        "the tail ratio moves more than the bound's own width when the thresholds move from the 0.85 to the "
        "0.95 quantile of the positive errors: the GPD does not describe the tails at these thresholds",
        "raise --replicates (the thresholds settle as exceedances grow); read U as model-dependent",
    ),
    Code.FAIL_NOT_CONFIRMED: (
        "the FAIL is not reproduced on half the data: on the even or the odd replicates alone (two "
        "independent halves) the tail ratio estimate is at or below the FAIL line",
        "rerun with --max-replicates raised (or another --seed) before acting on this FAIL",
    ),
    Code.TIED_EXCEEDANCES: (
        "many exceedances of a side are tied (quantised errors); ties pull the GPD fit towards xi = -1, a short tail",
        "read U as resting on a coarse tail; more replicates or a finer output dtype spread the ties",
    ),
    Code.LATTICE_ERRORS: (
        "a side's positive errors are mostly tied (on a lattice, as when outputs round the same way): each was "
        "spread within its lattice cell before the tail fit, prod's upwards and ref's downwards, so the bound "
        "still bounds the tail ratio of the errors as measured (docs/method.md, Gate 3)",
        "nothing to do; the spread is drawn from the run's seed, so the same seed gives the same certificate",
    ),
    Code.PROD_TAIL_BEYOND_SLACK: (
        "every prod error is within the one-unit slack, but prod's tail extrapolated to the horizon is not "
        "bounded within it: the tails are compared instead of passing without a fit",
        "read the comparison below; a prod far heavier than ref under the slack (ref's errors much smaller) "
        "can reach beyond it over the horizon",
    ),
    Code.SHAPE_DIFFERENCE_NOT_EXCLUDED: (
        "U is under the PASS line under one shared shape, but neither the bound with one shape per side nor the "
        "paired bound (prod's error as ref's plus a difference) is: prod's tail may be heavier in shape by less "
        "than the shape test can see at this R, so the PASS is held back",
        "more replicates narrow the separate-shapes bound: the run takes its next look when it has one; after "
        "its last, rerun with --max-replicates raised (at 2-4x the last look every benign module row measured so "
        "far PASSed this gate: docs/model.md, Settling a variance WARN), with --resume from its --checkpoint to "
        "keep the replicates done (without one, give --prior-max-replicates the run's cap: the certificate then "
        "states the level over both plans); read the QQ and return-level plots",
    ),
    Code.OBSERVED_ABOVE_LINE: (
        "the observed errors already put prod above the PASS line: the ratio of the largest errors "
        "(max a - slack) / max b is above it, or an exact test finds prod's largest errors above it more often "
        "than chance; the extrapolated bound may not PASS against the data",
        "reproduce the replicates with prod's largest errors (their seeds) and look for a rare path in prod "
        "(a clamp, a slow path, a race) that ref does not take",
    ),
    Code.HORIZON_TOO_SHORT: (
        "T * zeta <= 1: the horizon is shorter than the tail's return period, r_T is set to u",
        "nothing to do unless the horizon is wrong",
    ),
    Code.UNDEFINED_RATIO: (
        "prod and ref are both non-finite against a finite oracle in some replicates: no error to compare",
        "both kernels overflow on this probe; check the probe's scale",
    ),
    Code.INFINITE_RATIO: (
        "prod's error is non-finite where ref's is finite, or ref matches the oracle exactly in every replicate "
        "where prod does not: the tail ratio is infinite",
        "reproduce with the replicate's seed and compare prod to the oracle element-wise",
    ),
    Code.NONFINITE_REF_ERROR: (
        "ref's error is non-finite where prod's is finite in some replicates: they are left out of the tail "
        "comparison (the bias gate reports the broken reference)",
        "check the probe is in the reference's domain",
    ),
    Code.ORACLE_UNAVAILABLE: (
        "no float64 oracle: ref cannot run in real mode and no oracle was given",
        "pass Case(oracle=...) with a float64 math definition of the reference",
    ),
    Code.OUTPUT_DTYPE_DIFFERS: (
        "prod returns another dtype than ref; ULPs follow ref's dtype",
        "make prod return the reference's dtype, or accept that its rounding is judged at ref's precision",
    ),
    Code.ILL_CONDITIONED_IDENTITY: (
        "the real-mode discrepancy does not shrink like rounding but is below the algebra FAIL floor",
        "read the code for constants or branches that differ; a tiny algebraic difference is likely",
    ),
    Code.PROOF_DISAGREES_WITH_IDENTITY: (
        "the symbolic proof at a small shape and the identity test at the probe shape disagree: the kernels "
        "compute different things at the two shapes (a size-dependent code path or a size closed over)",
        "read the kernels for branches on sizes, tiles or chunks; certify with probes at production shapes",
    ),
    Code.FAKES_NOT_REJECTED: (
        "the adequacy check ran fake kernels (zeros, a constant, the input passed through, a stale output, ref "
        "rounded to a coarser format, ref of a fresh input) through the same probes and gates, and the "
        "certification does not FAIL these: it cannot tell them from a correct kernel, so it may not PASS",
        "widen the probe so it reaches what the fake gets wrong (signed inputs, the values the op changes), or "
        "judge harm in a finer format (Case(training_dtype=...)); docs/kernelbench.md",
    ),
    Code.DEGENERATE_PROBLEM: (
        "ref itself is degenerate on this probe: constant, or independent of an input; any kernel that "
        "returns that constant, or ignores that input, is indistinguishable from it",
        "fix the problem (a reference that outputs the same thing for every input certifies nothing), or "
        "draw inputs that reach its non-constant part",
    ),
    Code.SHAPE_SWEEP_FAIL: (
        "the certification FAILs at shapes derived from the given one (non-powers of two, ragged tails, size-1 "
        "axes, lengths past block sizes), though not necessarily at the given shape: a defect that hides at it",
        "reproduce at the shape named (kcert certify with probes at that shape) and look for tile, block or "
        "mask logic that depends on the size",
    ),
}


def diagnostic(code: Code, detail: str = "") -> Diagnostic:
    meaning, remedy = CATALOGUE[code]
    return Diagnostic(code=Code(code).value, message=f"{meaning}: {detail}" if detail else meaning, remedy=remedy)


def raised(diagnostics, *codes: Code) -> bool:
    """Whether any of ``diagnostics`` has one of ``codes``; a code the catalogue does not hold is a
    KeyError (a misspelt code must not read as "not raised")."""
    for code in codes:
        if code not in CATALOGUE:
            raise KeyError(f"no diagnostic has the code {code!r}")
    return any(d.code in codes for d in diagnostics)
