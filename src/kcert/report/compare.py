"""``kcert compare OLD.json NEW.json``: what changed between two certificates of the same cases.

The JSON reports are read generically, so that fields a gate adds later are compared too:

- **verdicts**: every ``"verdict"`` field met in both documents at the same place (the certificate's,
  each gate's, each output's), with whether it got worse (PASS < SKIPPED < WARN < FAIL);
- **figures**: every number present at the same place in both; a scalar moves by its relative change,
  an array of equal length (per bucket, per replicate) by its element that moved most against the
  array's scale, named by its bucket label when the output lists them;
- **settings**: other short fields that differ (the algebra level, a proof outcome, L0's class);
- **provenance**: every field that differs (versions, seed, replicates, device, probes, command),
  except the date, the wall time, the time per stage and whether the run was resumed.

Lists of objects are matched by their name field (``output``, ``name``, ``code``, ``case``) rather than
by position. Exit code (:meth:`Comparison.exit_code`): 1 when a verdict got worse or a case of OLD is
missing from NEW, else 0; an unreadable file is an input error (2). Pure data: no torch, no rich here
except in :func:`render`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompareError
from ..numbers import NONFINITE, fmt
from .stable import RUN_VARYING
from ..verdict import Verdict

SCHEMA_PREFIX = "kcert.certificate/"
KEYS = ("output", "name", "code", "case", "quantile")  # what names an element of a list of objects
IGNORED_PROVENANCE = RUN_VARYING
SHORT_TEXT = 40  # longer strings (reasons, notes) restate the figures: not compared as settings


@dataclass(frozen=True)
class VerdictChange:
    case: str
    where: str  # e.g. "verdict", "gates.bias", "gates.bias.outputs[output]"
    old: str
    new: str

    @property
    def worse(self) -> bool:
        return _severity(self.new) > _severity(self.old)


@dataclass(frozen=True)
class FigureChange:
    case: str
    where: str
    old: float
    new: float
    change: float  # relative: |new - old| over max(|old|, |new|) (arrays: over the array's scale)
    index: int | None = None  # for arrays: the element that moved most
    label: str | None = None  # its bucket label, when the output names its buckets
    elements_changed: int = 0  # for arrays: how many elements differ


@dataclass(frozen=True)
class TextChange:
    case: str
    where: str
    old: object
    new: object


@dataclass(frozen=True)
class CaseComparison:
    case: str
    verdicts: tuple[VerdictChange, ...]
    figures: tuple[FigureChange, ...]  # every figure that moved, largest change first
    settings: tuple[TextChange, ...]
    provenance: tuple[TextChange, ...]

    @property
    def worse(self) -> tuple[VerdictChange, ...]:
        return tuple(v for v in self.verdicts if v.worse)


@dataclass(frozen=True)
class Comparison:
    old: str
    new: str
    cases: tuple[CaseComparison, ...]
    only_old: tuple[str, ...]
    only_new: tuple[str, ...]

    @property
    def regressions(self) -> tuple[str, ...]:
        """Why the exit code is 1: cases whose verdicts got worse, and cases that disappeared."""
        out = [f"{c.case}: {v.where} {v.old} -> {v.new}" for c in self.cases for v in c.worse]
        out += [f"{name}: missing from {self.new}" for name in self.only_old]
        return tuple(out)

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


def _severity(value: str) -> int:
    try:
        return Verdict(value).severity
    except ValueError:
        return -1


def load_certificates(path: str | Path) -> dict[str, dict]:
    """The certificates of one JSON report (an object, or an array of them), by case name."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CompareError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareError(f"{where}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CompareError(f"{where}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    documents = data if isinstance(data, list) else [data]
    out: dict[str, dict] = {}
    for i, doc in enumerate(documents):
        schema = doc.get("schema") if isinstance(doc, dict) else None
        if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX) or "case" not in doc:
            what = f"element {i}" if isinstance(data, list) else "the document"
            raise CompareError(f"{where}: {what} is not a kcert certificate (schema {schema!r}, expected "
                               f"{SCHEMA_PREFIX}N; write one with kcert certify --json)")
        if doc["case"] in out:
            raise CompareError(f"{where}: two certificates of case {doc['case']!r}")
        out[doc["case"]] = doc
    if not out:
        raise CompareError(f"{where}: holds no certificate")
    return out


def compare_files(old: str | Path, new: str | Path) -> Comparison:
    a, b = load_certificates(old), load_certificates(new)
    cases = tuple(compare_certificates(a[name], b[name]) for name in a if name in b)
    return Comparison(str(old), str(new), cases, tuple(n for n in a if n not in b), tuple(n for n in b if n not in a))


def compare_certificates(old: dict, new: dict) -> CaseComparison:
    """Every difference between two certificates of one case (see the module's docstring)."""
    walk = _Walk(str(new.get("case")))
    walk.visit({k: v for k, v in old.items() if k != "provenance"},
               {k: v for k, v in new.items() if k != "provenance"}, "", None)
    provenance = _Walk(walk.case, all_text=True)
    provenance.visit(old.get("provenance", {}), new.get("provenance", {}), "provenance", None)
    changed = tuple(TextChange(walk.case, c.where, c.old, c.new) for c in provenance.settings
                    if c.where.split(".")[1].split("[")[0] not in IGNORED_PROVENANCE)
    figures = tuple(sorted(walk.figures, key=lambda f: (-f.change if not math.isnan(f.change) else -math.inf, f.where)))
    return CaseComparison(walk.case, tuple(walk.verdicts), figures, tuple(walk.settings), changed)


def _number(x) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str) and x in NONFINITE:
        return NONFINITE[x]
    return None


def _relative(old: float, new: float, scale: float | None = None) -> float:
    if old == new or (math.isnan(old) and math.isnan(new)):
        return 0.0
    if not (math.isfinite(old) and math.isfinite(new)):
        return math.inf
    scale = max(abs(old), abs(new)) if scale is None else scale
    return abs(new - old) / scale if scale > 0 else math.inf


def _key_of(items: list) -> str | None:
    """The field that names each object of a list, when every object has a distinct one."""
    if not items or not all(isinstance(x, dict) for x in items):
        return None
    for key in KEYS:
        values = [json.dumps(x.get(key), sort_keys=True) for x in items]
        if all(key in x for x in items) and len(set(values)) == len(values):
            return key
    return None


class _Walk:
    def __init__(self, case: str, all_text: bool = False):
        self.case = case
        self.all_text = all_text  # provenance: every differing text, however long
        self.verdicts: list[VerdictChange] = []
        self.figures: list[FigureChange] = []
        self.settings: list[TextChange] = []

    def visit(self, old, new, where: str, labels: list | None) -> None:
        if isinstance(old, dict) and isinstance(new, dict):
            buckets = new.get("buckets")
            if isinstance(buckets, dict) and isinstance(buckets.get("labels"), list):
                labels = buckets["labels"]
            for key in old:
                if key in new:
                    self.visit(old[key], new[key], f"{where}.{key}" if where else key, labels)
            return
        if isinstance(old, list) and isinstance(new, list):
            self._list(old, new, where, labels)
            return
        a, b = (None, None) if self.all_text else (_number(old), _number(new))
        if a is not None and b is not None:
            change = _relative(a, b)
            if change:
                self.figures.append(FigureChange(self.case, where, a, b, change))
            return
        if old == new:
            return
        if where.rsplit(".", 1)[-1] == "verdict" and _severity(str(old)) >= 0 and _severity(str(new)) >= 0:
            self.verdicts.append(VerdictChange(self.case, _verdict_place(where), str(old), str(new)))
        elif self.all_text or all(x is None or isinstance(x, (bool, int, float)) or
                                  (isinstance(x, str) and len(x) <= SHORT_TEXT) for x in (old, new)):
            self.settings.append(TextChange(self.case, where, old, new))

    def _list(self, old: list, new: list, where: str, labels: list | None) -> None:
        key = _key_of(old) if _key_of(old) == _key_of(new) else None
        if key is not None:
            by_name = {json.dumps(x[key], sort_keys=True): x for x in new}
            for x in old:
                name = json.dumps(x[key], sort_keys=True)
                if name in by_name:
                    self.visit(x, by_name[name], f"{where}[{x[key]}]", labels)
            return
        a = [_number(x) for x in old]
        b = [_number(x) for x in new]
        if old and new and not self.all_text and all(x is not None for x in a + b):
            if len(a) != len(b):
                self.settings.append(TextChange(self.case, where, f"{len(a)} values", f"{len(b)} values"))
                return
            finite = [abs(x) for x in a + b if math.isfinite(x)]
            scale = max(finite) if finite else 0.0
            moved = [(_relative(x, y, scale), i) for i, (x, y) in enumerate(zip(a, b))]
            changed = [m for m in moved if m[0]]
            if changed:
                change, i = max(changed, key=lambda m: (m[0], -m[1]))
                label = str(labels[i]) if labels is not None and len(labels) == len(a) else None
                self.figures.append(FigureChange(self.case, where, a[i], b[i], change, i, label, len(changed)))
            return
        if len(old) == len(new) and all(isinstance(x, (dict, list)) for x in old + new):
            for i, (x, y) in enumerate(zip(old, new)):
                self.visit(x, y, f"{where}[{i}]", labels)
            return
        if old != new and (self.all_text or (all(isinstance(x, str) and len(x) <= SHORT_TEXT for x in old + new)
                                              and len(old) <= 8)):
            self.settings.append(TextChange(self.case, where, old, new))


def _verdict_place(where: str) -> str:
    """``gates.bias.verdict`` -> ``gates.bias``; the certificate's own ``verdict`` stays ``verdict``."""
    return where.rsplit(".", 1)[0] if "." in where else where


# --- rendering ---------------------------------------------------------------------------------------


def render(comparison: Comparison, console, top: int = 10) -> None:
    """The comparison as text: per case its verdict changes, the figures that moved most, the
    settings and provenance that differ; then why the exit code is what it is."""
    from rich.table import Table
    from rich.text import Text

    c = comparison
    console.print(Text(f"kcert compare {c.old} -> {c.new}: {len(c.cases)} case(s) in both", style="bold"))
    for name in c.only_old:
        console.print(Text(f"  {name}: only in {c.old} (missing from {c.new})", style="bold red"))
    for name in c.only_new:
        console.print(Text(f"  {name}: only in {c.new}", style="dim"))
    for case in c.cases:
        overall = next((v for v in case.verdicts if v.where == "verdict"), None)
        head = f"{overall.old} -> {overall.new}" if overall else "verdict unchanged"
        style = "bold red" if case.worse else ("bold green" if case.verdicts else "bold")
        console.print(Text(f"\ncase {case.case}: {head}", style=style))
        for v in case.verdicts:
            mark = " (worse)" if v.worse else " (better)" if _severity(v.new) < _severity(v.old) else ""
            console.print(Text(f"  {v.where}: {v.old} -> {v.new}{mark}", style="red" if v.worse else ""),
                          highlight=False)
        if case.figures:
            t = Table("figure", "element", "old", "new", "relative change", header_style="bold",
                      title=f"figures that moved most ({min(top, len(case.figures))} of {len(case.figures)})",
                      title_justify="left")
            for f in case.figures[:top]:
                element = "" if f.index is None else (f.label or f"[{f.index}]")
                if f.index is not None and f.elements_changed > 1:
                    element += f" (of {f.elements_changed} changed)"
                t.add_row(Text(f.where), Text(element), fmt(f.old, 4), fmt(f.new, 4), fmt(f.change, 4))  # no markup
            console.print(t)
        else:
            console.print("  no figure moved", highlight=False)
        for s in case.settings:
            console.print(f"  {s.where}: {s.old!r} -> {s.new!r}", highlight=False, markup=False)
        for p in case.provenance:
            console.print(f"  {p.where}: {_short(p.old)} -> {_short(p.new)}", highlight=False, markup=False,
                          style="dim")
    if c.regressions:
        console.print(Text("\nexit 1: " + "; ".join(c.regressions), style="bold red"), highlight=False)
    else:
        console.print(Text("\nexit 0: no verdict got worse", style="bold green"), highlight=False)


def _short(value, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
