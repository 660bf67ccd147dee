"""Terminal summary (rich): verdicts up top, then the diagnosis of docs/method.md."""

from __future__ import annotations

import math

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..certificate import BiasResult, Certificate, VarianceResult
from ..numbers import fmt
from ..verdict import Verdict
from . import checks
from ..results.gates import ALGEBRA, BIAS, VARIANCE
from .blocks import AlgebraView, BitwiseView, algebra_view, bitwise_view, gate_names, significance, timing_text
from .blocks import ulp_histogram_text, zero_crossing_bins  # noqa: F401  (their home before report.blocks)
from .text import MEANING, error_comparison_text, gate_sentences, observed_range_text, paired_text, rare_events_text

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
    title = (f"bias · {b.output} ({b.dtype}) · R = {b.replicates} · z* = {b.thresholds.z_star:g} "
             f"(|z| > {b.critical_z():.3g} at this R), "
             f"c = {b.thresholds.ulp_floor:g} ULP, s_min = {b.s_min:.3g} · FWER <= {b.familywise_error_bound:.2g} "
             f"over {b.buckets} buckets x {len(b.tests)} statistics")
    findings = b.findings(limit=limit)
    power = Text(
        f"power: R = {b.replicates} detects rho >= {b.min_detectable_effect:.3g} (covers T ~ {b.horizon_covered:.3g}); "
        f"T = {b.horizon:.3g} needs R ~ {b.replicates_for_horizon:.3g}",
        style="dim",
    )
    if not findings:
        return Group(Text(title, style="bold"), Text(f"no bucket WARN or FAIL; {significance(b).text()}"), power)
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
    harm = f", harm unit 1 {v.harm_format} ULP" if v.harm_format and v.harm_format != v.dtype else ""
    lines = [
        Text(f"variance · {v.output} ({v.dtype}{harm}) · R = {v.replicates} · T = {v.horizon:.3g}", style="bold"),
        Text(error_comparison_text(v)),
    ]
    iv = v.interval
    if iv is not None:
        lines.append(Text(
            f"tails: u = {fmt(iv.threshold_prod)} / {fmt(iv.threshold_ref)} (prod / ref, q of positive errors), "
            f"{iv.exceedances_prod} / {iv.exceedances_ref} exceedances, xi = {fmt(iv.shape_prod)} / {fmt(iv.shape_ref)} "
            f"({iv.model}), r_T = {fmt(iv.return_level_prod)} / {fmt(iv.return_level_ref)}"))
        lines.append(Text(
            f"A_T = max(0, r_T prod - {iv.slack:g}) / r_T ref = {fmt(iv.estimate)}, bounds [{fmt(iv.lower)}, "
            f"U = {fmt(iv.upper)}] (profile likelihood, each one-sided {1 - iv.alpha:.5g}; PASS <= "
            f"{v.thresholds.warn:g}, FAIL > {v.thresholds.fail:g})"))
        h = iv.heterogeneity
        if h is not None:
            lines.append(Text(f"shape test (prod heavier than ref?): xi {fmt(h.shape_prod)} vs {fmt(h.shape_ref)}, "
                              f"LR = {fmt(h.statistic)}, p = {fmt(h.p_value)}" + (" (rejected)" if h.rejects else "")))
        if v.threshold_stability:
            lines.append(Text("threshold stability: A_T = " + ", ".join(
                f"{fmt(r)} at q{q:g}" for q, r in v.threshold_stability)))
        if not math.isnan(iv.separate_alpha):  # the separate-shapes bound was computed
            lines.append(Text(f"one shape per side: U = {fmt(iv.separate_upper)} (one-sided "
                              f"{1 - iv.separate_alpha:.4g}; PASS <= {v.thresholds.warn:g})"))
        lines.append(Text(f"stopping: {v.stopping_rule}", style="dim"))
        lines.append(Text("assumed: " + "; ".join(v.assumptions), style="dim"))
    lines += [Text(t) for t in (observed_range_text(v), paired_text(v), rare_events_text(v)) if t]
    t = v.tail
    q = v.quantiles()
    report = (f"report's K = (E_prod - eps) / E_ref (for comparison): {v.n_zero} zero, {v.n_positive} positive, "
              f"{v.n_infinite} infinite; median {fmt(q[0.5])}, q99 {fmt(q[0.99])}, max {fmt(q[1.0])}")
    if t is not None:
        report += (f"; r_T + 3 se = {fmt(t.return_level)} + 3 x {fmt(t.standard_error)} = {fmt(t.upper_bound)}")
    lines.append(Text(report, style="dim"))
    lines.append(Text(v.reason))
    return Group(*lines)


def _bitwise(v: BitwiseView) -> Group:
    """L0: a short informational block (no verdict)."""
    lines = [Text(f"L0 bitwise · {v.output} ({v.dtype}) · R = {v.replicates} · informational, no verdict",
                  style="bold")]
    if v.compared:
        lines.append(Text(f"bitwise equal: {v.equal} of {v.elements} elements ({v.equal_share}); "
                          f"ULP distance: {v.distances}"))
    g = v.growth
    if g is not None and not v.all_equal:
        if g.significant:
            lines.append(Text(
                f"growth: {g.significant} buckets significant at R = {g.replicates} (|z| > {g.threshold} on "
                f"mean(prod - ref), raw or sign-aligned: the bias gate's statistics and critical value); median "
                f"z(R) / z({g.early_replicates}) = {g.median_growth} (a coherent difference ~ {g.expected}, "
                f"grows above {g.cut})"))
        else:
            lines.append(Text(f"growth: no bucket significant at R = {g.replicates} (|z| > {g.threshold} on "
                              f"mean(prod - ref))"))
    lines.append(Text(f"-> {v.classification}", style="bold"))
    if v.reconcile:
        lines.append(Text(v.reconcile))
    if v.reason:
        lines.append(Text(v.reason, style="dim"))
    return Group(*lines)


def _algebra(a: AlgebraView) -> list:
    """Gate 1's evidence: the proof level reached (and at which shape, with its witness), the precision
    ladder's rungs and decisions (docs/method.md, "The precision ladder"), an accepted untested algebra."""
    blocks = []
    p = a.proof
    if p is not None:
        if p.reached:
            detail = f"{p.outcome} at shape {p.shape} ({p.seconds} s)" + (f"; {p.witness}" if p.witness else "")
        else:
            detail = f"symbolic proof not reached ({p.reason}, {p.seconds} s)"
        blocks.append(Text(f"algebra · level {a.level} · {detail}", style="bold" if a.level == "proof" else "dim"))
    lad = a.ladder
    if lad is not None:
        lines = [Text(f"algebra · level {a.level_text} · oracle {lad.oracle}, inputs on the {lad.grid} grid, "
                      f"{lad.points} points", style="bold" if a.level == "precision ladder" else "dim")]
        for r in lad.rungs:
            if not r.used:
                lines.append(Text(f"  {r.dtype}: not used: {r.reason}", style="dim"))
                continue
            errs = ", ".join(f"{o} prod {pe} / ref {re}" for o, (pe, re) in zip(lad.outputs, r.errors))
            lines.append(Text(f"  {r.dtype}: {errs}", style="dim"))
        lines += [Text(f"  {d}") for d in lad.decisions]
        blocks.append(Group(*lines))
    if a.untested_limit is not None:
        blocks.append(Text(f"algebra untested, accepted by the case or --accept-untested-algebra: "
                           f"{a.untested_limit}", style="bold yellow"))
    return blocks


def _other(cert: Certificate, gate, findings: int) -> list:
    """A gate without a block of its own here: per result its name (and output) and its ``lines()``."""
    blocks = []
    for r in gate.results(cert):
        where = f" · {r.output}" if gate.per_output else ""
        blocks.append(Group(Text(f"{gate.name}{where} · {r.verdict.value}", style="bold"),
                            *(Text(line) for line in r.lines())))
    return blocks


# Each gate's blocks after the gates table, in the registry's order; a gate not named here: _other.
_BLOCKS = {
    ALGEBRA.name: lambda cert, gate, findings: _algebra(algebra_view(cert.algebra)),
    BIAS.name: lambda cert, gate, findings: [_bias(b, findings) for b in cert.bias],
    VARIANCE.name: lambda cert, gate, findings: [_variance(v) for v in cert.variance],
}


def render(cert: Certificate, console: Console, findings: int = 10) -> None:
    head = Text.assemble(
        ("kcert · ", "bold"), (cert.case, "bold cyan"), ("  " + cert.description if cert.description else "", "dim")
    )
    verdict = Text.assemble(("verdict ", "bold"), _verdict(cert.verdict), (f"  {MEANING[cert.verdict]}", ""))
    body = [verdict, _gates(cert)]
    for gate in cert.gate_list:
        body.extend(_BLOCKS.get(gate.name, _other)(cert, gate, findings))
    for bw in cert.bitwise:
        body.append(_bitwise(bitwise_view(bw, next((b for b in cert.bias if b.output == bw.output), None))))
    body.extend(checks.terminal_blocks(cert))  # shape sweep, adequacy, peer rules (docs/kernelbench.md)
    outputs_first = sorted(cert.gate_list, key=lambda g: not g.per_output)  # the outputs' findings, then the case's
    diags = [d for g in outputs_first for r in g.results(cert) for d in getattr(r, "diagnostics", ())]
    diags += checks.diagnostics(cert)
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
    for note in cert.notes:
        body.append(Text(f"note: {note}", style="dim"))
    body.append(Text(f"reproduce: {p.command}", style="bold"))
    body.append(Text(
        f"seed {p.seed} · R = {p.replicates} (max {p.max_replicates}) · dtype {p.dtype} · device {p.device} "
        f"({env.get('gpu') or _cpu(env)}) · {versions} · reduction {env.get('reduction', 'torch')} · {p.date} · "
        f"{timing_text(p)}",
        style="dim",
    ))
    console.print(Panel(Group(*body), title=head, title_align="left", border_style=STYLE[cert.verdict]))


def _cpu(env: dict) -> str:
    """The CPU and the instruction set its kernels ran (reports before kcert recorded it: the CPU alone)."""
    return env["cpu"] + (f", {env['cpu_capability']}" if env.get("cpu_capability") else "")


def render_line(cert: Certificate, console: Console) -> None:
    """One line per certificate (``--quiet``): the verdict, the case, each gate's verdict and the time."""
    gates = " · ".join(f"{g} {v.value}" for g, v in cert.gates.items())
    line = Text.assemble(_verdict(cert.verdict), f"  {cert.case}  ({gates}; {cert.provenance.wall_time_s:.1f} s)")
    console.print(line, soft_wrap=True, highlight=False)


def render_summary(outcomes, exit_code: int, deciders, why: str, console: Console) -> None:
    """The table that ends a run of several cases: per case its gate verdicts and verdict (or the error
    that stopped it), and which cases decided the exit code. ``outcomes``: (case name, certificate or
    error text) in run order; ``deciders``: the names that decided ``exit_code``; ``why``: in words."""
    t = Table(header_style="bold", title=f"kcert: {len(outcomes)} cases · exit {exit_code} ({why})",
              title_justify="left")
    gates = gate_names([o for _, o in outcomes if isinstance(o, Certificate)])
    for col in ("case", *gates, "verdict", "exit code"):
        t.add_column(col, no_wrap=col != "case")
    for name, outcome in outcomes:
        decided = Text(f"<- decides exit {exit_code}", style="bold") if name in deciders else Text("")
        if isinstance(outcome, Certificate):
            verdicts = outcome.gates
            t.add_row(name, *(_verdict(verdicts[g]) if g in verdicts else "-" for g in gates),
                      _verdict(outcome.verdict), decided)
        else:
            error = str(outcome)
            if error.startswith(f"case {name!r}") and ": " in error:  # the row names the case already
                error = error.split(": ", 1)[1]
            error = error if len(error) <= 90 else error[:87] + "..."
            t.add_row(Text.assemble(name, ("\n" + error, "dim")), *("-" for _ in gates), Text("ERROR", style="bold red"),
                      decided)
    console.print(t)
