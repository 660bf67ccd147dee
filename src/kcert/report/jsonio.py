"""The JSON report, schema ``kcert.certificate/1`` (docs/json-schema.md).

Strict JSON has no infinities or NaN: non-finite numbers are written as the strings
"Infinity", "-Infinity" and "NaN" wherever a number may be non-finite.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np

from ..certificate import BiasResult, BitwiseResult, Certificate, VarianceResult
from ..numbers import json_number as number
from ..results.gates import ALGEBRA, BIAS, VARIANCE
from ..stats.bias import REASON_CODE
from ..verdict import Verdict
from . import checks

SCHEMA = "kcert.certificate/1"


def numbers(a) -> list:
    return [number(v) for v in np.asarray(a, np.float64).reshape(-1)]


def _bias(b: BiasResult) -> dict:
    stats = {}
    for t in b.tests:
        stats[t.statistic] = {
            "count": [int(c) for c in t.count],
            "mean": numbers(t.mean),
            "std": numbers(t.std),
            "z": numbers(t.z),
            "critical": numbers(t.critical),
            "standardized_effect": numbers(t.standardized_effect),
            "effect_ulp": numbers(t.effect_ulp),
            "prod_bias_ulp": None if t.prod_bias_ulp is None else numbers(t.prod_bias_ulp),
            "ref_bias_ulp": None if t.ref_bias_ulp is None else numbers(t.ref_bias_ulp),
            "verdict": [Verdict.from_code(v).value for v in t.verdict],
            "reason": [REASON_CODE[int(r)] for r in t.reason],
        }
    return {
        "output": b.output,
        "dtype": b.dtype,
        "verdict": b.verdict.value,
        "replicates": b.replicates,
        "horizon": b.horizon,
        "thresholds": {"z_star": b.thresholds.z_star, "ulp_floor": b.thresholds.ulp_floor, "s_min": b.s_min,
                       "power": b.thresholds.power, "warn_below_floor": b.thresholds.warn_below_floor,
                       "profile_alpha": b.thresholds.profile_alpha, "profile_ratio": b.thresholds.profile_ratio},
        "familywise_error_bound": number(b.familywise_error_bound),
        "min_detectable_effect": number(b.min_detectable_effect),
        "horizon_covered": number(b.horizon_covered),
        "replicates_for_horizon": b.replicates_for_horizon,
        "attribution": b.attribution,
        "harm_format": b.harm_format,
        "failing_buckets": b.count(Verdict.FAIL),
        "warning_buckets": b.count(Verdict.WARN),
        "nonfinite": {"prod": b.nonfinite_prod, "ref": b.nonfinite_ref, "replicates": list(b.nonfinite_replicates)},
        "buckets": {"count": b.buckets, "labels": list(b.bucket_labels),
                    "reference_magnitude": numbers(b.reference_magnitude), "ulp": numbers(b.ulp)},
        "statistics": stats,
        "ref_profile": _ref_profile(b.ref_profile),
        "findings": [_finding(f) for f in b.findings(limit=50)],
        "diagnostics": [d.to_dict() for d in b.diagnostics],
    }


def _ref_profile(e) -> dict | None:
    """The bucket-wise FAILs set against ref's own bias profile and the profile rule's decision (None: no FAIL)."""
    if e is None:
        return None
    return {"buckets": e.buckets, "lowest_ratio": number(e.lowest_ratio), "highest_ratio": number(e.highest_ratio),
            "within": e.within, "alpha": e.alpha, "ratio_limit": e.ratio_limit,
            "statistics": [{"statistic": s.statistic, "tested": s.tested, "highest_ratio": number(s.highest_ratio),
                            "swap_p": number(s.swap_p)} for s in e.statistics]}


def _finding(f) -> dict:
    d = asdict(f)
    d["verdict"] = f.verdict.value
    for key, value in d.items():
        if isinstance(value, float):
            d[key] = number(value)
    return d


def _tail_ratio(v: VarianceResult) -> dict | None:
    """The bound the variance verdict rests on (docs/json-schema.md, "variance")."""
    iv = v.interval
    if iv is None:
        return None
    h = iv.heterogeneity
    return {
        "estimate": number(iv.estimate), "common_shape_estimate": number(iv.common_estimate),
        "separate_shapes_estimate": number(iv.separate_estimate),
        "fail_estimate": number(v.fail_estimate),
        "lower": number(iv.lower), "upper": number(iv.upper), "alpha": iv.alpha, "deviance": number(iv.deviance),
        "separate_upper": number(iv.separate_upper), "separate_alpha": number(iv.separate_alpha),
        "model": iv.model, "slack": iv.slack, "shape_bounds": [number(x) for x in iv.shape_bounds],
        "prod": {"threshold": number(iv.threshold_prod), "exceedances": iv.exceedances_prod,
                 "shape": number(iv.shape_prod), "scale": number(iv.scale_prod),
                 "return_level": number(iv.return_level_prod)},
        "ref": {"threshold": number(iv.threshold_ref), "exceedances": iv.exceedances_ref,
                "shape": number(iv.shape_ref), "scale": number(iv.scale_ref),
                "return_level": number(iv.return_level_ref)},
        "heterogeneity_test": None if h is None else {
            "statistic": number(h.statistic), "p_value": number(h.p_value), "shape_prod": number(h.shape_prod),
            "shape_ref": number(h.shape_ref), "shape_common": number(h.shape_common), "level": h.level,
            "rejects": h.rejects},
        "threshold_stability": [{"quantile": q, "estimate": number(r)} for q, r in v.threshold_stability],
        "confirmation": None if v.confirmation is None else [number(r) for r in v.confirmation],
        "assumptions": list(v.assumptions),
    }


def _observed(v: VarianceResult) -> dict | None:
    """The observed range against the PASS line, before any extrapolation (docs/json-schema.md)."""
    o = v.observed
    if o is None:
        return None
    return {"ratio": number(o.ratio), "max_prod": number(o.max_prod), "max_ref": number(o.max_ref),
            "line": o.line, "p_value": number(o.p_value), "depth": o.depth, "prod_in_top": o.prod_in_top,
            "scanned": o.scanned}


def _paired(v: VarianceResult) -> dict | None:
    """The shape difference bounded through the pairs, when it decided (docs/json-schema.md)."""
    p = v.paired
    if p is None:
        return None
    return {"ratio_upper": number(p.ratio_upper), "difference_upper": number(p.upper), "growth": number(p.growth),
            "share": p.share, "max_difference": number(p.max_difference), "positive": p.positive,
            "alpha": p.alpha}


def _rare_events(v: VarianceResult) -> dict | None:
    """The smallest per-call rate of a rare defect the replicates could have shown (docs/json-schema.md)."""
    r = v.rare_events
    if r is None:
        return None
    return {"replicates": r.replicates, "confidence": r.confidence, "rate": number(r.rate),
            "horizon": r.horizon, "calls_at_horizon": number(r.calls_at_horizon)}


def _report_tail(v: VarianceResult) -> dict | None:
    """The report's fit of K and its U = r_T + 3 se, kept for comparison."""
    t = v.tail
    if t is None:
        return None
    return {
        "threshold": number(t.threshold), "threshold_quantile": t.threshold_quantile, "exceedances": t.n_exceedances,
        "exceedance_rate": number(t.exceedance_rate), "shape": number(t.shape), "scale": number(t.scale),
        "shape_bounds": [number(x) for x in t.shape_bounds], "return_level": number(t.return_level),
        "standard_error": number(t.standard_error), "upper_bound": number(t.upper_bound),
        "horizon_too_short": bool(t.horizon_too_short), "bootstrap": t.bootstrap,
    }


def _variance(v: VarianceResult) -> dict:
    th = v.thresholds
    return {
        "output": v.output,
        "dtype": v.dtype,
        "harm_format": v.harm_format,
        "verdict": v.verdict.value,
        "reason": v.reason,
        "horizon": v.horizon,
        "thresholds": {"warn": th.warn, "fail": th.fail, "threshold_quantile": th.threshold_quantile,
                       "min_exceedances": th.min_exceedances, "bootstrap": th.bootstrap, "alpha": th.alpha,
                       "heterogeneity_level": th.heterogeneity_level, "fail_on": th.fail_on, "slack": th.slack,
                       "separate_fail_level": th.separate_fail_level, "separate_alpha": th.separate_alpha,
                       "observed_level": th.observed_level, "observed_depth": th.observed_depth,
                       "rare_confidence": th.rare_confidence, "tied_share": th.tied_share},
        "stopping_rule": v.stopping_rule,
        "replicates": v.replicates,
        "looks": list(v.looks),
        "errors": {
            "prod": numbers(v.error_prod), "ref": numbers(v.error_ref), "epsilon": numbers(v.epsilon),
            "prod_quantiles": {str(q): number(x) for q, x in v.error_summary("prod").items()},
            "ref_quantiles": {str(q): number(x) for q, x in v.error_summary("ref").items()},
            "prod_closer_share": number(v.prod_closer_share), "tied_share": number(v.prod_tied_share),
        },
        "tail_ratio": _tail_ratio(v),
        "observed": _observed(v),
        "paired": _paired(v),
        "rare_events": _rare_events(v),
        "lattice_spacing": {"prod": number(v.lattice_spacing[0]), "ref": number(v.lattice_spacing[1])},
        "k": {
            "zero": v.n_zero, "positive": v.n_positive, "infinite": v.n_infinite, "undefined": v.n_undefined,
            "quantiles": {str(q): number(x) for q, x in v.quantiles().items()},
            "values": numbers(v.amplification),
        },
        "tail": _report_tail(v),
        "diagnostics": [d.to_dict() for d in v.diagnostics],
    }


def _proof(p) -> dict | None:
    """Gate 1's symbolic proof level (None: not attempted)."""
    if p is None:
        return None
    witness = None
    if p.witness is not None:
        witness = {k: number(v) if isinstance(v, float) else v for k, v in p.witness.items()}
    return {"outcome": p.outcome, "reason": p.reason, "note": p.note,
            "shape": {k: list(v) for k, v in p.shape.items()}, "held": list(p.held), "witness": witness}


def _ladder(lad) -> dict | None:
    """Gate 1's precision ladder (None: not run)."""
    if lad is None:
        return None
    return {
        "oracle": lad.oracle, "grid": lad.grid, "working_dtype": lad.working_dtype, "points": lad.points,
        "wide_points": lad.wide_points, "small_points": lad.small_points, "rounding_multiple": lad.rounding_multiple,
        "same_precision": lad.same_precision,
        "rungs": [{"dtype": r.dtype, "accepted": r.accepted, "reason": r.reason,
                   "prod_error": [number(v) for v in r.prod_error], "ref_error": [number(v) for v in r.ref_error],
                   "output_dtypes": list(r.output_dtypes), "ref_reason": r.ref_reason} for r in lad.rungs],
        "outputs": [{"output": o.output, "outcome": o.outcome, "judged": o.judged,
                     "amplification": number(o.amplification), "resolution": number(o.resolution),
                     "error": number(o.error), "internal": o.internal, "harm_format": o.harm_format,
                     "resolution_harm": number(o.resolution_harm), "points": o.points, "worst_point": o.worst_point, "bound": o.bound,
                     "amplifications": [number(v) for v in o.amplifications],
                     "yardsticks": [number(v) for v in o.yardsticks]} for o in lad.outputs],
    }


def _bitwise(b: BitwiseResult) -> dict:
    """L0, informational (docs/json-schema.md, "bitwise")."""
    g = b.growth
    growth = None
    if g is not None:
        growth = {
            "early_replicates": g.early_replicates, "replicates": g.replicates, "expected": number(g.expected),
            "cut": number(g.cut), "threshold": g.threshold, "significant_buckets": g.significant,
            "median_growth": number(g.median_growth),
            "z_early": {stat: numbers(z) for stat, z in zip(g.statistics, g.z_early)},
        }
    return {
        "output": b.output,
        "dtype": b.dtype,
        "replicates": b.replicates,
        "classification": b.classification,
        "reason": b.reason,
        "elements": b.elements,
        "bitwise_equal": b.bitwise_equal,
        "fraction_equal": number(b.fraction_equal),
        "ulp_histogram": {"bins": list(b.bin_labels), "counts": [int(c) for c in b.ulp_histogram]},
        "growth": growth,
    }


def _algebra_block(cert: Certificate, gate) -> dict:
    a = cert.algebra
    return {
        "verdict": a.verdict.value,
        "reason": a.reason,
        "level": a.level,
        "points": a.points,
        "wide_points": a.wide_points,
        "small_points": a.small_points,
        "ref_side": a.ref_side,
        "prod_side": a.prod_side,
        "fail_floor": a.fail_floor,
        "rounding_shrink": a.rounding_shrink,
        "outputs": [
            {"output": o.output, "discrepancy_float64": number(o.discrepancy_float64),
             "discrepancy_float32": number(o.discrepancy_float32), "shrink": number(o.shrink),
             "verdict": o.verdict.value}
            for o in a.outputs
        ],
        "diagnostics": [d.to_dict() for d in a.diagnostics],
        "proof": _proof(a.proof),
        "level_text": a.level_text,
        "ladder": _ladder(a.ladder),
        "untested_accepted": a.untested_accepted,
        "untested_limit": a.untested_limit,
    }


def _outputs_block(render):
    """A per-output gate's block: its verdict, each output's object (``render``), and why it was skipped."""
    def block(cert: Certificate, gate) -> dict:
        out = {"verdict": gate.verdict(cert).value, "outputs": [render(r) for r in gate.results(cert)]}
        why = gate.skipped(cert)
        if why:
            out["reason"] = why
        return out
    return block


# Each gate's block of "gates" (docs/json-schema.md); a gate not named here writes its verdict, each
# result's own ``to_json()`` and why it was skipped.
_BLOCKS = {ALGEBRA.name: _algebra_block, BIAS.name: _outputs_block(_bias), VARIANCE.name: _outputs_block(_variance)}
_OTHER = _outputs_block(lambda r: r.to_json())


def to_dict(cert: Certificate) -> dict:
    p = cert.provenance
    return {
        "schema": SCHEMA,
        "case": cert.case,
        "description": cert.description,
        "verdict": cert.verdict.value,
        "gates": {g.name: _BLOCKS.get(g.name, _OTHER)(cert, g) for g in cert.gate_list},
        "bitwise": [_bitwise(b) for b in cert.bitwise],
        **checks.to_json(cert),  # adequacy, peer_rules, shape_sweep (docs/kernelbench.md)
        "outputs": [
            {"name": o.name, "shape": list(o.shape), "dtype": o.dtype, "prod_dtype": o.prod_dtype,
             "buckets": o.buckets, "bucketing": o.bucketing}
            for o in cert.outputs
        ],
        "notes": list(cert.notes),
        "provenance": {
            "seed": p.seed,
            "replicates": p.replicates,
            "max_replicates": p.max_replicates,
            "horizon": p.horizon,
            "dtype": p.dtype,
            "device": p.device,
            "probes": p.probes,
            "command": p.command,
            "environment": p.environment,
            "date": p.date,
            "wall_time_s": p.wall_time_s,
            "timings": {stage: seconds for stage, seconds in p.timings.items()},
            "resumed": p.resumed,
        },
    }


def dumps(certs: list[Certificate], several: bool | None = None) -> str:
    """The JSON report (docs/json-schema.md, "One object or an array"): the certificate object when the
    command certified one case, an array of certificate objects, in run order, when it certified
    several (``several``; default: more than one certificate given), also when only one of them
    ended with a certificate."""
    several = len(certs) > 1 if several is None else several
    payload = [to_dict(c) for c in certs] if several else to_dict(certs[0])
    return json.dumps(payload, indent=1, allow_nan=False)
