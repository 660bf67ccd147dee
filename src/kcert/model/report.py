"""``kcert model``'s reports: the terminal table in execution order with the localized module on top, the
JSON report (schema ``kcert.model/1``, docs/model.md) and an HTML page with a per-module strip (verdict,
bias effect, U) forward and backward, each row's full certificate below it."""

from __future__ import annotations

import html
import json
import math

from ..report.html import _COLOURS, _STYLE, _badge, _case
from ..report.jsonio import to_dict
from ..verdict import Verdict
from .results import (ModelCertificate, ModuleRow, against_ref_profile, bias_effect, profile_swap_evidence,
                      significant_bias, variance_bound, variance_held_back, variance_undecided,
                      within_ref_profile)
from .words import few

SCHEMA = "kcert.model/1"
_RICH = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "bold red", Verdict.SKIPPED: "magenta"}


def headline(cert: ModelCertificate) -> str:
    """One sentence: the verdict and the localized module (or why nothing is localized)."""
    first = cert.first_failure
    if first is not None:
        where = f"{first.names} ({first.kind}, {first.direction})"
        return f"{cert.name}: {cert.verdict.value} - localized: {where} is the first module that FAILs on its own inputs"
    if cert.failures:
        return f"{cert.name}: {cert.verdict.value} - the model FAILs end to end, no selected module FAILs on its own"
    return f"{cert.name}: {cert.verdict.value} - no module FAILs"


def _includes(cert: ModelCertificate, row: ModuleRow) -> str:
    inner = cert.failing_descendants(row) if row.verdict is Verdict.FAIL else ()
    return f"includes {', '.join(inner)}" if inner else ""


def render(cert: ModelCertificate, console) -> None:
    """The terminal report: the headline, the table in execution order, the unmatched modules."""
    from rich.table import Table
    from rich.text import Text

    console.print(Text(headline(cert), style="bold"), soft_wrap=True)
    t = Table(header_style="bold")
    for col in ("module", "kind", "direction", "verdict", "gate", "figure"):
        t.add_column(col, no_wrap=col in ("direction", "verdict"))
    first = cert.first_failure
    for row in cert.rows:
        figure = row.figure
        inner = _includes(cert, row)
        if inner:
            figure = f"{inner}; {figure}"
        if row.notes:
            figure += "\n" + "\n".join(f"note: {n}" for n in row.notes)
        name = Text(row.names, style="bold" if row is first else "")
        kind = row.kind if row.kind == row.prod_kind else f"{row.kind} -> {row.prod_kind}"
        t.add_row(name, kind, row.direction, Text(row.verdict.value, style=_RICH[row.verdict]),
                  row.deciding_gate or "", figure)
    console.print(t)
    padding = cert.provenance.get("padding")
    if padding:
        console.print(Text(f"padding: positions where {padding} is 0 are zeroed on both sides in every output led by "
                           "(batch, positions): not compared, no gradient from them (docs/model.md, Padded batches)"),
                      soft_wrap=True)
    autocast = cert.provenance.get("autocast")
    if autocast:
        console.print(Text(f"autocast: both models ran under torch.autocast({autocast}) in the working precision, "
                           f"as a mixed-precision training step runs them; harm in {autocast} ULPs (docs/model.md, "
                           "Mixed precision)"), soft_wrap=True)
    restored = cert.provenance.get("buffers_restored")
    if restored:
        said = "; ".join(f"{role}'s {few(names, 3)}" for role, names in restored.items())
        console.print(Text(f"state: the forwards wrote into buffers ({said}), put back as they were after the run "
                           "(docs/model.md, State the forwards write)"), soft_wrap=True)
    for warning in cert.warnings:
        console.print(Text(f"warning (the verdict is at least WARN): {warning}", style="yellow"), soft_wrap=True)
    if cert.unmatched:
        console.print(Text(f"unmatched modules (not certified; the verdict is at least WARN): "
                           + ", ".join(f"{n} ({m} only)" for m, n in cert.unmatched), style="yellow"), soft_wrap=True)


def _number(x):
    return None if x is None or not math.isfinite(x) else float(x)


def row_dict(cert: ModelCertificate, row: ModuleRow) -> dict:
    c = row.certificate
    return {
        "module": row.module, "prod_module": row.prod_module, "kind": row.kind, "prod_kind": row.prod_kind,
        "direction": row.direction,
        "order": row.order, "verdict": row.verdict.value, "deciding_gate": row.deciding_gate, "figure": row.figure,
        "bias_effect_ulp": None if c is None else _number(bias_effect(c)),
        "significant_bias_ulp": None if c is None else _number(significant_bias(c)),
        "ref_profile_ratio": None if c is None else _number(against_ref_profile(c)),
        "ref_profile_swap_p": None if c is None else _number(profile_swap_evidence(c)),
        "within_ref_profile": None if c is None else within_ref_profile(c),
        "variance_u": None if c is None else _number(variance_bound(c)),
        "variance_held_back_at": None if c is None else variance_held_back(c),
        "variance_undecided_at": None if c is None else variance_undecided(c),
        "went_on_from": row.went_on_from,
        "includes": list(cert.failing_descendants(row)) if row.verdict is Verdict.FAIL else [],
        "skipped_reason": row.skipped_reason, "notes": list(row.notes),
        "certificate": None if c is None else to_dict(c),
    }


def to_json(cert: ModelCertificate, settle_command: str | None = None) -> dict:
    """The ``kcert.model/1`` object; ``settle_command``: the command ``kcert model`` prints for the rows WARNing only
    for lack of evidence (null outside the command line or when there are none)."""
    first = cert.first_failure
    return {
        "schema": SCHEMA, "name": cert.name, "verdict": cert.verdict.value,
        "first_failure": None if first is None else {"module": first.module, "direction": first.direction,
                                                     "kind": first.kind},
        "selection": cert.selection,
        "unmatched": [{"model": m, "module": n} for m, n in cert.unmatched],
        "warnings": list(cert.warnings),
        "rows": [row_dict(cert, r) for r in cert.rows],
        "settle_command": settle_command,
        "provenance": cert.provenance,
    }


def dumps(certs: list[ModelCertificate], settle: dict[str, str] | None = None) -> str:
    """The JSON report: one pair an object, several an array; ``settle``: pair name -> its settle command."""
    objects = [to_json(c, (settle or {}).get(c.name)) for c in certs]
    payload = objects[0] if len(objects) == 1 else objects
    return json.dumps(payload, indent=1, default=str)


def _strip(cert: ModelCertificate, direction: str) -> str:
    """One cell per module in execution order: its verdict colour, significant bias effect and U."""
    e = html.escape
    cells = []
    for row in (r for r in cert.rows if r.direction == direction):
        c = row.certificate
        effect = None if c is None else significant_bias(c)
        u = None if c is None else variance_bound(c)
        text = (f"bias {effect:.2g} ULP" if effect is not None else "") + (f"<br>U {u:.3g}" if u is not None else "")
        title = e(f"{row.names} ({row.kind}): {row.verdict.value}; {row.figure}")
        cells.append(f"<td title='{title}' style='background:{_COLOURS[row.verdict.value]};color:#fff;"
                     f"font-size:.75em;min-width:5em'><b>{e(row.label.split('.')[-1] or row.label)}</b><br>{text}</td>")
    if not cells:
        return ""
    return f"<h3>{direction}</h3><div style='overflow-x:auto'><table><tr>{''.join(cells)}</tr></table></div>"


def render_html(certs: list[ModelCertificate]) -> str:
    e = html.escape
    parts = []
    index = 0
    for cert in certs:
        parts.append(f"<h1>{e(cert.name)} {_badge(cert.verdict.value)}</h1><p>{e(headline(cert))}</p>")
        parts.append("<h2>modules in execution order</h2>" + _strip(cert, "forward") + _strip(cert, "backward")
                     + _strip(cert, "end to end"))
        parts += [f"<p class='note'>warning: {e(w)}</p>" for w in cert.warnings]
        if cert.unmatched:
            parts.append("<p class='note'>unmatched modules (not certified): "
                         + e(", ".join(f"{n} ({m} only)" for m, n in cert.unmatched)) + "</p>")
        rows = "".join(
            f"<tr><td>{e(r.names)}</td><td>{e(r.kind)}</td><td>{e(r.direction)}</td><td>{_badge(r.verdict.value)}</td>"
            f"<td>{e(r.deciding_gate or '')}</td><td>{e(' '.join(filter(None, [_includes(cert, r), r.figure])))}"
            + "".join(f"<br><i>{e(n)}</i>" for n in r.notes) + "</td></tr>" for r in cert.rows)
        parts.append("<table><tr><th>module</th><th>kind</th><th>direction</th><th>verdict</th><th>gate</th>"
                     f"<th>figure</th></tr>{rows}</table>")
        for row in cert.rows:
            if row.certificate is not None and row.verdict is Verdict.FAIL:  # the full report of each FAIL
                parts.append(_case(row.certificate, index))
                index += 1
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>kcert model</title><style>{_STYLE}</style>"
            f"</head><body>{''.join(parts)}</body></html>")
