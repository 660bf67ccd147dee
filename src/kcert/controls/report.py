"""Rendering the control suite: terminal table, Markdown table for the docs, JSON (built on the report's
JSON form and styles: the suite's result types are the control layer's, above the report)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..report.jsonio import to_dict
from ..report.terminal import STYLE
from ..results.gates import ALGEBRA, BIAS, VARIANCE
from ..verdict import Verdict
from .suite import DIFFERS_SHARE, ControlResult, SuiteSummary

SCHEMA = "kcert.controls/1"


def _v(v: Verdict | None) -> str:
    return v.value if v is not None else "ERROR"


def summary_lines(s: SuiteSummary) -> list[str]:
    only = ", ".join(f"{g} alone {len(names)}" for g, names in s.only_by.items())
    lines = [
        f"negatives detected (at least WARN): {s.detected}/{s.negatives} ({only}); "
        f"under the report's bias rules: {s.detected_report_rules}/{s.negatives}",
        f"negatives that FAIL (block the migration): {s.negative_fail}/{s.negatives}; "
        f"under the report's bias rules: {s.negative_fail_report_rules}/{s.negatives}",
        f"positives: FAIL {s.positive_fail} / WARN {s.positive_warn} of {s.positives}; "
        f"under the report's bias rules: FAIL {s.positive_fail_report_rules} / WARN {s.positive_warn_report_rules}",
    ]
    for gate, names in s.only_by.items():
        if names:
            lines.append(f"only {gate} detects: {', '.join(names)}")
    if s.missed:
        lines.append(f"missed: {', '.join(s.missed)}")
    lines += [f"error: {e}" for e in s.errors] + [f"expectation not met: {e}" for e in s.failed_expectations]
    ev = s.positive_evidence
    if ev:
        lines.append(f"null evidence: {ev.get('differs', 0)} positives differ from ref in at least "
                     f"{DIFFERS_SHARE:.0%} of their elements; {ev.get('near identical', 0)} differ in fewer; "
                     f"{ev.get('identical', 0)} are bitwise identical (sanity checks, not null evidence)")
    for half, c in s.halves.items():
        if c.get("negatives") or c.get("positives"):
            lines.append(f"{half} half: negatives detected {c['detected']}/{c['negatives']} (FAIL {c['negative_fail']}); "
                         f"positives FAIL {c['positive_fail']} / WARN {c['positive_warn']} of {c['positives']} "
                         f"({c['positive_differs']} differ from ref)")
    from .registry import not_runnable

    for name, (family, reason) in sorted(not_runnable().items()):
        lines.append(f"not run here: {name} ({family}): {reason}")
    lines.append("bar (at most one negative missed, 0 positive FAIL, <= 2 positive WARN over every family): "
                 + ("MET" if s.meets_bar else "NOT MET"))
    return lines


def render_table(results: list[ControlResult], summary: SuiteSummary, console: Console) -> None:
    t = Table(header_style="bold", title="kcert control suite", title_justify="left")
    for col in ("control", "kind", "family", "half", "source", ALGEBRA.name, "algebra level", BIAS.name, VARIANCE.name,
                "verdict", "report rules", "differs", "deciding figure", "s"):
        t.add_column(col, overflow="fold")
    for r in results:
        gates = r.gates
        t.add_row(
            r.control.name, r.control.kind, r.control.family, r.control.half, r.control.source,
            Text(_v(gates.get(ALGEBRA.name)), style=STYLE.get(gates.get(ALGEBRA.name), "")), _level(r),
            *(Text(_v(gates.get(g)), style=STYLE.get(gates.get(g), "")) for g in (BIAS.name, VARIANCE.name)),
            Text(_v(r.verdict), style=STYLE.get(r.verdict, "bold red")),
            _v(r.report_rules_verdict()), _differs(r),
            r.deciding_figure(), f"{r.seconds:.1f}",
        )
    console.print(t)
    for line in summary_lines(summary):
        console.print(line, highlight=False)


def _level(r: ControlResult) -> str:
    """The evidence the algebra verdict rests on ("proof at shape ...", "identity test (real mode)",
    "precision ladder (float32 vs bfloat16)", "none")."""
    return r.certificate.algebra.level_text if r.certificate else ""


def _differs(r: ControlResult) -> str:
    """The share of elements where prod differs from ref, with the positive's evidence class."""
    share = r.differing_share
    if share is None:
        return ""
    text = f"{100 * share:.3g}%"
    return f"{text} ({r.evidence})" if r.evidence and r.evidence != "differs" else text


def markdown(results: list[ControlResult], summary: SuiteSummary, command: str) -> str:
    rows = ["| control | kind | family | half | source | algebra | algebra level | bias | variance | verdict | "
            "report's rules | differs | deciding figure |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        g = r.gates
        rows.append(
            f"| `{r.control.name}` | {r.control.kind} | {r.control.family} | {r.control.half} | {r.control.source} | "
            f"{_v(g.get(ALGEBRA.name))} | {_level(r).replace('|', '/')} | {_v(g.get(BIAS.name))} | "
            f"{_v(g.get(VARIANCE.name))} | "
            f"**{_v(r.verdict)}** | "
            f"{_v(r.report_rules_verdict())} | {_differs(r)} | {r.deciding_figure().replace('|', '/')} |"
        )
    summary = "\n".join(f"- {line}" for line in summary_lines(summary))
    return PREFACE.format(command=command) + f"{summary}\n\n" + "\n".join(rows) + "\n"


PREFACE = """# The control suite

kcert proves its method the way the technical report did (docs/method.md): on negative
controls, each a reproduction of a defect from a public bug report, and positive controls, real
kernels, stressed probes and benign rewrites that must not FAIL. Each control's docstring (in
`src/kcert/controls/`) names its source, states in math what was wrong and says why the
reproduction is faithful; the reference implementations come from `src/kcert/catalog/`. The
families beyond the report's own (backward, framework, compiled, float32, opaque) hold kernels
nobody here wrote, or written the way production kernels are written: `torch.compile` (inductor),
Hugging Face's attention implementations, float32 Triton-style kernels, custom ops, C++ and Triton.

This file is generated by `{command}` (seed 0, kcert's default thresholds, each control at
its declared replicates). Columns: the three gates and the combined verdict under kcert's
defaults; "half", the control's half for tuning discipline (below); "algebra level", the evidence
the algebra verdict rests on (a symbolic proof at a small shape, the identity test in real mode,
the precision ladder for opaque kernels, or none); "report's rules" is the combined verdict when the
bias gate uses the technical report's rules instead (raw mean only, c = 1 ULP, no attribution
through the oracle; the algebra and variance gates are the same); "differs", the share of output
elements where prod differs from ref bitwise (a positive below 1 % is a sanity check, not null
evidence: it could hardly raise a false alarm); the deciding figure is the number behind the most
severe gate.

**The bar** counts every control of every family: at most one negative missed, no positive FAIL,
at most two positives WARN, and every exact expectation (`expect=`) met.

**Tuning discipline.** Each control belongs to a half fixed by its name alone (`Control.half`: the
first byte of the SHA-256 of the name, even for "tuning", odd for "validation"). Thresholds are chosen
on the tuning half and on simulation only, and reported on both halves below; the thresholds chosen
before the split existed, and how they fare on the validation half, are listed in docs/method.md
("Where kcert departs from the report").

"""


def dumps(results: list[ControlResult], summary: SuiteSummary) -> str:
    payload = {
        "schema": SCHEMA,
        "summary": {
            "negatives": summary.negatives, "detected": summary.detected,
            "detected_report_rules": summary.detected_report_rules, "negative_fail": summary.negative_fail,
            "negative_fail_report_rules": summary.negative_fail_report_rules, "only_by": summary.only_by,
            "missed": summary.missed, "positives": summary.positives, "positive_fail": summary.positive_fail,
            "positive_warn": summary.positive_warn, "positive_evidence": summary.positive_evidence,
            "halves": summary.halves, "differs_share": DIFFERS_SHARE,
            "positive_fail_report_rules": summary.positive_fail_report_rules,
            "positive_warn_report_rules": summary.positive_warn_report_rules, "errors": summary.errors,
            "failed_expectations": summary.failed_expectations, "meets_bar": summary.meets_bar,
        },
        "controls": [
            {
                "name": r.control.name, "kind": r.control.kind, "family": r.control.family, "half": r.control.half,
                "differing_share": r.differing_share, "evidence": r.evidence,
                "source": r.control.source, "summary": r.control.summary, "expect": r.control.expect,
                "verdict": _v(r.verdict), "gates": {k: v.value for k, v in r.gates.items()},
                "algebra_level": _level(r),
                "report_rules": {"verdict": _v(r.report_rules_verdict()),
                                 "gates": {k: v.value for k, v in r.report_rules_gates().items()}},
                "deciding_figure": r.deciding_figure(), "seconds": r.seconds, "error": r.error,
                "certificate": to_dict(r.certificate) if r.certificate else None,
            }
            for r in results
        ],
    }
    return json.dumps(payload, indent=1, allow_nan=False)
