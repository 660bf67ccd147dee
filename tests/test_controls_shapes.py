"""The shape controls (family ``shape``): bugs hidden at the certified shape, found by the shape sweep.
Default suite: the structure and one negative in blocked PyTorch; ``-m controls``: every shape control,
each negative passing all three gates at its given shape and FAILing through the sweep."""

import pytest

import kcert
from kcert.controls.registry import all_controls, not_runnable
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

NEGATIVES = {"online_softmax_rescale_dropped", "matmul_accumulator_overwritten", "softmax_tail_padded_with_zero",
             "triton_online_softmax_rescale_dropped", "triton_matmul_accumulator_overwritten",
             "triton_softmax_tail_padded_with_zero"}
POSITIVES = {"online_softmax_swept", "blocked_matmul_swept", "padded_softmax_swept"}


def _shape_controls():
    return {c.name: c for c in all_controls() if c.family == "shape"}


def test_family_structure():
    controls = _shape_controls()
    missing = {n for n, (f, _) in not_runnable().items() if f == "shape"}
    assert set(controls) | missing == NEGATIVES | POSITIVES
    for name, c in controls.items():
        assert c.kind == ("negative" if name in NEGATIVES else "positive"), name
        case = c.build()
        assert case.shapes is True and case.name == name, name


def _check(control, cert):
    if control.kind == "negative":
        # the given shape hides the bug: the three gates pass it there; the sweep FAILs it
        assert all(v is Verdict.PASS for v in cert.gates.values()), cert.gates
        assert cert.verdict is Verdict.FAIL and cert.shape_sweep.failed
    else:
        assert cert.verdict is Verdict.PASS and not cert.shape_sweep.failed


def test_the_accumulator_control_fails_through_the_sweep_only():
    control = _shape_controls()["matmul_accumulator_overwritten"]
    _check(control, kcert.certify(control.build(), replicates=control.replicates, peer_rules=False))


@pytest.mark.controls
@pytest.mark.parametrize("name", sorted(NEGATIVES | POSITIVES))
def test_shape_control(name):
    control = _shape_controls().get(name)
    if control is None:
        pytest.skip(not_runnable()[name][1])
    _check(control, kcert.certify(control.build(), replicates=control.replicates))
