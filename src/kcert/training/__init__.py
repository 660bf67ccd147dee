"""Short training runs that test a certificate: does a kernel pair move training?

``kcert.training.compare(case)`` trains a small decoder on a synthetic language twice per seed,
once with ref's kernel in the case's slot and once with prod's, and compares the runs paired by
seed (docs/training.md). Names are imported lazily: ``kcert.training.stats`` and the result
classes load without torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "compare": "compare",
    "TrainingConfig": "config",
    "QUICK": "config",
    "Language": "language",
    "SlotError": "slots",
    "bind": "slots",
    "TrainingComparison": "results",
    "TrainingVerdict": "results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kcert.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
