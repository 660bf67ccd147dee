"""Named diagnostics: each has a stable code, a meaning and a remedy (DESIGN.md convention 7)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    remedy: str

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "remedy": self.remedy}


# code -> (meaning, remedy). Messages add the figures of the run.
CATALOGUE = {
    "low_power": (
        "the replicate budget cannot detect a bias at the harm boundary of the declared horizon",
        "raise --replicates towards the number quoted, or read PASS as covering only the horizon quoted",
    ),
    "zero_variance_bucket": (
        "some buckets have identical differences in every replicate: judged by the ULP floor alone",
        "check that the probe varies the inputs that reach these buckets",
    ),
    "untested_bucket": (
        "some buckets were populated by fewer than 2 replicates and were not tested",
        "widen the probe (e.g. router logits that reach every expert) or raise --replicates",
    ),
    "attributed_to_ref": (
        "significant prod-ref biases that are ref's: prod is within the ULP floor of the oracle and no more "
        "biased than ref there (judged PASS)",
        "no action for the migration; the reference itself carries the bias",
    ),
    "nonfinite_prod": (
        "prod produced non-finite values where ref is finite",
        "reproduce with the replicate's seed; look for overflow (exp of large logits) or 0/0",
    ),
    "nonfinite_ref": (
        "ref produced non-finite values where prod is finite: the reference is broken on this probe",
        "check the probe is in the reference's domain; review the reference kernel",
    ),
    "few_exceedances": (
        "too few positive K to fit a tail model",
        "raise --replicates; the verdict rests on the observed K alone",
    ),
    "threshold_lowered": (
        "the 0.90 quantile of the positive K left too few exceedances; the tail threshold was lowered",
        "raise --replicates so the report's 0.90 threshold keeps enough exceedances",
    ),
    "tail_heavier_than_bounded": (
        "a likelihood-ratio test rejects a bounded tail (xi <= 0): U is the free-xi bound and the verdict is "
        "at best WARN",
        "look for a denominator that can approach zero (cancellation, a max/sum near 0) or a data-dependent "
        "branch; more replicates sharpen the free-xi bound",
    ),
    "unstable_threshold": (
        "the return level moves more than the bound's own width when u moves from the 0.85 to the 0.95 "
        "quantile of the positive K: the GPD does not describe the tail at these thresholds",
        "raise --replicates (the threshold settles as exceedances grow); read U as model-dependent",
    ),
    "fail_not_confirmed": (
        "the FAIL is not reproduced on half the data: on the even or the odd replicates alone (two "
        "independent halves) the return level estimate is at or below the FAIL line",
        "rerun with --max-replicates raised (or another --seed) before acting on this FAIL",
    ),
    "tied_exceedances": (
        "many exceedances are tied (quantised errors); ties pull the GPD fit towards xi = -1, a short tail",
        "read U as resting on a coarse tail; more replicates or a finer output dtype spread the ties",
    ),
    "horizon_too_short": (
        "T * zeta <= 1: the horizon is shorter than the tail's return period, r_T is set to u",
        "nothing to do unless the horizon is wrong",
    ),
    "undefined_ratio": (
        "prod and ref are both non-finite against a finite oracle in some replicates: K is undefined",
        "both kernels overflow on this probe; check the probe's scale",
    ),
    "infinite_ratio": (
        "ref matches the oracle exactly where prod does not (K = inf) in some replicates",
        "reproduce with the replicate's seed and compare prod to the oracle element-wise",
    ),
    "oracle_unavailable": (
        "no float64 oracle: ref cannot run in real mode and no oracle was given",
        "pass Case(oracle=...) with a float64 math definition of the reference",
    ),
    "output_dtype_differs": (
        "prod returns another dtype than ref; ULPs follow ref's dtype",
        "make prod return the reference's dtype, or accept that its rounding is judged at ref's precision",
    ),
    "ill_conditioned_identity": (
        "the real-mode discrepancy does not shrink like rounding but is below the algebra FAIL floor",
        "read the code for constants or branches that differ; a tiny algebraic difference is likely",
    ),
    "proof_disagrees_with_identity": (
        "the symbolic proof at a small shape and the identity test at the probe shape disagree: the kernels "
        "compute different things at the two shapes (a size-dependent code path or a size closed over)",
        "read the kernels for branches on sizes, tiles or chunks; certify with probes at production shapes",
    ),
}


def diagnostic(code: str, detail: str = "") -> Diagnostic:
    meaning, remedy = CATALOGUE[code]
    return Diagnostic(code, f"{meaning}: {detail}" if detail else meaning, remedy)
