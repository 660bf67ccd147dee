"""Rendering a training comparison: the terminal (rich), JSON (``kcert.training-comparison/1``) and
one self-contained HTML page. Rendering only reads the result."""

from __future__ import annotations

import base64
import html
import json
import math

from ..numbers import fmt as number_text
from ..numbers import json_number
from ..results.training import PairedStatistic, TrainingComparison, TrainingVerdict

FORMAT = "kcert.training-comparison/1"
_COLOURS = {TrainingVerdict.DIFFERS: "red", TrainingVerdict.INDISTINGUISHABLE: "green",
            TrainingVerdict.INCONCLUSIVE: "yellow"}
_HEX = {TrainingVerdict.DIFFERS: "#cf222e", TrainingVerdict.INDISTINGUISHABLE: "#1a7f37",
        TrainingVerdict.INCONCLUSIVE: "#9a6700"}


def fmt(x: float, digits: int = 3) -> str:
    """A number of the comparison's text; missing (None or NaN) is "-"."""
    return number_text(x, digits, nan="-")


def _metric_rows(result: TrainingComparison) -> list[tuple[str, ...]]:
    def row(key: str, s: PairedStatistic, unit: str) -> tuple[str, ...]:
        spreads = "" if math.isnan(s.in_seed_spreads) else f" ({s.in_seed_spreads:+.2g} spreads)"
        return (s.name, f"{s.mean:+.3g}{unit}{spreads}", f"[{fmt(s.low)}, {fmt(s.high)}]", fmt(s.seed_spread),
                fmt(s.detectable), fmt(result.adjusted_p.get(key, math.nan), 2))

    d = result.drift
    return [
        row("final_loss", result.final_loss, ""),
        row("loss_curve", result.loss_curve, ""),
        row("mean_drift", d.mean, ""),
        ("gain drift pattern (sign-flip)", f"RMS {fmt(d.rms)}", "-", f"RMS {fmt(d.rms_seed_spread)}", "-",
         fmt(result.adjusted_p.get("drift", math.nan), 2)),
    ]


METRIC_HEADER = ("metric", "prod - ref (mean over seeds)", "interval", "seed-to-seed spread", "detectable (power)",
                 "p (Holm)")


def prediction_lines(result: TrainingComparison) -> list[str]:
    lines = []
    c = result.certificate
    if c is not None:
        gates = ", ".join(f"{g} {v}" for g, v in c.gates.items())
        lines.append(f"certificate (R = {c.replicates}, seed {c.seed}): {c.verdict} ({gates}); "
                     f"{c.significant} significant bias buckets; {certificate_agreement(result)}")
    p = result.prediction
    if not p.available:
        lines.append(f"drift prediction: none ({p.reason})")
    elif p.channels == 0:
        lines.append(f"drift prediction: 0 ({p.reason})")
    else:
        s = p.slope
        lines.append(f"drift prediction ({p.channels} gain channels, full compensation): RMS {fmt(p.predicted_rms)}, "
                     f"mean relative gain error {p.mean_relative_error:+.3g}")
        lines.append(f"measured on those channels: coherent drift RMS {fmt(p.coherent_rms)} against a seed-to-seed "
                     f"noise RMS {fmt(p.noise_rms)}; slope of drift on prediction {s.mean:+.3g} "
                     f"[{fmt(s.low)}, {fmt(s.high)}] (1 = as predicted, 0 = none of it); the gains travelled a "
                     f"median {fmt(p.moved_ulps)} ULPs of the working dtype")
        e = p.effective_slope
        if e is not None:
            lines.append(f"the channel's whole scale (gain x RMS of its column in the next matrices): slope on "
                         f"-delta {e.mean:+.3g} [{fmt(e.low)}, {fmt(e.high)}]")
    return lines


def certificate_agreement(result: TrainingComparison) -> str:
    """What the certificate expects of training beside what training measured, which is the verdict and
    the exit code: agreeing, or not, and what a disagreement means (docs/verdicts.md)."""
    c, verdict = result.certificate, result.verdict
    measured = f"measured: {verdict.value} (the verdict, exit {result.exit_code})"
    if c.verdict == "FAIL":
        if verdict is TrainingVerdict.DIFFERS:
            return f"a FAIL expects training to differ; {measured}: confirmed"
        return (f"a FAIL expects training to differ; {measured}: not confirmed at {len(result.seeds)} seeds x "
                f"{result.config['steps']} steps (a FAIL says prod computes something else; whether training "
                "notices, and how soon, depends on the defect: docs/verdicts.md)")
    if c.verdict == "PASS":
        if verdict is TrainingVerdict.DIFFERS:
            return (f"a PASS expects no difference at the certificate's horizon; {measured}: training shows what "
                    "the certificate did not detect (its low_power diagnostic says which horizon it covers)")
        return f"a PASS expects no difference at the certificate's horizon; {measured}"
    return f"a {c.verdict} expects nothing either way (it asks for a review); {measured}"


def render_line(result: TrainingComparison, console) -> None:
    """The verdict line alone (``--quiet``)."""
    colour = _COLOURS[result.verdict]
    console.print(f"[bold {colour}]{result.verdict.value}[/]  {result.case}  (exit {result.exit_code}; "
                  f"{result.reason})", highlight=False, soft_wrap=True)


def render(result: TrainingComparison, console) -> None:
    from rich.table import Table

    colour = _COLOURS[result.verdict]
    console.print(f"[bold]{result.case}[/]: [bold {colour}]{result.verdict.value}[/] - {result.reason}",
                  highlight=False, soft_wrap=True)
    cfg = result.config
    console.print(f"slot: {result.slot} ({result.where}); {result.dtype}; {len(result.seeds)} seeds x "
                  f"{cfg['steps']} steps, hidden {cfg['hidden']}, {cfg['layers']} layers; "
                  f"{result.wall_time_s:.0f} s" + (f"; seeds {list(result.resumed_seeds)} from the checkpoint"
                                                   if result.resumed_seeds else ""),
                  highlight=False, soft_wrap=True)
    table = Table(*METRIC_HEADER, header_style="bold")
    for row in _metric_rows(result):
        table.add_row(*row)
    console.print(table)
    console.print(f"parameters at the end: |prod - ref| / |ref - init| = {fmt(result.median_distance)} "
                  f"(median over seeds)", highlight=False)
    for line in prediction_lines(result):
        console.print(line, highlight=False, soft_wrap=True)


# --- JSON ------------------------------------------------------------------------------------------


def _num(x):
    """A JSON number of the comparison; non-finite is null."""
    return json_number(x, nonfinite_null=True)


def _stat(s: PairedStatistic | None) -> dict | None:
    if s is None:
        return None
    return {"name": s.name, "mean": _num(s.mean), "sd": _num(s.sd), "low": _num(s.low), "high": _num(s.high),
            "p_value": _num(s.p_value), "detectable": _num(s.detectable), "seed_spread": _num(s.seed_spread),
            "level": s.level, "power": s.power, "differences": [_num(v) for v in s.differences],
            "reference": [_num(v) for v in s.reference]}


def to_dict(result: TrainingComparison) -> dict:
    p = result.prediction
    c = result.certificate
    return {
        "format": FORMAT,
        "case": result.case,
        "slot": result.slot,
        "where": result.where,
        "dtype": result.dtype,
        "verdict": result.verdict.value,
        "exit_code": result.exit_code,
        "reason": result.reason,
        "alpha": result.alpha,
        "power": result.power,
        "seeds": list(result.seeds),
        "resumed_seeds": list(result.resumed_seeds),
        "config": result.config,
        "metrics": {"final_loss": _stat(result.final_loss), "loss_curve": _stat(result.loss_curve),
                    "mean_drift": _stat(result.drift.mean)},
        "adjusted_p": {k: _num(v) for k, v in result.adjusted_p.items()},
        "drift": {"channels": list(result.drift.channel_names), "p_value": _num(result.drift.p_value),
                  "statistic": _num(result.drift.statistic), "rms": _num(result.drift.rms),
                  "rms_seed_spread": _num(result.drift.rms_seed_spread),
                  "mean_per_channel": [_num(v) for v in result.drift.differences.mean(axis=0)]},
        "distance": [_num(r.distance) for r in result.runs],
        "certificate": None if c is None else {"verdict": c.verdict, "gates": c.gates, "replicates": c.replicates,
                                               "seed": c.seed, "significant": c.significant,
                                               "findings": c.bias_findings,
                                               "training_expected": result.expected_from_certificate,
                                               "agreement": certificate_agreement(result)},
        "prediction": {"available": p.available, "reason": p.reason, "channels": p.channels,
                       "predicted_rms": _num(p.predicted_rms), "coherent_rms": _num(p.coherent_rms),
                       "noise_rms": _num(p.noise_rms), "slope": _stat(p.slope), "moved_ulps": _num(p.moved_ulps),
                       "effective_slope": _stat(p.effective_slope),
                       "mean_relative_error": _num(p.mean_relative_error),
                       "predicted": None if p.predicted is None else [_num(v) for v in p.predicted]},
        "runs": [{"seed": r.seed, "distance": _num(r.distance),
                  **{arm: {"final_loss": _num(getattr(r, arm).final_loss),
                           "nonfinite_step": getattr(r, arm).nonfinite_step,
                           "seconds": getattr(r, arm).seconds,
                           "eval_steps": [int(s) for s in getattr(r, arm).eval_steps],
                           "eval_loss": [_num(v) for v in getattr(r, arm).eval_loss]}
                     for arm in ("ref", "prod")}} for r in result.runs],
        "entropy_rate": _num(result.entropy_rate),
        "wall_time_s": result.wall_time_s,
    }


def dumps(result: TrainingComparison) -> str:
    return json.dumps(to_dict(result), indent=1)


# --- HTML ------------------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
th{background:#f6f8fa}.v{font-weight:bold;color:#fff;padding:.1em .5em;border-radius:.3em}
img.plot{display:block;max-width:100%;height:auto;border:1px solid #d0d7de;border-radius:.3em;margin:.4em 0}
"""


def _img(png: bytes, alt: str) -> str:
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def render_html(result: TrainingComparison) -> str:
    from . import training_plots as plots

    e = html.escape
    badge = f'<span class="v" style="background:{_HEX[result.verdict]}">{e(result.verdict.value)}</span>'
    rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in _metric_rows(result))
    head = "".join(f"<th>{e(h)}</th>" for h in METRIC_HEADER)
    cfg = result.config
    lines = "".join(f"<li>{e(line)}</li>" for line in prediction_lines(result))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>kcert train-compare: {e(result.case)}</title>
<style>{_STYLE}</style></head><body>
<h1>{e(result.case)} {badge}</h1>
<p>{e(result.reason)}</p>
<p>slot: {e(result.slot)} ({e(result.where)}), {e(result.dtype)}; {len(result.seeds)} seeds x {cfg['steps']} steps,
hidden {cfg['hidden']}, {cfg['layers']} layers, batch {cfg['batch']} x {cfg['seq']} tokens.</p>
<table><tr>{head}</tr>{rows}</table>
<ul>{lines}</ul>
{_img(plots.loss_curves(result), "loss curves")}
{_img(plots.drift(result), "norm-gain drift")}
<p>docs/training.md explains the metrics, the prediction and the verdict.</p>
</body></html>
"""
