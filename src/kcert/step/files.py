"""Loading :class:`kcert.Step` objects from a user's file (``kcert step FILE.py``), and parsing the
``--config`` text of the command line."""

from __future__ import annotations

from pathlib import Path

from ..casefile import import_file, instances_in, select
from ..errors import CaseError, CaseFileError
from .config import SPLITS, StepConfig
from .spec import Step


def load_steps(path: str | Path, names: list[str] | None = None) -> list[Step]:
    """The steps ``path`` defines: those named in ``__all__`` or a module-level ``steps`` list when the
    file has one, else every module-level :class:`kcert.Step` (and those in module-level lists); with
    ``names``, only those (an unknown name is an error)."""
    module = import_file(path, "step file")
    namespace = vars(module)
    if "__all__" in namespace:
        found = [s for n in namespace["__all__"] if n in namespace for s in instances_in(namespace[n], Step)]
    elif "steps" in namespace:
        found = instances_in(namespace["steps"], Step)
    else:
        found = [s for value in namespace.values() for s in instances_in(value, Step)]
    unique = [s for i, s in enumerate(found) if all(s is not o for o in found[:i])]
    if not unique:
        raise CaseFileError(f"step file {str(path)!r} defines no kcert.Step at module level")
    return select(unique, names, path, "step")


_KEYS = {"k": "accumulation", "accumulation": "accumulation", "n": "world", "world": "world", "window": "window",
         "split": "split"}


def parse_config(text: str) -> StepConfig:
    """``"k=4,window=3"``, ``"n=2,split=context"``, ``"k=2,n=2"`` as a :class:`StepConfig`."""
    fields: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        name = _KEYS.get(key.strip())
        if not sep or name is None:
            raise CaseError(f"--config {text!r}: {part!r} is not KEY=VALUE with KEY one of k, n, window, split "
                            f"(e.g. k=4,window=3 or n=2,split=context)")
        if name in fields:
            raise CaseError(f"--config {text!r}: {key.strip()} is given twice")
        value = value.strip()
        if name == "split":
            if value not in SPLITS:
                raise CaseError(f"--config {text!r}: split must be one of {', '.join(SPLITS)}, got {value!r}")
            fields[name] = value
            continue
        try:
            fields[name] = int(value)
        except ValueError:
            raise CaseError(f"--config {text!r}: {key.strip()} must be an integer, got {value!r}") from None
    if not fields:
        raise CaseError(f"--config {text!r}: empty; give e.g. k=2 or n=2,split=data")
    return StepConfig(**fields)
