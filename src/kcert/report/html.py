"""A plain, self-contained HTML page per run (the full report with plots is a later issue)."""

from __future__ import annotations

import html
import json

from ..certificate import Certificate
from .jsonio import to_dict
from .text import MEANING, fmt, gate_sentences

_COLOURS = {"PASS": "#1a7f37", "WARN": "#9a6700", "FAIL": "#cf222e", "SKIPPED": "#8250df"}
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
th{background:#f6f8fa}.v{font-weight:bold;color:#fff;padding:.1em .5em;border-radius:.3em}code{background:#f6f8fa}
"""


def _badge(v: str) -> str:
    return f'<span class="v" style="background:{_COLOURS[v]}">{v}</span>'


def _case(cert: Certificate) -> str:
    e = html.escape
    parts = [f"<h2>{e(cert.case)} {_badge(cert.verdict.value)}</h2>"]
    if cert.description:
        parts.append(f"<p>{e(cert.description)}</p>")
    parts.append(f"<p>{e(MEANING[cert.verdict])}</p>")
    rows = "".join(
        f"<tr><td>{g}</td><td>{_badge(v.value)}</td><td>{'<br>'.join(e(s) for s in gate_sentences(cert, g))}</td></tr>"
        for g, v in cert.gates.items()
    )
    parts.append(f"<table><tr><th>gate</th><th>verdict</th><th>evidence</th></tr>{rows}</table>")
    for b in cert.bias:
        findings = b.findings(limit=20)
        if findings:
            head = "".join(f"<th>{h}</th>" for h in ("bucket", "statistic", "direction", "effect ULP", "z", "rho",
                                                       "prod-oracle ULP", "ref-oracle ULP", "verdict"))
            body = "".join(
                f"<tr><td>{e(f.label)}</td><td>{f.statistic}</td><td>{e(f.direction)}</td><td>{fmt(f.effect_ulp)}</td>"
                f"<td>{f.z:+.3g}</td><td>{fmt(f.standardized_effect)}</td><td>{fmt(f.prod_bias_ulp)}</td>"
                f"<td>{fmt(f.ref_bias_ulp)}</td><td>{_badge(f.verdict.value)}</td></tr>"
                for f in findings
            )
            parts.append(f"<h3>bias · {e(b.output)}</h3><table><tr>{head}</tr>{body}</table>")
    for v in cert.variance:
        t = v.tail
        cells = {"replicates": v.replicates, "K = 0": v.n_zero, "K > 0": v.n_positive, "K = inf": v.n_infinite}
        if t is not None:
            cells.update({"u": fmt(t.threshold), "exceedances": t.n_exceedances, "zeta": fmt(t.exceedance_rate),
                          "xi": fmt(t.shape), "sigma": fmt(t.scale), "r_T": fmt(t.return_level),
                          "se": fmt(t.standard_error), "U": fmt(t.upper_bound)})
        row = "".join(f"<tr><th>{k}</th><td>{val}</td></tr>" for k, val in cells.items())
        parts.append(f"<h3>variance · {e(v.output)}</h3><table>{row}</table><p>{e(v.reason)}</p>")
    p = cert.provenance
    parts.append(f"<p>reproduce: <code>{e(p.command)}</code></p>")
    prov = json.dumps(to_dict(cert)["provenance"], indent=1)
    parts.append(f"<details><summary>provenance</summary><pre>{e(prov)}</pre></details>")
    return "\n".join(parts)


def render_html(certs: list[Certificate]) -> str:
    body = "\n<hr>\n".join(_case(c) for c in certs)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>kcert report</title><style>{_STYLE}</style>"
            f"</head><body><h1>kcert certificate</h1>\n{body}\n</body></html>\n")
