"""Short training runs that test a certificate: does a kernel pair move training?

``kcert.training.compare(case)`` trains a small decoder on a synthetic language twice per seed,
once with ref's kernel in the case's slot and once with prod's, and compares the runs paired by
seed (docs/training.md). Names are imported lazily; the result types live torch-free in
:mod:`kcert.results.training`, the paired statistics in :mod:`kcert.stats.training`, the renderers in
:mod:`kcert.report.training`.
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
    "TrainingComparison": "..results.training",
    "TrainingVerdict": "..results.training",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kcert.training' has no attribute {name!r}")
    relative = module if module.startswith(".") else f".{module}"
    value = getattr(importlib.import_module(relative, __name__), name)
    globals()[name] = value
    return value
