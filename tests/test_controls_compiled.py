"""The compiled controls (family ``compiled``): torch.compile'd kernels and HF attention implementations,
real prods nobody here wrote. Default suite: structure and the quick controls (each must genuinely
differ from ref); ``-m controls``: the whole family against its target (0 FAIL, at most one WARN among
the positives) and its negatives detected through the compiled kernel."""

import pytest

import kcert
from kcert.controls.registry import all_controls
from kcert.controls.suite import DIFFERS_SHARE, run_controls
from kcert.verdict import Verdict
from quick_controls import passes_or_needs_replicates

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def _family():
    return [c for c in all_controls() if c.family == "compiled"]


def test_family_structure():
    controls = _family()
    positives = [c for c in controls if c.kind == "positive"]
    negatives = [c for c in controls if c.kind == "negative"]
    assert len(positives) >= 12 and len(negatives) >= 2
    sdpa = [c for c in positives if "eager_vs_sdpa" in c.name]
    assert len(sdpa) >= 3, "eager-vs-sdpa attention for at least three HF architectures"
    assert any(c.name.endswith("_gradients") for c in positives), "compiled backward"
    for c in controls:
        assert c.doc and c.source and isinstance(c.build(), kcert.Case), c.name
        assert c.half in ("tuning", "validation")
    for c in negatives:
        assert "emulate_precision_casts" in c.source


@pytest.mark.parametrize("control", [c for c in _family() if c.quick], ids=lambda c: c.name)
def test_quick_control_passes_and_differs_from_ref(control):
    result = run_controls([control], quick=True)[0]
    assert result.error is None, result.error
    assert passes_or_needs_replicates(result.certificate), result.certificate.gates
    assert result.differing_share >= DIFFERS_SHARE  # null evidence that could have failed


@pytest.mark.controls
def test_whole_family_meets_its_target():
    results = run_controls(_family())
    positives = [r for r in results if r.control.kind == "positive"]
    negatives = [r for r in results if r.control.kind == "negative"]
    assert not [r.error for r in results if r.error]
    assert sum(r.verdict is Verdict.FAIL for r in positives) == 0
    assert sum(r.verdict is Verdict.WARN for r in positives) <= 1
    assert all(r.detected for r in negatives)
    assert all(r.evidence == "differs" for r in positives), [(r.control.name, r.differing_share) for r in positives]
