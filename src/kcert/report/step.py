"""Rendering a step certification (L2, docs/training-graph.md): the configuration table in the terminal
(rich), JSON (``kcert.step-certificate/1``, docs/json-schema.md) and one self-contained HTML page.
Rendering only reads the result (:class:`kcert.StepCertificate`)."""

from __future__ import annotations

import html
import json
import re

from ..numbers import json_number as number
from ..stats.aggregation import AGREES, short_sentence
from ..verdict import Verdict
from .jsonio import to_dict as certificate_dict
from .blocks import gate_names
from .text import MEANING

SCHEMA = "kcert.step-certificate/1"
_COLOURS = {"PASS": "#1a7f37", "WARN": "#9a6700", "FAIL": "#cf222e", "SKIPPED": "#8250df"}
_STYLE = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "red", Verdict.SKIPPED: "magenta"}
PARAMETER_LINES = 6  # per configuration, the parameters whose diagnosis differs from the whole gradient's


# --- what every renderer shows -----------------------------------------------------------------------


def _headline(d) -> tuple[str, str | None]:
    f = d.finding
    return f.status, f.hypothesis if f.status == "hypothesis" else f.factor


def diagnosis_lines(config, limit: int = PARAMETER_LINES) -> list[str]:
    """The sentences of one configuration: loss, the whole gradient, grad norm, then the parameters
    that do not agree with ref and whose finding differs from the whole gradient's (at most ``limit``,
    the rest counted), then how many parameters are as the whole gradient or agree."""
    main = [d for d in config.diagnoses if not d.output.startswith("grad.")]
    params = [d for d in config.diagnoses if d.output.startswith("grad.")]
    whole = next((d for d in main if d.output == "grad"), None)
    lines = [d.sentence for d in main]
    like_whole = [d for d in params if whole is not None and _headline(d) == _headline(whole) and not d.rank_disagreement]
    agree = [d for d in params if d not in like_whole and d.finding.status == AGREES and not d.rank_disagreement]
    odd = [d for d in params if d not in like_whole and d not in agree]
    lines += [d.sentence for d in odd[:limit]]
    if len(odd) > limit:
        lines.append(f"... and {len(odd) - limit} more parameters")
    if like_whole:
        lines.append(f"{len(like_whole)} of {len(params)} parameters' gradients: as the whole gradient")
    if agree:
        lines.append(f"{len(agree)} of {len(params)} parameters' gradients agree with ref within rounding")
    return lines


def gate_lines(config) -> list[str]:
    """The gates' sentences for the results that did not PASS (the algebra gate's reason when it did not)."""
    c = config.certificate
    return [f"{g.name} {r.verdict.value}: {g.sentence(r)}" for g in c.gate_list for r in g.results(c)
            if r.verdict is not Verdict.PASS]


def _gate_cells(config) -> list[str]:
    return [v.value for v in config.certificate.gates.values()]


def _worst_findings(result, config, limit: int = 3) -> list[str]:
    """The strongest bias findings of the configuration, bucket labels turned into parameter channels."""
    out = []
    for b in config.certificate.bias:
        for f in b.findings(limit=limit):
            label = f.label
            match = re.fullmatch(r"parameter channel (\d+)", label)
            if b.output == "grad" and match:
                label = result.channel_name(int(match.group(1)))
            out.append(f"{b.output} {label}: {f.verdict.value}, {f.effect_ulp:.3g} ULP ({f.statistic}, z = {f.z:+.3g}), "
                       f"prod's own {f.prod_bias_ulp if f.prod_bias_ulp is not None else float('nan'):.3g} ULP")
    return out[:limit]


def cost_row(config) -> dict:
    c = config.cost
    return {"launch_s": number(c.launch_s), "certify_s": number(c.certify_s), "ref_s": number(c.seconds["ref"]),
            "oracle_s": number(c.seconds["oracle"]), "ranks_s": number(c.seconds["prod"] + c.seconds["prod_real"]),
            "kcert_s": number(c.kcert_s), "diagnose_s": number(c.diagnose_s), "total_s": number(c.total_s),
            "replicates": c.replicates, "calls": dict(c.calls)}


# --- JSON --------------------------------------------------------------------------------------------------


def _finding(d) -> dict:
    f = d.finding
    r = f.ratio
    a = f.association
    return {
        "output": d.output, "status": f.status, "sentence": d.sentence, "replicates": d.replicates,
        "decomposable": d.decomposable, "deviation": number(f.deviation), "yardstick": number(f.yardstick),
        "ratio": {"median": number(r.median), "low": number(r.low), "high": number(r.high),
                  "spread": number(r.spread), "replicates": r.replicates},
        "constant": f.constant, "factor": f.factor, "factor_value": None if f.factor_value is None else number(f.factor_value),
        "hypothesis": f.hypothesis, "hypothesis_text": f.hypothesis_text,
        "residual": None if f.residual is None else number(f.residual),
        "explained_share": None if f.explained_share is None else number(f.explained_share),
        "association": None if a is None else {"quantity": a.quantity, "rho": number(a.rho), "p_value": number(a.p_value)},
        "rank_disagreement": None if d.rank_disagreement is None else number(d.rank_disagreement),
    }


def to_dict(result) -> dict:
    return {
        "schema": SCHEMA,
        "step": result.step,
        "verdict": result.verdict.value,
        "dependence": result.dependence,
        "description": result.description,
        "parameters": [{"name": n, "shape": list(s)} for n, s in result.parameters],
        "seed": result.seed,
        "replicates": result.replicates,
        "command": result.command,
        "wall_time_s": number(result.wall_time_s),
        "configurations": [
            {
                "label": c.config.label,
                "config": c.config.describe(),
                "verdict": c.verdict.value,
                "gates": {g: v.value for g, v in c.certificate.gates.items()},
                "outputs": {name: v.value for name, v in c.output_verdicts().items()},
                "diagnosis": [_finding(d) for d in c.diagnoses],
                "rank_disagreement": {name: number(v) for name, v in c.rank_disagreement},
                "cost": cost_row(c),
                "certificate": certificate_dict(c.certificate),
            }
            for c in result.configs
        ],
    }


def dumps(result) -> str:
    return json.dumps(to_dict(result), indent=1, allow_nan=False)


# --- terminal ------------------------------------------------------------------------------------------


def render(result, console) -> None:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    def verdict(v: Verdict) -> Text:
        return Text(v.value, style=f"bold {_STYLE[v]}")

    table = Table(header_style="bold", expand=True)
    gates = gate_names([c.certificate for c in result.configs])
    for col in ("configuration", "verdict", *gates, "R", "outputs not PASS", "diagnosis"):
        table.add_column(col, no_wrap=col not in ("diagnosis", "outputs not PASS"))
    for c in result.configs:
        failing = ", ".join(f"{n} {v.value}" for n, v in c.output_verdicts().items() if v is not Verdict.PASS) or "-"
        short = "; ".join(f"{d.output} {short_sentence(d.finding)}" for d in c.diagnoses
                          if not d.output.startswith("grad.") and d.finding.status != AGREES) or "-"
        found = c.certificate.gates
        table.add_row(c.config.label, verdict(c.verdict), *(verdict(found[g]) if g in found else "-" for g in gates),
                      str(c.cost.replicates), failing, short if len(short) < 160 else short[:157] + "...")
    body = [Text.assemble(("verdict ", "bold"), verdict(result.verdict), f"  {MEANING[result.verdict]}"),
            Text.assemble(("configuration dependence: ", "bold"), result.dependence), table]
    for c in result.configs:
        lines = diagnosis_lines(c)
        if c.verdict is not Verdict.PASS:
            lines = lines + [f"bias finding: {s}" for s in _worst_findings(result, c)] + gate_lines(c)
        if lines:
            body.append(Text(f"{c.config.label}:", style="bold"))
            body.extend(Text(f"  {line}", overflow="fold") for line in lines)
    cost = Table(header_style="bold", title="cost (seconds, wall)", title_justify="left")
    for col in ("configuration", "R", "launch", "ref", "oracle", "ranks", "kcert", "diagnosis", "total"):
        cost.add_column(col, justify="right" if col != "configuration" else "left")
    for c in result.configs:
        r = cost_row(c)
        cost.add_row(c.config.label, str(r["replicates"]),
                     *(f"{r[k]:.1f}" for k in ("launch_s", "ref_s", "oracle_s", "ranks_s", "kcert_s", "diagnose_s",
                                               "total_s")))
    body.append(cost)
    body.append(Text(f"reproduce: {result.command}", style="bold"))
    body.append(Text(f"seed {result.seed} · R = {result.replicates} per configuration · {result.wall_time_s:.1f} s",
                     style="dim"))
    title = Text.assemble(("kcert step · ", "bold"), (result.step, "bold cyan"))
    console.print(Panel(Group(*body), title=title, title_align="left", border_style=_STYLE[result.verdict]))


# --- HTML --------------------------------------------------------------------------------------------------


def _badge(v: str) -> str:
    return f'<span class="v" style="background:{_COLOURS[v]}">{v}</span>'


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
th{background:#f6f8fa}.v{font-weight:bold;color:#fff;padding:.1em .5em;border-radius:.3em}code{background:#f6f8fa}
li{margin:.2em 0}"""


def render_html(result) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(c.config.label)}</td><td>{_badge(c.verdict.value)}</td>"
        + "".join(f"<td>{_badge(v)}</td>" for v in _gate_cells(c))
        + f"<td>{c.cost.replicates}</td><td>{e(', '.join(f'{n} {v.value}' for n, v in c.output_verdicts().items() if v is not Verdict.PASS) or '-')}</td></tr>"
        for c in result.configs
    )
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>kcert step {e(result.step)}</title>"
             f"<style>{_CSS}</style></head><body>",
             f"<h1>{e(result.step)} {_badge(result.verdict.value)}</h1>",
             f"<p>{e(MEANING[result.verdict])}</p><p><b>Configuration dependence:</b> {e(result.dependence)}</p>",
             "<table><tr><th>configuration</th><th>verdict</th><th>algebra</th><th>bias</th><th>variance</th>"
             f"<th>R</th><th>outputs not PASS</th></tr>{rows}</table>"]
    for c in result.configs:
        lines = diagnosis_lines(c)
        if c.verdict is not Verdict.PASS:
            lines += [f"bias finding: {s}" for s in _worst_findings(result, c)] + gate_lines(c)
        if lines:
            parts.append(f"<h2>{e(c.config.label)} {_badge(c.verdict.value)}</h2><ul>"
                         + "".join(f"<li>{e(line)}</li>" for line in lines) + "</ul>")
    cost = "".join(
        f"<tr><td>{e(c.config.label)}</td>" + "".join(f"<td>{cost_row(c)[k]:.1f}</td>" for k in (
            "launch_s", "ref_s", "oracle_s", "ranks_s", "kcert_s", "diagnose_s", "total_s")) + "</tr>"
        for c in result.configs)
    parts.append("<h2>Cost (seconds, wall)</h2><table><tr><th>configuration</th><th>launch</th><th>ref</th>"
                 f"<th>oracle</th><th>ranks</th><th>kcert</th><th>diagnosis</th><th>total</th></tr>{cost}</table>")
    parts.append(f"<p>reproduce: <code>{e(result.command)}</code> · seed {result.seed} · R = {result.replicates} per "
                 f"configuration</p></body></html>")
    return "\n".join(parts)
