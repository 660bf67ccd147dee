"""One self-contained HTML page per run: verdicts and diagnosis first, then per output the bias plot,
the K histogram and the four tail diagnostics (PNG data URIs, inline CSS), then probe and provenance.

Rendering only reads results; the figures come from :mod:`kcert.report.plots` (matplotlib, imported
when a page is rendered, never by ``import kcert``)."""

from __future__ import annotations

import base64
import html
import json

from ..certificate import BitwiseResult, Certificate
from . import checks
from ..results.gates import ALGEBRA, BIAS, VARIANCE
from .blocks import AlgebraView, algebra_view, bitwise_view, gate_names, significance, timing_text
from .jsonio import to_dict
from .text import MEANING, error_comparison_text, fmt, gate_sentences, observed_range_text, paired_text, rare_events_text

_COLOURS = {"PASS": "#1a7f37", "WARN": "#9a6700", "FAIL": "#cf222e", "SKIPPED": "#8250df"}
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
th{background:#f6f8fa}.v{font-weight:bold;color:#fff;padding:.1em .5em;border-radius:.3em}code{background:#f6f8fa}
h2{border-bottom:2px solid #d0d7de;padding-bottom:.2em}h3{margin-top:1.8em}h4{margin:1.2em 0 .3em}
img.plot{display:block;max-width:100%;height:auto;border:1px solid #d0d7de;border-radius:.3em;margin:.4em 0}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(30em,1fr));gap:.8em}
.grid figure{margin:0}.grid figcaption{font-size:.85em;color:#57606a}
.note{background:#fff8c5;border:1px solid #d4a72c;border-radius:.3em;padding:.5em .8em}
.diag{font-size:.9em}.diag td:first-child{font-family:monospace}
section.output{border-left:4px solid #d0d7de;padding-left:1em;margin:1.5em 0}
"""


def _badge(v: str) -> str:
    return f'<span class="v" style="background:{_COLOURS[v]}">{v}</span>'


def _anchor(index: int) -> str:
    return f"case-{index + 1}"


def _index(certs: list[Certificate]) -> str:
    """The summary a page of several cases opens with: per case its verdict, each gate's and the time,
    linked to its section."""
    e = html.escape
    counts = {}
    for c in certs:
        counts[c.verdict.value] = counts.get(c.verdict.value, 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    gates = gate_names(certs)
    rows = "".join(
        f"<tr><td><a href='#{_anchor(i)}'>{e(c.case)}</a></td><td>{_badge(c.verdict.value)}</td>"
        + "".join(f"<td>{_badge(c.gates[g].value) if g in c.gates else '-'}</td>" for g in gates)
        + f"<td>{c.provenance.wall_time_s:.1f} s</td></tr>"
        for i, c in enumerate(certs))
    head = "".join(f"<th>{g}</th>" for g in gates)
    return (f"<h2>summary</h2><p>{len(certs)} cases: {tally}</p><table><tr><th>case</th><th>verdict</th>"
            f"{head}<th>time</th></tr>{rows}</table>")


def _case(cert: Certificate, index: int = 0) -> str:
    e = html.escape
    parts = [f"<h2 id='{_anchor(index)}'>{e(cert.case)} {_badge(cert.verdict.value)}</h2>"]
    if cert.description:
        parts.append(f"<p>{e(cert.description)}</p>")
    parts.append(f"<p>{e(MEANING[cert.verdict])}</p>")
    rows = "".join(
        f"<tr><td>{g}</td><td>{_badge(v.value)}</td><td>{'<br>'.join(e(s) for s in gate_sentences(cert, g))}</td></tr>"
        for g, v in cert.gates.items()
    )
    parts.append(f"<table><tr><th>gate</th><th>verdict</th><th>evidence</th></tr>{rows}</table>")
    for gate in (g for g in cert.gate_list if not g.per_output):  # the case's own evidence
        parts.append(_CASE_SECTIONS.get(gate.name, _other_case)(cert, gate))
    parts.append(_diagnostics(cert))
    names = [o.name for o in cert.outputs]
    names += [r.output for g in cert.gate_list if g.per_output for r in g.results(cert) if r.output not in names]
    for name in dict.fromkeys(names):
        parts.append(_output(cert, name))
    parts.append(checks.html_sections(cert))  # peer rules, shape sweep, adequacy (docs/kernelbench.md)
    parts.append(_probe_and_provenance(cert))
    return "\n".join(parts)


def _algebra(a: AlgebraView) -> str:
    """Which level Gate 1 reached: the symbolic proof (and its witness) or the identity test, and why;
    or the precision ladder's rungs and decisions, and an accepted untested algebra's limit."""
    e = html.escape
    if a.ladder is not None or a.untested_limit is not None:
        return _algebra_ladder(a)
    p = a.proof
    if p is None:
        return f"<p>algebra: level {e(a.level)} (symbolic proof not attempted)</p>"
    if not p.reached:
        return (f"<p>algebra: level {e(a.level)}; symbolic proof not reached ({e(p.reason)}, {p.seconds} s): "
                f"{e(p.note)}</p>")
    witness = f"<br>{e(p.witness)}" if p.witness else ""
    return f"<p>algebra: level {e(a.level)}; <b>{e(p.outcome)}</b> ({p.seconds} s): {e(p.note)}{witness}</p>"


def _algebra_ladder(a: AlgebraView) -> str:
    """The precision ladder's rungs and decisions, and an accepted untested algebra's limit."""
    e = html.escape
    parts = [f"<p>algebra: level {e(a.level_text)}</p>"]
    lad = a.ladder
    if lad is not None:
        head = "".join(f"<th>{e(n)}: prod / ref</th>" for n in lad.outputs)
        rows = []
        for r in lad.rungs:
            if not r.used:
                rows.append(f"<tr><td>{e(r.dtype)}</td><td colspan='{len(lad.outputs)}'>not used: "
                            f"{e(r.reason)}</td></tr>")
                continue
            cells = "".join(f"<td>{pe} / {re}</td>" for pe, re in r.errors)
            rows.append(f"<tr><td>{e(r.dtype)}</td>{cells}</tr>")
        parts.append(f"<p>precision ladder: relative error against the float64 oracle ({e(lad.oracle)}), inputs on "
                     f"the {e(lad.grid)} grid, {lad.points} points</p>"
                     f"<table><tr><th>precision</th>{head}</tr>{''.join(rows)}</table>")
        if lad.decisions:
            parts.append("<p>" + "<br>".join(e(d) for d in lad.decisions) + "</p>")
    if a.untested_limit is not None:
        parts.append(f"<p><b>algebra untested, accepted</b> (Case(accept_untested_algebra=True) or "
                     f"--accept-untested-algebra): {e(a.untested_limit)}</p>")
    return "\n".join(parts)


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _diagnostics(cert: Certificate) -> str:
    rows = []
    for gate in cert.gate_list:
        for r in gate.results(cert):
            where = getattr(r, "output", "")
            for d in getattr(r, "diagnostics", ()):
                rows.append(f"<tr><td>{html.escape(d.code)}</td><td>{gate.name} {html.escape(where)}</td>"
                            f"<td>{html.escape(d.message)}</td><td>{html.escape(d.remedy)}</td></tr>")
    for d in checks.diagnostics(cert):  # adequacy and shape sweep
        rows.append(f"<tr><td>{html.escape(d.code)}</td><td>checks</td><td>{html.escape(d.message)}</td>"
                    f"<td>{html.escape(d.remedy)}</td></tr>")
    if not rows:
        return ""
    return ("<h3>diagnostics</h3><table class='diag'><tr><th>code</th><th>gate</th><th>what</th><th>remedy</th></tr>"
            + "".join(rows) + "</table>")


def _bias_section(cert: Certificate, b) -> str:
    from . import plots

    e = html.escape
    parts = [f"<h4>bias gate {_badge(b.verdict.value)}</h4>",
             _img(plots.bias_effects(b), f"bias effects per bucket of {b.output}")]
    findings = b.findings(limit=20)
    if findings:
        head = "".join(f"<th>{h}</th>" for h in ("bucket", "statistic", "direction", "effect ULP", "z", "rho",
                                                   "prod-oracle ULP", "ref-oracle ULP", "x ref@rank", "verdict"))
        body = "".join(
            f"<tr><td>{e(f.label)}</td><td>{f.statistic}</td><td>{e(f.direction)}</td><td>{fmt(f.effect_ulp)}</td>"
            f"<td>{f.z:+.3g}</td><td>{fmt(f.standardized_effect)}</td><td>{fmt(f.prod_bias_ulp)}</td>"
            f"<td>{fmt(f.ref_bias_ulp)}</td><td>{fmt(f.ref_profile_ratio)}</td><td>{_badge(f.verdict.value)}</td></tr>"
            for f in findings
        )
        parts.append(f"<p>worst {len(findings)} buckets at WARN or above:</p><table><tr>{head}</tr>{body}</table>")
    else:
        parts.append(f"<p>no bucket WARN or FAIL; {e(significance(b).text())}.</p>")
    return "\n".join(parts)


def _variance_section(cert: Certificate, v) -> str:
    from . import plots

    e = html.escape
    cells = {"replicates": v.replicates, "harm unit": f"one {e(v.harm_format or v.dtype)} ULP at each replicate's peak",
             "errors": e(error_comparison_text(v))}
    iv = v.interval
    if iv is not None:
        cells.update({
            "tails (prod / ref)": e(f"u = {fmt(iv.threshold_prod)} / {fmt(iv.threshold_ref)}, {iv.exceedances_prod} / "
                                    f"{iv.exceedances_ref} exceedances, xi = {fmt(iv.shape_prod)} / {fmt(iv.shape_ref)} "
                                    f"({iv.model}), r_T = {fmt(iv.return_level_prod)} / {fmt(iv.return_level_ref)}"),
            "A_T": e(f"{fmt(iv.estimate)}, bounds [{fmt(iv.lower)}, U = {fmt(iv.upper)}] (profile likelihood, each "
                     f"one-sided {1 - iv.alpha:.5g})"),
        })
        h = iv.heterogeneity
        if h is not None:
            cells["shape test"] = e(f"prod xi {fmt(h.shape_prod)} vs ref xi {fmt(h.shape_ref)}, p = {fmt(h.p_value)}"
                                    + (" (rejected: one shape per side)" if h.rejects else ""))
        if v.threshold_stability:
            cells["threshold stability"] = ", ".join(f"A_T {fmt(r)} at q{q:g}" for q, r in v.threshold_stability)
        if iv.separate_alpha == iv.separate_alpha:  # not NaN: the separate-shapes bound was computed
            cells["one shape per side"] = e(f"U = {fmt(iv.separate_upper)} (one-sided {1 - iv.separate_alpha:.4g})")
        cells["stopping"] = e(v.stopping_rule)
    for key, text in (("observed range", observed_range_text(v)), ("paired difference", paired_text(v)),
                      ("rare events", rare_events_text(v))):
        if text:
            cells[key] = e(text)
    t = v.tail
    report = f"K = 0: {v.n_zero}, K > 0: {v.n_positive}, K = inf: {v.n_infinite}"
    if t is not None:
        report += f"; r_T + 3 se = {fmt(t.return_level)} + 3 x {fmt(t.standard_error)} = {fmt(t.upper_bound)}"
    cells["report's K (comparison)"] = e(report)
    row = "".join(f"<tr><th>{k}</th><td>{val}</td></tr>" for k, val in cells.items())
    parts = [f"<h4>variance gate {_badge(v.verdict.value)}</h4><p>{e(v.reason)}</p>",
             _img(plots.error_tails(v), f"error tails of {v.output}"), f"<table>{row}</table>"]
    if iv is not None:
        parts.append(f"<figure>{_img(plots.tail_qq(v), 'QQ plots')}<figcaption>each side's exceedances against its "
                     f"fitted GPD: points near the diagonal</figcaption></figure>")
    parts.append(f"<details><summary>the report's per-replicate ratio K (for comparison)</summary>"
                 f"{_img(plots.k_histogram(v), f'K histogram of {v.output}')}</details>")
    return "\n".join(parts)


def _bitwise_section(b: BitwiseResult, bias=None) -> str:
    """L0, informational: the bitwise-equal share, the ULP-distance histogram and the growth test, and what
    the bias gate made of the buckets L0 counts (``bias``: the same output's bias result)."""
    from . import plots

    e, v = html.escape, bitwise_view(b, bias)
    cells = {"classification": f"<b>{e(v.classification)}</b>" + (f"<br>{e(v.reconcile)}" if v.reconcile else ""),
             "elements": f"{v.elements} ({v.replicates} replicates)"}
    if v.compared:
        cells["bitwise equal"] = f"{v.equal} ({v.equal_share})"
        cells["farthest ULP distance"] = e(v.farthest)
    g = v.growth
    if g is not None:
        cells["significant buckets"] = (f"{g.significant} (|z| > {g.threshold} on mean(prod - ref), raw or "
                                        f"sign-aligned, at R = {g.replicates}: the bias gate's statistics and z*)")
        cells["median growth of z"] = (f"{g.median_growth}: z(R) / z({g.early_replicates}); a coherent bias "
                                       f"gives {g.expected}, growth counts above {g.cut}")
    if v.reason:
        cells["note"] = e(v.reason)
    rows = "".join(f"<tr><th>{k}</th><td>{val}</td></tr>" for k, val in cells.items())
    parts = ["<h4>L0 bitwise (informational, no verdict)</h4>", f"<table>{rows}</table>"]
    if v.compared:
        parts.append(_img(plots.ulp_distances(b), f"ULP distances of {b.output}"))
    return "\n".join(parts)


def _variance_sections(cert: Certificate, gate, name: str) -> list[str]:
    parts = []
    if cert.variance_skipped_reason:
        parts.append(f"<h4>variance gate {_badge('SKIPPED')}</h4><p class='note'>no tail fit: "
                     f"{html.escape(cert.variance_skipped_reason)}</p>")
    return parts + [_variance_section(cert, v) for v in cert.variance if v.output == name]


def _other_lines(gate, r) -> str:
    lines = "<br>".join(html.escape(line) for line in r.lines())
    return f"<h4>{html.escape(gate.name)} gate {_badge(r.verdict.value)}</h4><p>{lines}</p>"


def _other_output(cert: Certificate, gate, name: str) -> list[str]:
    """A per-output gate without a section of its own here: its verdict and ``lines()`` (or why it was
    skipped)."""
    why = gate.skipped(cert)
    if why:
        return [f"<h4>{html.escape(gate.name)} gate {_badge('SKIPPED')}</h4><p class='note'>{html.escape(why)}</p>"]
    return [_other_lines(gate, r) for r in gate.results(cert) if r.output == name]


def _other_case(cert: Certificate, gate) -> str:
    """A case-wide gate without a section of its own here: its verdict and ``lines()``."""
    why = gate.skipped(cert)
    if why:
        return f"<p>{html.escape(gate.name)}: {html.escape(why)}</p>"
    return "\n".join(_other_lines(gate, r) for r in gate.results(cert))


# Each gate's sections, in the registry's order: a case-wide gate's after the gates table, a per-output
# gate's in each output's section; a gate not named here: _other_case, _other_output.
_CASE_SECTIONS = {ALGEBRA.name: lambda cert, gate: _algebra(algebra_view(cert.algebra))}
_OUTPUT_SECTIONS = {
    BIAS.name: lambda cert, gate, name: [_bias_section(cert, b) for b in cert.bias if b.output == name],
    VARIANCE.name: lambda cert, gate, name: _variance_sections(cert, gate, name),
}


def _output(cert: Certificate, name: str) -> str:
    e = html.escape
    parts = [f"<section class='output'><h3>output · {e(name)}</h3>"]
    for gate in (g for g in cert.gate_list if g.per_output):
        parts.extend(_OUTPUT_SECTIONS.get(gate.name, _other_output)(cert, gate, name))
    bias = [b for b in cert.bias if b.output == name]
    for bw in (b for b in cert.bitwise if b.output == name):
        parts.append(_bitwise_section(bw, bias[0] if bias else None))
    parts.append("</section>")
    return "\n".join(parts)


def _probe_and_provenance(cert: Certificate) -> str:
    e = html.escape
    p = cert.provenance
    parts = ["<h3>probe and provenance</h3>"]
    probes = p.probes if isinstance(p.probes, dict) else {}
    rows = []
    for kind in ("inputs", "weights"):
        for name, spec in (probes.get(kind) or {}).items():
            desc = ", ".join(f"{k} = {v}" for k, v in spec.items()) if isinstance(spec, dict) else str(spec)
            rows.append(f"<tr><td>{kind}</td><td>{e(name)}</td><td>{e(desc)}</td></tr>")
    if rows:
        parts.append("<table><tr><th>role</th><th>name</th><th>probe</th></tr>" + "".join(rows) + "</table>")
    env = p.environment if isinstance(p.environment, dict) else {}
    versions = env.get("versions", {}) if isinstance(env.get("versions"), dict) else {}
    facts = {"seed": p.seed, "replicates": f"{p.replicates} (max {p.max_replicates})", "horizon T": fmt(p.horizon),
             "dtype": p.dtype, "device": p.device, "oracle": probes.get("oracle", "-"), "date": p.date,
             "wall time": timing_text(p),
             "software": ", ".join(f"{k} {v}" for k, v in versions.items()),
             "reduction": env.get("reduction", "torch"),
             "platform": f"{env.get('platform', '-')} ({env.get('cpu', '-')}"
                         + (f", {env['cpu_capability']})" if env.get("cpu_capability") else ")")}
    parts.append("<table>" + "".join(f"<tr><th>{k}</th><td>{e(str(v))}</td></tr>" for k, v in facts.items())
                 + "</table>")
    parts.extend(f"<p>note: {e(note)}</p>" for note in cert.notes)
    parts.append(f"<p>reproduce: <code>{e(p.command)}</code></p>")
    prov = json.dumps(to_dict(cert)["provenance"], indent=1)
    parts.append(f"<details><summary>provenance</summary><pre>{e(prov)}</pre></details>")
    return "\n".join(parts)


def render_html(certs: list[Certificate]) -> str:
    """One page: for several cases a summary with links first, then each case's section."""
    body = "\n<hr>\n".join(_case(c, i) for i, c in enumerate(certs))
    head = _index(certs) + "\n<hr>\n" if len(certs) > 1 else ""
    title = "kcert certificate" if len(certs) == 1 else f"kcert certificates: {len(certs)} cases"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>kcert report</title><style>{_STYLE}</style>"
            f"</head><body><h1>{html.escape(title)}</h1>\n{head}{body}\n</body></html>\n")
