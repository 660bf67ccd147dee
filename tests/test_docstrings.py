"""The public API (``kcert.__all__``) is documented in one docstring style, and its examples run.

The style is numpydoc's, as scipy.stats uses it: a summary line, ``Parameters`` (or ``Attributes``
for a class whose fields are its interface), ``Returns``, ``Raises`` where useful, and ``Examples``
written as doctests. The examples of the modules below are cheap (tiny shapes, 64 replicates) and
run here; an example that certifies at a realistic size belongs in the docs, not in a docstring.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

import kcert

# modules whose docstring examples run in a few seconds all together
DOCTEST_MODULES = (
    "kcert.assertions",
    "kcert.backward",
    "kcert.case",
    "kcert.results.certificate",
    "kcert.certification",
    "kcert.errors",
    "kcert.model.results",
    "kcert.model.select",
    "kcert.rounding",
    "kcert.settings",
    "kcert.stats.thresholds",
    "kcert.step.batch",
    "kcert.step.config",
    "kcert.step.spec",
    "kcert.verdict",
)

# public names whose docstrings are not in the style yet (none: keep it empty; a new public name comes
# with its docstring)
PENDING: set[str] = set()


def _documented(obj) -> bool:
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__  # not one inherited
    doc = doc or ""
    if isinstance(obj, type) and issubclass(obj, kcert.KcertError):
        # an error takes no parameters of its own: a line or two saying when it is raised, and the
        # base class an example of catching one
        return bool(doc.strip()) and (obj is not kcert.KcertError or "Example" in doc)
    return ("Parameters" in doc or "Attributes" in doc) and "Example" in doc


def _undocumented() -> set[str]:
    return {name for name in kcert.__all__ if not _documented(getattr(kcert, name))}


@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_docstring_examples_run(module, capsys):
    results = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    report = capsys.readouterr().out
    assert results.attempted > 0, f"{module} has no example"
    assert results.failed == 0, report


def test_public_names_documented_in_one_style():
    missing = _undocumented()
    assert not missing - PENDING, f"without Parameters/Attributes and an Example: {sorted(missing - PENDING)}"
    assert not PENDING - missing, f"documented now, remove from PENDING: {sorted(PENDING - missing)}"


def test_pending_names_are_public():
    assert PENDING <= set(kcert.__all__)


def test_public_docstrings_cite_docs_pages_only():
    for name in kcert.__all__:
        doc = getattr(kcert, name).__doc__ or ""
        for page in ("METHOD.md", "DESIGN.md"):
            assert page not in doc, f"kcert.{name} cites {page}; cite docs/method.md or docs/design.md"
