"""The L2 study of docs/training-graph.md: every training-step control, every configuration.

Certifies each control of the family ``step`` (src/kcert/controls/step.py) with
``kcert.certify_step`` at its declared replicates (negatives 128, positives 256), seed 0, as ``kcert controls --family step``
does, and prints Markdown tables: per control and configuration, the gates, the verdict, what the
diagnosis names (loss, gradient, grad norm and the parameters whose diagnosis differs) and the
sweep's configuration dependence; then the cost of every configuration (launching the ranks, ref,
the oracle, the ranks as the parent waits for them, kcert's own work, the diagnosis), in seconds of
wall time measured in the same run.

Usage: python benchmarks/training_graph.py [--only NAME ...] [--json OUT] [--write-docs]

``--write-docs`` replaces the tables between the ``<!-- study:begin -->`` and ``<!-- study:end -->``
markers of docs/training-graph.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path

import torch

DOCS = Path(__file__).resolve().parent.parent / "docs" / "training-graph.md"


def _cell(text: str, limit: int = 260) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def study_tables(results) -> str:
    from kcert.report.step import cost_row, diagnosis_lines
    from kcert.stats.aggregation import AGREES, short_sentence

    lines = ["| control | kind | half | configuration | algebra | bias | variance | verdict | R | diagnosis |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    deps = ["| control | kind | verdict | meets the bar | configuration dependence |", "| --- | --- | --- | --- | --- |"]
    costs = ["| control | configuration | R | launch | ref | oracle | ranks | kcert | diagnosis | total |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    details = []
    for r in results:
        c = r.control
        if r.step is None:
            lines.append(f"| `{c.name}` | {c.kind} | {c.half} | - | - | - | - | ERROR | - | {_cell(r.error)} |")
            continue
        for cfg in r.step.configs:
            g = cfg.certificate.gates
            shown = [f"{d.output} {short_sentence(d.finding)}" for d in cfg.diagnoses
                     if not d.output.startswith("grad.") and d.finding.status != AGREES]
            odd = [d for d in cfg.diagnoses if d.output.startswith("grad.") and d.rank_disagreement]
            shown += [f"ranks disagree on {d.output} ({d.rank_disagreement:.2g})" for d in odd[:2]]
            lines.append(f"| `{c.name}` | {c.kind} | {c.half} | {cfg.config.label} | {g['algebra'].value} | "
                         f"{g['bias'].value} | {g['variance'].value} | **{cfg.verdict.value}** | {cfg.cost.replicates} | "
                         f"{_cell('; '.join(shown) or '-')} |")
            k = cost_row(cfg)
            costs.append(f"| `{c.name}` | {cfg.config.label} | {k['replicates']} | " + " | ".join(
                f"{k[x]:.1f}" for x in ("launch_s", "ref_s", "oracle_s", "ranks_s", "kcert_s", "diagnose_s",
                                        "total_s")) + " |")
            if cfg.diagnoses:
                details.append(f"- `{c.name}` at {cfg.config.label}: " + " / ".join(diagnosis_lines(cfg, limit=3)))
        deps.append(f"| `{c.name}` | {c.kind} | {r.verdict.value} | {'yes' if r.meets_bar else '**no**'} | "
                    f"{_cell(r.step.dependence, 400)} |")
    return "\n".join(["#### Verdicts and diagnosis per configuration", "", *lines, "",
                      "#### Configuration dependence (the sweep)", "", *deps, "",
                      "#### Cost per configuration (seconds, wall, this run)", "", *costs, "",
                      "#### Diagnosis sentences", "", *details])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="only these controls")
    parser.add_argument("--json", metavar="OUT", help="write every step certificate (kcert.step-certificate/1)")
    parser.add_argument("--write-docs", action="store_true", help="replace the study tables of docs/training-graph.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from kcert.controls.registry import all_controls
    from kcert.controls.suite import run_controls
    from kcert.report.step import to_dict

    controls = [c for c in all_controls() if c.family == "step" and (not args.only or c.name in args.only)]
    started = time.perf_counter()
    results = []
    for c in controls:
        results += run_controls([c], seed=0)
        print(f"{c.name}: {results[-1].verdict.value if results[-1].verdict else 'ERROR'} "
              f"({results[-1].seconds:.0f} s)", flush=True)
    wall = time.perf_counter() - started
    tables = study_tables(results)
    header = (f"`python benchmarks/training_graph.py` (seed 0, each control's declared replicates per configuration "
              f"(negatives 128, positives 256; the variance gate may look up to 4x), "
              f"{len(controls)} controls, {wall / 60:.1f} min wall on {platform.machine()} with "
              f"{os.cpu_count()} cores, torch {torch.__version__}, OMP_NUM_THREADS="
              f"{os.environ.get('OMP_NUM_THREADS', 'unset')})")
    print(header + "\n\n" + tables)
    if args.json:
        Path(args.json).write_text(json.dumps([to_dict(r.step) for r in results if r.step], indent=1))
    if args.write_docs:
        text = DOCS.read_text()
        new = f"<!-- study:begin -->\n{header}\n\n{tables}\n<!-- study:end -->"
        DOCS.write_text(re.sub(r"<!-- study:begin -->.*<!-- study:end -->", lambda _: new, text, flags=re.S))


if __name__ == "__main__":
    main()
