"""The checks around the gates in words, for every report (terminal, JSON, HTML): the peer-rule table
with the reason each rule differs from kcert, the shape sweep per shape, the adequacy check per fake
(docs/kernelbench.md). Rendering only reads results."""

from __future__ import annotations

import html

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..certificate import Certificate
from ..results.checks import NOT_APPLICABLE, NOT_REJECTED, REJECTED
from ..verdict import Verdict
from ..numbers import fmt

_STATUS_STYLE = {REJECTED: "green", NOT_REJECTED: "bold red", NOT_APPLICABLE: "dim"}
_VERDICT_STYLE = {"PASS": "bold green", "WARN": "bold yellow", "FAIL": "bold red", "SKIPPED": "bold magenta"}


def diagnostics(cert: Certificate) -> list:
    """The checks' named diagnostics (fakes_not_rejected, degenerate_problem, shape_sweep_fail)."""
    out = []
    if cert.adequacy is not None:
        out.extend(cert.adequacy.diagnostics())
    if cert.shape_sweep is not None:
        out.extend(cert.shape_sweep.diagnostics())
    return out


# --- why a rule and kcert differ -----------------------------------------------------------------------


def _fail_causes(cert: Certificate) -> list[str]:
    causes = []
    a = cert.algebra
    if a.verdict is Verdict.FAIL:
        if a.level == "precision ladder":
            causes.append("a different real function (its error stops at a floor no finer precision lowers)")
        else:
            worst = max(a.outputs, key=lambda o: o.discrepancy_float64, default=None)
            d = f" (real-mode discrepancy {worst.discrepancy_float64:.2g})" if worst is not None else ""
            causes.append(f"a different real function{d}")
    for b in cert.bias:
        if b.verdict is Verdict.FAIL:
            if b.nonfinite_prod:
                causes.append(f"prod non-finite where ref is finite ({b.nonfinite_prod} elements)")
                continue
            f = b.findings(Verdict.FAIL, limit=1)
            if f:
                causes.append(f"a coherent bias of {f[0].effect_ulp:.2g} ULP at {f[0].label} of {b.output} (z = "
                              f"{f[0].z:+.3g}), small per call, summed over T calls")
    for v in cert.variance:
        if v.verdict is Verdict.FAIL:
            if v.estimate is not None:
                causes.append(f"prod's error tail {fmt(v.estimate)}x ref's at the horizon ({v.output})")
            else:
                causes.append(f"prod's error against float64 where ref's is finite or zero ({v.output})")
    if cert.shape_sweep is not None and cert.shape_sweep.failed:
        s = cert.shape_sweep.failed[0]
        causes.append(f"at another shape, {s.label} ({s.shape_text}); the rule sees the given shape only")
    return causes


def _review_causes(cert: Certificate) -> list[str]:
    causes = [f"{g} {v.value}" for g, v in cert.gates.items() if v is not Verdict.PASS]
    if cert.adequacy is not None:
        if cert.adequacy.not_rejected:
            causes.append("fakes not rejected: " + ", ".join(f.name for f in cert.adequacy.not_rejected))
    return causes


def _error_figures(cert: Certificate) -> str:
    parts = []
    for v in cert.variance:
        p, r = v.error_summary("prod"), v.error_summary("ref")
        unit = f"{v.harm_format} ULP" if v.harm_format else "harm units"
        parts.append(f"max error vs float64 {fmt(p[1.0])} {unit} for prod, {fmt(r[1.0])} for ref")
    return "; ".join(parts)


def peer_reason(cert: Certificate, rule) -> str:
    """Why the rule's verdict and kcert's differ (or "agree")."""
    k = cert.verdict
    if rule.passed is None:
        return "not evaluated"
    if rule.passed and k is Verdict.PASS:
        return "agree"
    if not rule.passed and k is Verdict.FAIL:
        return "agree: both reject"
    if rule.passed and k is Verdict.FAIL:
        return "the rule passes what kcert FAILs: " + ("; ".join(_fail_causes(cert)) or "see the gates")
    if not rule.passed:
        figures = _error_figures(cert)
        return ("the rule rejects differences kcert does not FAIL: its fixed tolerance is tighter than this "
                "output's rounding" + (f" ({figures})" if figures else ""))
    return "kcert asks for review: " + ("; ".join(_review_causes(cert)) or "see the gates")


# --- terminal ------------------------------------------------------------------------------------------


def _verdict_text(v: str) -> Text:
    return Text(v, style=_VERDICT_STYLE.get(v, ""))


def peer_table(cert: Certificate) -> Group | None:
    pr = cert.peer_rules
    if pr is None:
        return None
    title = Text(f"peer rules · on replicates {', '.join(map(str, pr.trials))} (the run's own draws) · "
                 f"kcert: {cert.verdict.value} · informational", style="bold")
    if not pr.rules:
        return Group(title, Text(pr.note, style="dim"))
    t = Table(header_style="bold", expand=True)
    t.add_column("rule", ratio=3)
    t.add_column("verdict", no_wrap=True)
    t.add_column("figure", ratio=4)
    t.add_column("vs kcert", ratio=4)
    for r in pr.rules:
        t.add_row(r.title, _verdict_text(r.verdict), r.detail, peer_reason(cert, r))
    return Group(title, t)


def sweep_group(cert: Certificate) -> Group | None:
    sw = cert.shape_sweep
    if sw is None:
        return None
    verdict = "FAIL" if sw.failed else "no FAIL"
    lines = [Text(f"shape sweep · {len(sw.shapes)} shapes · algebra gate ({sw.algebra_points} + {sw.algebra_points} "
                  f"points) and {sw.replicates} replicates each · {verdict} · a FAIL here FAILs the certificate; other "
                  f"verdicts of the short run are shown only", style="bold")]
    t = Table(header_style="bold", expand=True)
    t.add_column("shape", ratio=3)
    t.add_column("status", no_wrap=True)
    t.add_column("gates", no_wrap=True)
    t.add_column("why", ratio=5)
    for s in sw.shapes:
        gates = " ".join(f"{g[0]}:{v}" for g, v in s.gates) if s.gates else "-"
        status = Text(_sweep_status(s), style={"FAIL": "bold red", "no FAIL": "green"}.get(_sweep_status(s), "dim"))
        t.add_row(f"{s.label}\n{s.shape_text}", status, gates, s.reason)
    lines.append(t)
    return Group(*lines)


def _sweep_status(s) -> str:
    """"FAIL", "no FAIL" (the short run's other verdicts change nothing), or why it did not run."""
    if s.status != "run":
        return s.status
    return "FAIL" if s.verdict == "FAIL" else "no FAIL"


def adequacy_group(cert: Certificate) -> Group | None:
    ad = cert.adequacy
    if ad is None:
        return None
    rejected = sum(f.status == REJECTED for f in ad.fakes)
    applicable = sum(f.applicable for f in ad.fakes)
    head = (f"adequacy · can this certification tell a fake? · {rejected} of {applicable} fakes rejected · algebra gate "
            f"({ad.algebra_points} + {ad.algebra_points} points), then {ad.replicates} replicates when it passes one")
    t = Table(header_style="bold", expand=True)
    t.add_column("fake", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("why", ratio=5)
    for f in ad.fakes:
        status = f.status
        if f.status == REJECTED and ad.probe not in f.rejected_by:
            status = f"rejected by {', '.join(f.rejected_by)}"
        t.add_row(f.name, Text(status, style=_STATUS_STYLE.get(f.status, "")), _verdict_text(f.verdict or "-"),
                  f.reason)
    lines = [Text(head, style="bold"), t]
    for d in ad.degenerate:
        lines.append(Text(f"degenerate problem: {d}", style="bold red"))
    return Group(*lines)


def terminal_blocks(cert: Certificate) -> list:
    return [g for g in (sweep_group(cert), adequacy_group(cert), peer_table(cert)) if g is not None]


# --- JSON ----------------------------------------------------------------------------------------------


def to_json(cert: Certificate) -> dict:
    """The checks' keys of the JSON report (docs/json-schema.md): null when a check did not run."""
    ad, pr, sw = cert.adequacy, cert.peer_rules, cert.shape_sweep
    return {
        "adequacy": None if ad is None else {
            "probe": ad.probe, "replicates": ad.replicates, "algebra_points": ad.algebra_points,
            "blocks_pass": ad.blocks_pass, "degenerate": list(ad.degenerate),
            "fakes": [{"name": f.name, "description": f.description, "status": f.status, "verdict": f.verdict,
                       "gates": dict(f.gates), "reason": f.reason, "identical": f.identical,
                       "rejected_by": list(f.rejected_by), "degenerate": f.degenerate} for f in ad.fakes],
            "diagnostics": [d.to_dict() for d in ad.diagnostics()],
        },
        "peer_rules": None if pr is None else {
            "trials": list(pr.trials), "note": pr.note, "kcert_verdict": cert.verdict.value,
            "rules": [{"rule": r.rule, "title": r.title, "verdict": r.verdict, "detail": r.detail,
                       "worst_trial": r.worst_trial, "versus_kcert": peer_reason(cert, r)} for r in pr.rules],
        },
        "shape_sweep": None if sw is None else {
            "replicates": sw.replicates, "algebra_points": sw.algebra_points,
            "verdict": "FAIL" if sw.failed else "PASS",
            "shapes": [{"label": s.label, "shapes": {k: list(v) for k, v in s.shapes}, "status": s.status,
                        "verdict": s.verdict, "gates": dict(s.gates), "reason": s.reason} for s in sw.shapes],
            "diagnostics": [d.to_dict() for d in sw.diagnostics()],
        },
    }


# --- HTML ----------------------------------------------------------------------------------------------


def _badge(v: str) -> str:
    colours = {"PASS": "#1a7f37", "WARN": "#9a6700", "FAIL": "#cf222e", "SKIPPED": "#8250df"}
    if v not in colours:
        return html.escape(v or "-")
    return f'<span class="v" style="background:{colours[v]}">{v}</span>'


def html_sections(cert: Certificate) -> str:
    e = html.escape
    parts = []
    pr = cert.peer_rules
    if pr is not None:
        parts.append(f"<h3>peer rules</h3><p>what the common rules say on replicates {', '.join(map(str, pr.trials))} "
                     f"(the run's own draws); kcert: {_badge(cert.verdict.value)}. Informational.</p>")
        if pr.rules:
            rows = "".join(f"<tr><td>{e(r.title)}</td><td>{_badge(r.verdict)}</td><td>{e(r.detail)}</td>"
                           f"<td>{e(peer_reason(cert, r))}</td></tr>" for r in pr.rules)
            parts.append(f"<table><tr><th>rule</th><th>verdict</th><th>figure</th><th>vs kcert</th></tr>{rows}</table>")
        else:
            parts.append(f"<p class='note'>{e(pr.note)}</p>")
    sw = cert.shape_sweep
    if sw is not None:
        rows = "".join(
            f"<tr><td>{e(s.label)}<br><code>{e(s.shape_text)}</code></td><td>{_badge('FAIL') if s.verdict == 'FAIL' else e(_sweep_status(s))}"
            f"</td><td>{e(' '.join(f'{g}: {v}' for g, v in s.gates))}</td><td>{e(s.reason)}</td></tr>"
            for s in sw.shapes)
        parts.append(f"<h3>shape sweep {_badge('FAIL') if sw.failed else ''}</h3><p>the algebra gate ({sw.algebra_points}"
                     f" + {sw.algebra_points} points) and {sw.replicates} replicates at each shape; a FAIL here FAILs the "
                     f"certificate, other verdicts of the short run are shown only.</p><table><tr><th>shape</th>"
                     f"<th>verdict</th><th>gates</th><th>why</th></tr>{rows}</table>")
    ad = cert.adequacy
    if ad is not None:
        rows = "".join(
            f"<tr><td>{e(f.name)}</td><td>{e(f.status if f.status != REJECTED or ad.probe in f.rejected_by else 'rejected by ' + ', '.join(f.rejected_by))}"
            f"</td><td>{_badge(f.verdict)}</td><td>{e(f.description)}</td><td>{e(f.reason)}</td></tr>" for f in ad.fakes)
        degenerate = "".join(f"<p class='note'>degenerate problem: {e(d)}</p>" for d in ad.degenerate)
        parts.append(f"<h3>adequacy: can this certification tell a fake?</h3><p>each fake replaces prod; the algebra "
                     f"gate ({ad.algebra_points} + {ad.algebra_points} points), then {ad.replicates} replicates when it "
                     f"passes one. A fake that is not FAILed keeps the certificate from a PASS.</p><table><tr><th>fake"
                     f"</th><th>status</th><th>verdict</th><th>what it does</th><th>why</th></tr>{rows}</table>"
                     + degenerate)
    return "\n".join(parts)


def failure_lines(cert: Certificate) -> list[str]:
    """Lines for :func:`kcert.report.text.failure_message`: the sweep's FAILs and the fakes not rejected."""
    lines = []
    if cert.shape_sweep is not None:
        for s in cert.shape_sweep.failed:
            lines.append(f"  shape sweep FAIL at {s.label} ({s.shape_text}): {s.reason}")
    if cert.adequacy is not None:
        for f in cert.adequacy.not_rejected:
            lines.append(f"  adequacy: fake {f.name} not rejected ({f.verdict or 'not run'}): {f.reason}")
    return lines
