"""Loading ``kcert.Case`` objects from a user's case file."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from .case import Case
from .errors import CaseError, CaseFileError


def load_cases(path: str | Path, names: list[str] | None = None) -> list[Case]:
    """Import ``path`` and return its cases (all, or those named, in the file's order).

    Which objects are the file's cases (:func:`discover` also says how they were found): the names
    in ``__all__`` when the file defines it, else a module-level ``cases`` list when there is one,
    else every module-level ``kcert.Case`` (and every Case in a module-level list or tuple). A case
    built only to derive another (``base = hf.rotary_case(...)``, then ``dataclasses.replace``) is
    left out by listing the cases to certify in ``__all__`` or ``cases``."""
    return list(discover(path, names).cases)


@dataclass(frozen=True)
class Discovery:
    """The cases a case file defines, those selected, and how they were found (``source``:
    "__all__", "cases" or "module")."""

    path: str
    defined: tuple[Case, ...]
    cases: tuple[Case, ...]
    source: str

    def describe(self) -> str:
        several = len(self.defined) != 1
        how = {"__all__": "listed in __all__", "cases": "listed in its `cases` list",
               "module": "every module-level kcert.Case" + ("; list them in __all__ or `cases` to choose" * several)
               }[self.source]
        names = ", ".join(c.name for c in self.defined)
        return f"{self.path}: {len(self.defined)} case{'s' * several} ({how}): {names}"


def import_file(path: str | Path, kind: str = "case file"):
    """Import the Python file ``path`` as a fresh module (its folder on ``sys.path`` while it runs); a
    file that does not import is a :class:`CaseFileError` naming the line."""
    path = Path(path)
    if not path.is_file():
        raise CaseFileError(f"{kind} {str(path)!r} does not exist or is not a file")
    module_name = f"kcert_casefile_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CaseFileError(f"{kind} {str(path)!r} cannot be imported as Python (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # let the file import its neighbours
    try:
        spec.loader.exec_module(module)
    except CaseError as exc:
        raise CaseError(f"{kind} {str(path)!r}: {exc}") from exc
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the user's input error
        if isinstance(exc, KeyboardInterrupt):
            raise
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CaseFileError(
            f"{kind} {str(path)!r} does not import: {type(exc).__name__}: {exc} "
            f"(at {frame.filename}:{frame.lineno})"
        ) from exc
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def discover(path: str | Path, names: list[str] | None = None) -> Discovery:
    """Import ``path``; its cases (see :func:`load_cases`) and the selection ``names``."""
    path = Path(path)
    module = import_file(path)
    cases, source = _declared_cases(module, path)
    if not cases:
        raise CaseFileError(f"case file {str(path)!r} defines no kcert.Case at module level")
    chosen = select(cases, names, path, "case")
    return Discovery(str(path), tuple(cases), tuple(chosen), source)


def select(items: list, names: list[str] | None, path: str | Path, kind: str = "case") -> list:
    """``items`` (cases, steps: objects with a ``name``) or those ``names`` picks, in the order named (a
    name given twice once); two items of one name, or a name the file does not define, is a
    :class:`CaseFileError`."""
    seen: dict[str, object] = {}
    for item in items:
        if item.name in seen:
            raise CaseFileError(f"{kind} file {str(path)!r} defines two {kind}s named {item.name!r}")
        seen[item.name] = item
    if not names:
        return list(items)
    names = list(dict.fromkeys(names))  # --case X --case X certifies X once
    missing = [n for n in names if n not in seen]
    if missing:
        raise CaseFileError(f"{kind} file {str(path)!r} has no {kind} named {', '.join(map(repr, missing))}; "
                            f"it defines: {', '.join(seen)}")
    return [seen[n] for n in names]


def instances_in(value, kind: type) -> list:
    """``value`` itself when it is a ``kind``, or the ``kind`` items of a list or tuple (how a case or
    step file exports its cases or steps)."""
    if isinstance(value, kind):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, kind)]
    return []


def _unique(cases) -> list[Case]:
    out: list[Case] = []
    for c in cases:
        if all(c is not o for o in out):
            out.append(c)
    return out


def _declared_cases(module, path: Path) -> tuple[list[Case], str]:
    """The module's cases and where they came from (see :func:`load_cases`)."""
    where = f"case file {str(path)!r}"
    namespace = vars(module)
    if "__all__" in namespace:
        exported = namespace["__all__"]
        if not isinstance(exported, (list, tuple)) or not all(isinstance(n, str) for n in exported):
            raise CaseFileError(f"{where}: __all__ must be a list of names, got {exported!r}")
        missing = [n for n in exported if n not in namespace]
        if missing:
            raise CaseFileError(f"{where}: __all__ names {', '.join(map(repr, missing))}, which the file does not define")
        cases = _unique(c for n in exported for c in instances_in(namespace[n], Case))
        if not cases:
            raise CaseFileError(f"{where}: __all__ names no kcert.Case (nor a list of them)")
        return cases, "__all__"
    if "cases" in namespace:
        listed = namespace["cases"]
        if not isinstance(listed, (list, tuple)) or not listed or not all(isinstance(c, Case) for c in listed):
            kinds = sorted({type(c).__name__ for c in listed}) if isinstance(listed, (list, tuple)) else \
                type(listed).__name__
            raise CaseFileError(f"{where}: the module-level `cases` must be a non-empty list of kcert.Case, "
                                f"got {kinds}")
        return _unique(listed), "cases"
    cases = _unique(c for value in namespace.values() for c in instances_in(value, Case))
    return cases, "module"
