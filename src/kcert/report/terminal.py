"""Terminal summary (rich): verdicts up top, then the diagnosis of METHOD.md section 5."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..certificate import BiasResult, Certificate, VarianceResult
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
        lines.append(Text(f"r_T = {fmt(t.return_level)}, se = {fmt(t.standard_error)}, U = {fmt(t.upper_bound)} "
                          f"(PASS <= {v.thresholds.warn:g}, FAIL > {v.thresholds.fail:g})"))
        lines.append(Text("assumed: " + "; ".join(ASSUMPTIONS), style="dim"))
    lines.append(Text(v.reason))
    return Group(*lines)


def render(cert: Certificate, console: Console, findings: int = 10) -> None:
    head = Text.assemble(
        ("kcert · ", "bold"), (cert.case, "bold cyan"), ("  " + cert.description if cert.description else "", "dim")
    )
    verdict = Text.assemble(("verdict ", "bold"), _verdict(cert.verdict), (f"  {MEANING[cert.verdict]}", ""))
    body = [verdict, _gates(cert)]
    for b in cert.bias:
        body.append(_bias(b, findings))
    for v in cert.variance:
        body.append(_variance(v))
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
        f"({env.get('gpu', env['cpu'])}) · {versions} · {p.date} · {p.wall_time_s:.1f} s",
        style="dim",
    ))
    console.print(Panel(Group(*body), title=head, title_align="left", border_style=STYLE[cert.verdict]))
