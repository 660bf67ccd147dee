"""Loading ``kcert.Case`` objects from a user's case file."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

from .case import Case
from .errors import CaseError, CaseFileError


def load_cases(path: str | Path, names: list[str] | None = None) -> list[Case]:
    """Import ``path`` and return its module-level cases (all, or those named, in file order)."""
    path = Path(path)
    if not path.is_file():
        raise CaseFileError(f"case file {str(path)!r} does not exist or is not a file")
    module_name = f"kcert_casefile_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CaseFileError(f"case file {str(path)!r} cannot be imported as Python (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # let the file import its neighbours
    try:
        spec.loader.exec_module(module)
    except CaseError as exc:
        raise CaseError(f"case file {str(path)!r}: {exc}") from exc
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the user's input error
        if isinstance(exc, KeyboardInterrupt):
            raise
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CaseFileError(
            f"case file {str(path)!r} does not import: {type(exc).__name__}: {exc} "
            f"(at {frame.filename}:{frame.lineno})"
        ) from exc
    finally:
        sys.path.remove(str(path.resolve().parent))
    cases: list[Case] = []
    for value in vars(module).values():
        if isinstance(value, Case) and all(value is not c for c in cases):
            cases.append(value)
        elif isinstance(value, (list, tuple)):
            cases += [v for v in value if isinstance(v, Case) and all(v is not c for c in cases)]
    if not cases:
        raise CaseFileError(f"case file {str(path)!r} defines no kcert.Case at module level")
    seen: dict[str, Case] = {}
    for c in cases:
        if c.name in seen:
            raise CaseFileError(f"case file {str(path)!r} defines two cases named {c.name!r}")
        seen[c.name] = c
    if names:
        missing = [n for n in names if n not in seen]
        if missing:
            raise CaseFileError(
                f"case file {str(path)!r} has no case named {', '.join(map(repr, missing))}; "
                f"it defines: {', '.join(seen)}"
            )
        return [seen[n] for n in names]
    return cases
