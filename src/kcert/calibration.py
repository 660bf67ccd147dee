"""``kcert calibrate``: run the known-good pairs (positive controls) of operator families over several
seeds, record the null distribution of the variance gate's U and of the bias gate's effects, and
say which thresholds the families' null samples support (issue 4, item 5; docs/calibration.md).

Every positive control is a null draw: a WARN or FAIL it gets is a false alarm. Per output and
seed this records U (what a PASS needs under the WARN line: the profile-likelihood upper bound of the
tail ratio A_T, the separate-shapes bound or the paired bound, whichever is smaller, and the observed ratio, the
largest of them), the A_T estimate, whether
the shape test found prod's tail heavier, the variance verdict, the bias gate's largest |z| and largest effect in
ULP (raw and sign-aligned, over all tested buckets and over the significant ones) and its verdict.
The arithmetic of rates and proposals is pure (kcert.stats.calibration).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .certificate import BiasResult, Certificate, VarianceResult
from .certification import certify
from .diagnostics import Code, raised
from .errors import KcertError, ParameterError
from .gates.bias import rejudge
from .numbers import fmt
from .numbers import json_number as number
from .stats.thresholds import BiasThresholds, VarianceThresholds
from .stats.calibration import LADDER, TARGET_RATE, Rate, WarnLineProposal, propose_warn_line
from .verdict import Verdict

SCHEMA = "kcert.calibration/1"
QUICK_REPLICATES = 256  # the cap of --quick, as `kcert controls --quick`


@dataclass(frozen=True)
class OutputSample:
    """One output of one known-good control at one seed."""

    family: str
    control: str
    seed: int
    output: str
    replicates: int  # after the variance gate's adaptive looks
    bias_verdict: str
    max_abs_z: float  # largest finite |z| over tested buckets and statistics
    infinite_z: int  # buckets with a constant non-zero difference (z = inf)
    max_effect_ulp_raw: float
    max_effect_ulp_sign_aligned: float | None  # None when the sign-aligned statistic is off
    max_significant_effect_ulp: float | None  # over buckets with |z| > z*; None when none is
    bias_warn_buckets: int
    bias_fail_buckets: int
    familywise_error_bound: float
    variance_verdict: str | None = None  # None: no oracle, the variance gate did not run
    upper_bound: float | None = None  # what a PASS needs under the WARN line (VarianceResult.pass_bound); None: no tail
    return_level: float | None = None  # the A_T estimate U bounds (the tail ratio at the horizon)
    shapes_differ: bool = False  # the shape test found prod's error tail heavier than ref's
    variance_structural: bool = False  # not PASS for a reason no WARN line removes
    max_k: float | None = None
    # the same moments judged without the oracle's attribution (what a case without an oracle gets)
    bias_verdict_no_attribution: str | None = None
    differing_share: float | None = None  # share of the output's elements where prod differs from ref (L0)

    def to_dict(self) -> dict:
        return {k: number(v) if isinstance(v, float) else v for k, v in self.__dict__.items()}


def structural_alarm(v: VarianceResult) -> bool:
    """The verdict is above PASS whatever the WARN line: FAIL, an infinite or undefined tail ratio, too
    few replicates for a PASS, no tail fit although prod exceeds the slack, or the exact test of the
    observed range rejecting (it holds a PASS back at the line it was run at)."""
    observed = v.observed is not None and v.observed.p_value < v.thresholds.observed_level
    return (v.verdict is Verdict.FAIL or raised(v.diagnostics, Code.INFINITE_RATIO, Code.UNDEFINED_RATIO,
                                                Code.TOO_FEW_REPLICATES)
            or (v.interval is None and v.verdict is not Verdict.PASS) or observed)


def _finite_max(values) -> float:
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


def output_samples(family: str, control: str, seed: int, cert: Certificate) -> list[OutputSample]:
    """The calibration record of each output of one certificate."""
    variance = {v.output: v for v in cert.variance}
    shares = {b.output: (1.0 - b.fraction_equal if b.elements else 1.0) for b in cert.bitwise}
    out = []
    for b in cert.bias:
        s = _sample(family, control, seed, cert.provenance.replicates, b, variance.get(b.output))
        out.append(replace(s, differing_share=shares.get(b.output)))
    return out


def is_null_evidence(s: OutputSample) -> bool:
    """An output whose prod differs from ref in at least DIFFERS_SHARE of its elements: only such a
    pair can raise a false alarm, so only it counts in a null rate (a bitwise-identical pair cannot)."""
    from .controls.suite import DIFFERS_SHARE

    return s.differing_share is not None and s.differing_share >= DIFFERS_SHARE


def _sample(family, control, seed, replicates, b: BiasResult, v: VarianceResult | None) -> OutputSample:
    tests = {t.statistic: t for t in b.tests}
    tested = [t.count >= 2 for t in b.tests]
    z = np.concatenate([np.abs(t.z[m]) for t, m in zip(b.tests, tested)]) if b.tests else np.zeros(0)
    significant = [np.abs(t.effect_ulp[m & t.significant]) for t, m in zip(b.tests, tested)]
    significant = np.concatenate(significant) if significant else np.zeros(0)

    def effect(stat):
        t = tests.get(stat)
        return None if t is None else _finite_max(t.effect_ulp[t.count >= 2])

    fields = {
        "family": family, "control": control, "seed": seed, "output": b.output, "replicates": replicates,
        "bias_verdict": b.verdict.value, "max_abs_z": _finite_max(z), "infinite_z": int(np.sum(np.isinf(z))),
        "max_effect_ulp_raw": effect("raw") or 0.0, "max_effect_ulp_sign_aligned": effect("sign_aligned"),
        "max_significant_effect_ulp": _finite_max(significant) if significant.size else None,
        "bias_warn_buckets": b.count(Verdict.WARN), "bias_fail_buckets": b.count(Verdict.FAIL),
        "familywise_error_bound": float(b.familywise_error_bound),
        "bias_verdict_no_attribution": (rejudge(b, replace(b.thresholds, attribution=False)).verdict.value
                                        if b.attribution else b.verdict.value),
    }
    if v is not None:
        finite = v.amplification[np.isfinite(v.amplification)]
        fields.update(
            variance_verdict=v.verdict.value, upper_bound=v.pass_bound,
            return_level=None if v.interval is None else float(v.interval.estimate),
            shapes_differ=bool(v.interval is not None and v.interval.heterogeneity is not None
                               and v.interval.heterogeneity.rejects),
            variance_structural=structural_alarm(v),
            max_k=float(finite.max()) if finite.size else None,
        )
    return OutputSample(**fields)


@dataclass(frozen=True)
class FamilyCalibration:
    """One family's null sample summarised against the shipped thresholds."""

    family: str
    controls: tuple[str, ...]
    samples: tuple[OutputSample, ...]
    warn_line: WarnLineProposal  # over the outputs the variance gate judged
    variance_warn: Rate  # WARN at the shipped defaults
    variance_fail: Rate
    bias_warn: Rate
    bias_fail: Rate
    ulp_floor: float  # c
    bias_fail_no_attribution: Rate | None = None  # the bias FAILs the oracle's attribution removes

    @property
    def judged(self) -> list[OutputSample]:
        return [s for s in self.samples if s.variance_verdict is not None]

    def _values(self, name) -> list[float]:
        return [getattr(s, name) for s in self.samples if getattr(s, name) is not None]

    @property
    def u_median(self) -> float | None:
        u = self._values("upper_bound")
        return statistics.median(u) if u else None

    @property
    def u_max(self) -> float | None:
        return max(self._values("upper_bound"), default=None)

    @property
    def return_level_max(self) -> float | None:
        return max(self._values("return_level"), default=None)

    @property
    def shapes_differ(self) -> int:
        return sum(s.shapes_differ for s in self.judged)

    @property
    def max_abs_z(self) -> float:
        return max(self._values("max_abs_z"), default=0.0)

    @property
    def max_effect_ulp(self) -> float:
        return max(self._values("max_effect_ulp_raw") + self._values("max_effect_ulp_sign_aligned"), default=0.0)

    @property
    def max_significant_effect_ulp(self) -> float | None:
        return max(self._values("max_significant_effect_ulp"), default=None)

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "controls": list(self.controls),
            "outputs": len(self.samples),
            "variance": {
                "judged": len(self.judged),
                "warn": self.variance_warn.to_dict(),
                "fail": self.variance_fail.to_dict(),
                "u_median": number(self.u_median),
                "u_max": number(self.u_max),
                "return_level_max": number(self.return_level_max),
                "shapes_differ": self.shapes_differ,
                "warn_line": self.warn_line.to_dict(),
            },
            "bias": {
                "warn": self.bias_warn.to_dict(),
                "fail": self.bias_fail.to_dict(),
                "max_abs_z": number(self.max_abs_z),
                "max_effect_ulp": number(self.max_effect_ulp),
                "max_significant_effect_ulp": number(self.max_significant_effect_ulp),
                "ulp_floor": self.ulp_floor,
                "fail_no_attribution": None if self.bias_fail_no_attribution is None
                else self.bias_fail_no_attribution.to_dict(),
            },
        }


def summarise_family(family: str, controls: Sequence[str], samples: Sequence[OutputSample],
                     variance: VarianceThresholds, bias: BiasThresholds, ladder=LADDER,
                     target: float = TARGET_RATE) -> FamilyCalibration:
    samples = tuple(samples)
    judged = [s for s in samples if s.variance_verdict is not None]
    ladder = tuple(sorted({*ladder, variance.warn}))
    proposal = propose_warn_line([s.upper_bound for s in judged], [s.variance_structural for s in judged],
                                 default=variance.warn, ladder=ladder, target=target)

    def count(items, attr, verdict):
        return Rate(sum(getattr(s, attr) == verdict for s in items), len(items))

    return FamilyCalibration(
        family=family, controls=tuple(controls), samples=samples, warn_line=proposal,
        variance_warn=count(judged, "variance_verdict", "WARN"),
        variance_fail=count(judged, "variance_verdict", "FAIL"),
        bias_warn=count(samples, "bias_verdict", "WARN"), bias_fail=count(samples, "bias_verdict", "FAIL"),
        ulp_floor=bias.ulp_floor, bias_fail_no_attribution=count(samples, "bias_verdict_no_attribution", "FAIL"),
    )


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`calibrate`."""

    families: tuple[FamilyCalibration, ...]
    seeds: tuple[int, ...]
    replicates: int | None  # None: each control at its declared replicates
    quick: bool
    variance_thresholds: VarianceThresholds
    bias_thresholds: BiasThresholds
    target: float
    errors: tuple[str, ...] = ()
    wall_time_s: float = 0.0
    environment: dict = field(default_factory=dict)
    excluded: tuple[OutputSample, ...] = ()  # outputs whose prod does not differ from ref: not null evidence

    @property
    def samples(self) -> list[OutputSample]:
        return [s for f in self.families for s in f.samples]

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {
            "schema": SCHEMA,
            "seeds": list(self.seeds),
            "replicates": self.replicates,
            "quick": self.quick,
            "target_rate": self.target,
            "thresholds": {"variance": asdict(self.variance_thresholds), "bias": asdict(self.bias_thresholds)},
            "families": [f.to_dict() for f in self.families],
            "samples": [s.to_dict() for s in self.samples],
            "errors": list(self.errors),
            "excluded": [s.to_dict() for s in self.excluded],
            "wall_time_s": self.wall_time_s,
            "environment": self.environment,
        }

    def markdown(self, command: str = "") -> str:
        return _markdown(self, command)


def _select(family, controls) -> list:
    from .controls.registry import FAMILIES, all_controls

    # training steps (family "step") are certified per configuration by kcert.certify_step: not calibrated here
    positives = [c for c in all_controls() if c.kind == "positive" and c.family != "step"]
    if controls is not None:
        by_name = {c.name: c for c in positives}
        missing = [n for n in controls if n not in by_name]
        if missing:
            raise ParameterError(f"controls {missing} are not positive controls; positive controls: "
                                 f"{', '.join(sorted(by_name))}")
        positives = [by_name[n] for n in controls]
    if family is not None:
        wanted = [family] if isinstance(family, str) else list(family)
        unknown = [f for f in wanted if f not in FAMILIES]
        if unknown:
            raise ParameterError(f"family {', '.join(map(repr, unknown))} is not a control family; "
                                 f"families: {', '.join(FAMILIES)}")
        positives = [c for c in positives if c.family in wanted]
    if not positives:
        raise ParameterError(f"no positive control matches family={family!r}, controls={controls!r}")
    return positives


def calibrate(family: str | Sequence[str] | None = None, seeds: int | Sequence[int] = 5, replicates: int | None = None,
              quick: bool = False, *, controls: Sequence[str] | None = None, target: float = TARGET_RATE,
              ladder=LADDER, variance_thresholds: VarianceThresholds | None = None,
              bias_thresholds: BiasThresholds | None = None, algebra_points: int = 2,
              progress: Callable[[str, int, int, int], None] | None = None) -> Calibration:
    """Certify every positive control of ``family`` (one name, several, or None: all) or the named
    ``controls``, once per seed (``seeds``: a count, meaning 0..n-1, or the seeds themselves), at
    ``replicates`` (default: each control's declared count; ``quick``: at most 256), and summarise
    each family's null sample against the thresholds. The algebra gate is not calibrated here: it
    runs at ``algebra_points`` points without the symbolic proof to save time.
    ``progress(control, seed, done, total)`` is called before each run. A control that raises a
    KcertError is recorded in ``errors`` and the others go on. Outputs whose prod is bitwise (or all but
    bitwise) ref's cannot raise a false alarm: they are left out of the null rates and listed in
    ``excluded`` (:func:`is_null_evidence`)."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ParameterError(f"seeds must be a count >= 1 or a list of seeds, got {seeds!r}")
        seeds = tuple(range(seeds))
    else:
        seeds = tuple(seeds)
        if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
            raise ParameterError(f"seeds must be integers >= 0, got {seeds!r}")
    if replicates is not None and (isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 2):
        raise ParameterError(f"replicates must be an integer >= 2, got {replicates!r}")
    if not 0.0 <= target < 1.0:
        raise ParameterError(f"target must lie in [0, 1), got {target!r}")
    variance_thresholds = variance_thresholds or VarianceThresholds()
    bias_thresholds = bias_thresholds or BiasThresholds()
    chosen = _select(family, controls)

    started = time.perf_counter()
    samples: dict[str, list[OutputSample]] = {}
    errors, environment = [], {}
    total, done = len(chosen) * len(seeds), 0
    for control in chosen:
        samples.setdefault(control.family, [])
        r = replicates or control.replicates
        r = min(r, QUICK_REPLICATES) if quick else r
        for seed in seeds:
            if progress is not None:
                progress(control.name, seed, done, total)
            try:
                cert = certify(control.build(), replicates=r, seed=seed, bias_thresholds=bias_thresholds,
                               variance_thresholds=variance_thresholds, algebra_points=algebra_points,
                               algebra_proof=False, command=f"kcert calibrate --control {control.name} --seed {seed}")
            except KcertError as exc:
                errors.append(f"{control.name} (seed {seed}): {type(exc).__name__}: {exc}")
            else:
                environment = environment or cert.provenance.environment
                samples[control.family] += output_samples(control.family, control.name, seed, cert)
            done += 1
    excluded = tuple(s for f in samples for s in samples[f] if not is_null_evidence(s))
    null = {f: [s for s in items if is_null_evidence(s)] for f, items in samples.items()}
    families = tuple(
        summarise_family(f, sorted({s.control for s in null[f]}), null[f], variance_thresholds, bias_thresholds,
                         ladder, target)
        for f in null if null[f]
    )
    return Calibration(families, seeds, replicates, quick, variance_thresholds, bias_thresholds, target,
                       tuple(errors), time.perf_counter() - started, environment, excluded)


def _rate(r: Rate) -> str:
    return f"{r.alarms}/{r.n}" + (f" ({r.rate:.0%}, <= {r.upper:.0%})" if r.n else "")


def variance_rows(cal: Calibration) -> list[list[str]]:
    rows = []
    for f in cal.families:
        w = f.warn_line
        lines = " · ".join(f"{line:g}: {r.alarms}/{r.n}" for line, r in w.by_line.items())
        if w.proposal is None:
            proposal = "none on the ladder"
        else:
            r = w.proposal_rate
            proposal = f"{w.proposal:g} ({r.alarms}/{r.n}" + (", the default holds)" if w.holds else ")")
        rows.append([f.family, str(len(f.controls)), str(len(f.judged)), _rate(f.variance_warn), _rate(f.variance_fail),
                     fmt(f.u_median), fmt(f.u_max), fmt(f.return_level_max), str(f.shapes_differ),
                     str(w.structural.alarms), lines, proposal])
    return rows


VARIANCE_HEADER = ["family", "controls", "outputs", "WARN at defaults", "FAIL", "U median", "U max", "A_T max",
                   "prod tail heavier", "WARN whatever the line", "other outputs with U above the line",
                   "proposed WARN line"]
BIAS_HEADER = ["family", "outputs", "WARN at defaults", "FAIL", "max |z|", "max effect (ULP)",
               "max significant effect (ULP)", "c", "FAIL without attribution", "FWER bound per output"]


def bias_rows(cal: Calibration) -> list[list[str]]:
    rows = []
    for f in cal.families:
        fwer = max((s.familywise_error_bound for s in f.samples), default=0.0)
        rows.append([f.family, str(len(f.samples)), _rate(f.bias_warn), _rate(f.bias_fail), fmt(f.max_abs_z),
                     fmt(f.max_effect_ulp), fmt(f.max_significant_effect_ulp), f"{f.ulp_floor:g}",
                     _rate(f.bias_fail_no_attribution) if f.bias_fail_no_attribution else "-", f"<= {fwer:.2g}"])
    return rows


def control_rows(cal: Calibration) -> list[list[str]]:
    """One row per control: its outputs over every seed."""
    rows = []
    for f in cal.families:
        for name in f.controls:
            ss = [s for s in f.samples if s.control == name]
            if not ss:
                continue
            us = [s.upper_bound for s in ss if s.upper_bound is not None]
            def verdicts(attr, ss=ss):
                return ", ".join(f"{v} {n}" for v, n in sorted(_counts(getattr(s, attr) for s in ss).items()))

            rows.append([f"`{name}`", f.family, str(len(ss)), verdicts("variance_verdict"), fmt(max(us, default=None)),
                         fmt(max((s.return_level for s in ss if s.return_level is not None), default=None)),
                         str(sum(s.shapes_differ for s in ss)), verdicts("bias_verdict"),
                         verdicts("bias_verdict_no_attribution"),
                         fmt(max(s.max_abs_z for s in ss)),
                         fmt(max(max(s.max_effect_ulp_raw, s.max_effect_ulp_sign_aligned or 0.0) for s in ss)),
                         str(max(s.replicates for s in ss))])
    return rows


CONTROL_HEADER = ["control", "family", "outputs x seeds", "variance", "U max", "A_T max", "prod tail heavier",
                  "bias", "bias without attribution", "max |z|", "max effect (ULP)", "R (max)"]


def _counts(values) -> dict:
    out: dict = {}
    for v in values:
        out[v or "-"] = out.get(v or "-", 0) + 1
    return out


def _table(header, rows) -> list[str]:
    def cells(row):
        return "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"

    return [cells(header), "| " + " | ".join("---" for _ in header) + " |"] + [cells(r) for r in rows]


def _markdown(cal: Calibration, command: str) -> str:
    v, b = cal.variance_thresholds, cal.bias_thresholds
    reps = "each control's declared replicates" if cal.replicates is None else f"R = {cal.replicates}"
    if cal.quick:
        reps += f", capped at {QUICK_REPLICATES} (--quick)"
    env = cal.environment
    lines = [
        f"Generated by `{command or 'kcert calibrate'}`: {len(cal.samples)} null outputs, seeds "
        f"{', '.join(map(str, cal.seeds))}, {reps}; wall time {cal.wall_time_s:.0f} s"
        + (f" on {env.get('cpu', '?')}, torch {env.get('versions', {}).get('torch', '?')}, "
           f"{env.get('torch_threads', '?')} thread(s)" if env else "") + ".",
        "",
        (f"Only outputs whose prod differs from ref in at least 1 % of their elements count as null evidence; "
         f"{len(cal.excluded)} output runs were left out as sanity checks (bitwise or all but bitwise identical): "
         + (", ".join(sorted({f"{s.control}/{s.output}" for s in cal.excluded})) or "none") + "."),
        "",
        (f"Variance gate (PASS <= {v.warn:g} < WARN <= {v.fail:g} < FAIL, U one-sided at 1 - {v.alpha:g}; \"U\" "
         f"here is what a PASS needs under the line: the largest of U, the separate-shapes bound at 1 - "
         f"{v.separate_alpha:g} or the paired bound (the smaller) and the observed ratio). "
        f"Rates are alarms/outputs (rate, one-sided 95 % upper bound); the proposal is the lowest line whose "
        f"null rate of U above it is <= {cal.target:.0%}, counted on the outputs a line can clear. \"WARN "
        "whatever the line\" counts the others (too few positive errors for a fit, an infinite or undefined "
        "tail ratio, FAIL); the two add up to the WARN-or-worse count at a line."),
        "",
        *_table(VARIANCE_HEADER, variance_rows(cal)),
        "",
        (f"Bias gate (z* = {b.z_star:g}, c = {b.ulp_floor:g} ULP, s_min = T^-1/2, attribution "
        f"{'on' if b.attribution else 'off'}). Effects are |mean difference| / true ULP over tested buckets, raw "
        "and sign-aligned; \"significant\" means |z| > z*; \"without attribution\" judges the same moments with "
         "attribution off, as for a case without a float64 oracle."),
        "",
        *_table(BIAS_HEADER, bias_rows(cal)),
        "",
        "Per control, over every seed:",
        "",
        *_table(CONTROL_HEADER, control_rows(cal)),
    ]
    if cal.errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in cal.errors]
    return "\n".join(lines) + "\n"
