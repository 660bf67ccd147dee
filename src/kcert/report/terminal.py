"""Terminal summary (rich): verdicts up top, then the diagnosis of METHOD.md section 5."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..certificate import (
    AlgebraResult,
    BiasResult,
    BitwiseResult,
    Certificate,
    VarianceResult,
)
from ..gates.variance import ASSUMPTIONS
from ..verdict import Verdict
from .text import MEANING, fmt, gate_sentences

STYLE = {Verdict.PASS: "bold green", Verdict.WARN: "bold yellow", Verdict.FAIL: "bold red", Verdict.SKIPPED: "bold magenta"}


def _verdict(v: Verdict) -> Text:
    return Text(v.value, style=STYLE[v])


def _gates(cert: Certificate) -> Table:
    t = Table(show_header=True, header_style="bold", expand=True)
    t.add_column("gate", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("evidence")
    for gate, verdict in cert.gates.items():
        t.add_row(gate, _verdict(verdict), "\n".join(gate_sentences(cert, gate)))
    return t


def _bias(b: BiasResult, limit: int) -> Group:
    title = (f"bias · {b.output} ({b.dtype}) · R = {b.replicates} · z* = {b.thresholds.z_star:g}, "
             f"c = {b.thresholds.ulp_floor:g} ULP, s_min = {b.s_min:.3g} · FWER <= {b.familywise_error_bound:.2g} "
             f"over {b.buckets} buckets x {len(b.tests)} statistics")
    findings = b.findings(limit=limit)
    power = Text(
        f"power: R = {b.replicates} detects rho >= {b.min_detectable_effect:.3g} (covers T ~ {b.horizon_covered:.3g}); "
        f"T = {b.horizon:.3g} needs R ~ {b.replicates_for_horizon:.3g}",
        style="dim",
    )
    if not findings:
        return Group(Text(title, style="bold"), Text("no significant bucket"), power)
    t = Table(header_style="bold", expand=False)
    for col in ("bucket", "stat", "direction", "ULP", "mean", "1 ULP", "z", "rho", "prod-oracle", "ref-oracle",
                "verdict"):
        t.add_column(col, no_wrap=True)
    for f in findings:
        t.add_row(f.label, "sign" if f.statistic == "sign_aligned" else f.statistic, f.direction, fmt(f.effect_ulp),
                  fmt(f.mean), fmt(f.ulp), f"{f.z:+.3g}", fmt(f.standardized_effect), fmt(f.prod_bias_ulp),
                  fmt(f.ref_bias_ulp), _verdict(f.verdict))
    more = b.count(Verdict.FAIL) + b.count(Verdict.WARN) - len(findings)
    legend = Text("ULP: |mean| in true ULPs at the bucket's mean |ref|; prod-oracle, ref-oracle: each side's own bias "
                  "against the float64 oracle, in ULPs; sign: mean of (prod - ref) * sign(ref)", style="dim")
    rows = [Text(title, style="bold"), t, legend]
    if more > 0:
        rows.append(Text(f"... and {more} more significant buckets (all in the JSON report)", style="dim"))
    rows.append(power)
    return Group(*rows)


def _variance(v: VarianceResult) -> Group:
    q = v.quantiles()
    lines = [
        Text(f"variance · {v.output} ({v.dtype}) · R = {v.replicates} · T = {v.horizon:.3g}", style="bold"),
        Text(f"K: {v.n_zero} zero, {v.n_positive} positive, {v.n_infinite} infinite, {v.n_undefined} undefined; "
             f"median {fmt(q[0.5])}, q90 {fmt(q[0.9])}, q99 {fmt(q[0.99])}, max {fmt(q[1.0])}"),
    ]
    t = v.tail
    if t is not None:
        lines.append(Text(
            f"tail: u = {fmt(t.threshold)} (q{t.threshold_quantile:.3g} of positive K), {t.n_exceedances} exceedances, "
            f"zeta = {fmt(t.exceedance_rate)}, xi = {fmt(t.shape)} (free fit {fmt(t.shape_unconstrained)}), "
            f"sigma = {fmt(t.scale)}"
        ))
        iv = v.interval
        if iv is not None:
            shape = "free" if iv.shape_bounds[1] > 0 else "<= 0"
            lines.append(Text(
                f"r_T = {fmt(iv.estimate)}, bounds [{fmt(iv.lower)}, U = {fmt(iv.upper)}] (profile likelihood, xi {shape}, "
                f"each one-sided {1 - iv.alpha:.5g}; PASS <= {v.thresholds.warn:g}, FAIL > {v.thresholds.fail:g})"))
        if v.shape_test is not None:
            st = v.shape_test
            lines.append(Text(f"bounded-tail test: free xi = {fmt(st.shape_free)}, LR = {fmt(st.statistic)}, "
                              f"p = {fmt(st.p_value)}" + (" (rejected)" if st.rejects else "")))
        if v.threshold_stability:
            lines.append(Text("threshold stability: r_T = " + ", ".join(
                f"{fmt(r)} at q{q:g}" for q, r in v.threshold_stability)))
        lines.append(Text(f"report's rule (for comparison): r_T + 3 se = {fmt(t.return_level)} + 3 x "
                          f"{fmt(t.standard_error)} = {fmt(t.upper_bound)}", style="dim"))
        lines.append(Text(f"stopping: {v.stopping_rule}", style="dim"))
        lines.append(Text("assumed: " + "; ".join(ASSUMPTIONS), style="dim"))
    lines.append(Text(v.reason))
    return Group(*lines)


def ulp_histogram_text(b: BitwiseResult) -> str:
    """The non-empty ULP-distance bins as shares of the elements: ``0: 76.7% · 1: 23.3%``."""
    total = b.elements
    return " · ".join(f"{label}: {100 * c / total:.3g}%" for label, c in zip(b.bin_labels, b.ulp_histogram) if c)


def _bitwise(b: BitwiseResult) -> Group:
    """L0: a short informational block (no verdict)."""
    lines = [Text(f"L0 bitwise · {b.output} ({b.dtype}) · R = {b.replicates} · informational, no verdict",
                  style="bold")]
    if b.elements:
        lines.append(Text(f"bitwise equal: {b.bitwise_equal:,} of {b.elements:,} elements ({100 * b.fraction_equal:.3g}%); "
                          f"ULP distance: {ulp_histogram_text(b)}"))
    g = b.growth
    if g is not None and b.fraction_equal != 1.0:
        if g.significant:
            lines.append(Text(
                f"growth: {g.significant} buckets significant at R = {g.replicates} (|z| > {g.threshold:g}); median "
                f"z(R) / z({g.early_replicates}) = {fmt(g.median_growth)} (coherent bias ~ {g.expected:.3g}, "
                f"grows above {g.cut:.3g})"))
        else:
            lines.append(Text(f"growth: no bucket significant at R = {g.replicates} (|z| > {g.threshold:g})"))
    lines.append(Text(f"-> {b.classification}", style="bold"))
    if b.reason:
        lines.append(Text(b.reason, style="dim"))
    return Group(*lines)


def _algebra_level(a: AlgebraResult) -> Text:
    """Which level Gate 1 reached: the symbolic proof (and at which shape) or the identity test."""
    p = a.proof
    if p.outcome == "not reached":
        detail = f"symbolic proof not reached ({p.reason}, {p.seconds:.2f} s)"
    else:
        detail = f"{p.outcome} at shape {p.shape_text} ({p.seconds:.2f} s)"
        if p.witness is not None:
            w = p.witness
            detail += (f"; witness {w['output']} at {w['index']}: ref {w['ref']:.6g}, prod {w['prod']:.6g} "
                       f"(relative {w['relative_difference']:.3g}, algebra draw {w['point']})")
    return Text(f"algebra · level {a.level} · {detail}", style="bold" if a.level == "proof" else "dim")


def render(cert: Certificate, console: Console, findings: int = 10) -> None:
    head = Text.assemble(
        ("kcert · ", "bold"), (cert.case, "bold cyan"), ("  " + cert.description if cert.description else "", "dim")
    )
    verdict = Text.assemble(("verdict ", "bold"), _verdict(cert.verdict), (f"  {MEANING[cert.verdict]}", ""))
    body = [verdict, _gates(cert)]
    if cert.algebra.proof is not None:
        body.append(_algebra_level(cert.algebra))
    for b in cert.bias:
        body.append(_bias(b, findings))
    for v in cert.variance:
        body.append(_variance(v))
    for bw in cert.bitwise:
        body.append(_bitwise(bw))
    diags = [d for r in (*cert.bias, *cert.variance) for d in r.diagnostics] + list(cert.algebra.diagnostics)
    if diags:
        d = Table(show_header=True, header_style="bold", expand=True)
        d.add_column("diagnostic", no_wrap=True)
        d.add_column("meaning")
        d.add_column("remedy")
        seen = set()
        for diag in diags:
            if (diag.code, diag.message) not in seen:
                seen.add((diag.code, diag.message))
                d.add_row(diag.code, diag.message, diag.remedy)
        body.append(d)
    p = cert.provenance
    env = p.environment
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    body.append(Text(f"reproduce: {p.command}", style="bold"))
    body.append(Text(
        f"seed {p.seed} · R = {p.replicates} (max {p.max_replicates}) · dtype {p.dtype} · device {p.device} "
        f"({env.get('gpu', env['cpu'])}) · {versions} · reduction {env.get('reduction', 'torch')} · {p.date} · "
        f"{p.wall_time_s:.1f} s",
        style="dim",
    ))
    console.print(Panel(Group(*body), title=head, title_align="left", border_style=STYLE[cert.verdict]))
