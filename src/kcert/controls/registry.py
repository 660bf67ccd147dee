"""Registering controls and finding them."""

from __future__ import annotations

import hashlib
import importlib
import inspect
from dataclasses import dataclass
from typing import Callable

from ..case import Case
from ..settings import DEFAULTS

FAMILIES = ("norm", "rope", "attention", "moe", "activation", "gemm", "loss", "backward", "framework", "compiled",
            "float32", "opaque", "shape", "step")
# Modules that define controls; importing them fills the registry.
# A module that is absent (or needs an optional extra that is not installed) is skipped.
MODULES = ("norms", "rope", "attention", "moe", "activations", "backward", "framework", "compiled", "float32",
           "opaque", "opaque_float32", "shapes", "step")


@dataclass(frozen=True)
class Control:
    name: str
    family: str
    kind: str  # "negative" (a real defect: must be detected) or "positive" (known good: must not FAIL)
    source: str  # the public report or the real kernel it reproduces
    build: Callable[[], Case]  # a kcert.Step for the family "step" (certified with kcert.certify_step)
    doc: str
    replicates: int = DEFAULTS["replicates"]
    expect: str | None = None  # a verdict the control must get exactly (e.g. "FAIL"), beyond the bar
    quick: bool = False  # part of the quick subset run by the default test suite

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else self.name

    @property
    def half(self) -> str:
        """"tuning" or "validation", fixed by the name alone (the first byte of its SHA-256 even or odd):
        thresholds are chosen on the tuning half and on simulation, and reported on both halves
        (docs/controls.md, "Tuning discipline")."""
        return "tuning" if hashlib.sha256(self.name.encode()).digest()[0] % 2 == 0 else "validation"


_REGISTRY: dict[str, Control] = {}


def _register(kind: str, family: str, source: str, replicates: int, expect: str | None, quick: bool):
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")

    def wrap(fn: Callable[[], Case]) -> Callable[[], Case]:
        name = fn.__name__
        if name in _REGISTRY:
            raise ValueError(f"control {name!r} is registered twice")
        doc = inspect.getdoc(fn) or ""
        if not doc:
            raise ValueError(f"control {name!r} needs a docstring naming its source and its mechanism")
        _REGISTRY[name] = Control(name, family, kind, source, fn, doc, replicates, expect, quick)
        return fn

    return wrap


def negative(family: str, source: str, *, replicates: int = DEFAULTS["replicates"], expect: str | None = None, quick: bool = False):
    """Register a negative control: a reproduction of a public defect report."""
    return _register("negative", family, source, replicates, expect, quick)


def positive(family: str, source: str, *, replicates: int = DEFAULTS["replicates"], expect: str | None = None, quick: bool = False):
    """Register a positive control: a real kernel, a stressed probe or a benign rewrite."""
    return _register("positive", family, source, replicates, expect, quick)


_UNAVAILABLE: dict[str, tuple[str, str]] = {}  # control name -> (family, why it cannot run here)


def unavailable(name: str, family: str, reason: str) -> None:
    """Record a control that cannot run on this machine (a missing compiler, an optional package):
    it is not registered, and :func:`not_runnable` says why."""
    _UNAVAILABLE[name] = (family, reason)


def not_runnable() -> dict[str, tuple[str, str]]:
    """Controls left out on this machine: name -> (family, reason). Imports the control modules."""
    all_controls()
    return dict(_UNAVAILABLE)


def all_controls() -> list[Control]:
    """Every control, negatives first, in family order then definition order."""
    for module in MODULES:
        try:
            importlib.import_module(f"{__package__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{module}":
                raise
    order = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(_REGISTRY.values(), key=lambda c: (c.kind != "negative", order[c.family]))
