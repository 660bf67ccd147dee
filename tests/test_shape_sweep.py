"""The shape sweep (Case.shapes, kcert.checks.shapes and .sweep): derived shapes, validation, verdicts."""

import pytest
import torch

import kcert
from kcert.checks.shapes import derived, non_power_of_two, variants
from kcert.controls.shapes import blocked_matmul, padded_softmax
from kcert.verdict import Verdict


def softmax(x):
    return torch.softmax(x, -1)


def _case(prod, shapes=True, **kw):
    return kcert.Case(name="sm", ref=softmax, prod=prod, inputs={"x": kcert.Gaussian((8, 128), shift=0.1)},
                      dtype=torch.float32, shapes=shapes, **kw)


def test_non_power_of_two():
    assert [non_power_of_two(n) for n in (3, 4, 8, 64, 128, 256, 1000)] == [3, 3, 5, 47, 95, 191, 749]


def test_derived_shapes_keep_shared_sizes_in_step():
    case = kcert.Case(name="mm", ref=torch.matmul, prod=torch.matmul, inputs={"input": kcert.Gaussian((16, 64))},
                      weights={"other": kcert.Gaussian((64, 32))}, dtype=torch.float32)
    found = dict(derived(case))
    assert found["non-power-of-two sizes (16 -> 11, 32 -> 23, 64 -> 47)"] == {"input": (11, 47), "other": (47, 23)}
    assert found["size-1 leading axis (16 -> 1)"] == {"input": (1, 64)}
    assert found["row length 257, past block 256 (64 -> 257)"] == {"input": (16, 257), "other": (257, 32)}
    assert len(found) == 5


def test_sizes_of_fixed_probes_are_not_changed():
    case = kcert.Case(name="fx", ref=softmax, prod=softmax, inputs={"x": kcert.Gaussian((4, 8))},
                      weights={"w": kcert.Fixed(torch.ones(8))}, dtype=torch.float32)
    # 8 is also the Fixed probe's size: only the variant that leaves it alone remains
    assert derived(case) == [("size-1 leading axis (4 -> 1)", {"x": (1, 8)})]


def test_case_shapes_are_validated():
    with pytest.raises(kcert.CaseError, match=r"shapes\[0\] names 'y'"):
        _case(softmax, shapes=[{"y": (2, 3)}])
    with pytest.raises(kcert.CaseError, match="Custom probe, which cannot be drawn at another shape"):
        kcert.Case(name="c", ref=softmax, prod=softmax, dtype=torch.float32,
                   inputs={"x": kcert.Custom(lambda g, d: torch.randn(2, 3, generator=g))}, shapes=[{"x": (3, 3)}])
    explicit = _case(softmax, shapes=[{"x": (3, 100)}])
    assert [(v.label, v.shapes) for v in variants(explicit)] == [("x (3, 100)", (("x", (3, 100)),))]


def test_the_sweep_fails_a_bug_the_given_shape_hides():
    cert = kcert.certify(_case(lambda x: padded_softmax(x, pad_zero=True)), replicates=128, peer_rules=False,
                         algebra_proof=False)
    assert all(v is Verdict.PASS for v in cert.gates.values())  # at rows of 128 the padding is empty
    assert cert.verdict is Verdict.FAIL
    failed = {s.label.split(" (")[0] for s in cert.shape_sweep.failed}
    assert failed == {"non-power-of-two sizes", "row length 65, past block 64", "row length 129, past block 128",
                      "row length 257, past block 256"}
    assert [d.code for d in cert.shape_sweep.diagnostics()] == ["shape_sweep_fail"]
    assert kcert.certify(_case(lambda x: padded_softmax(x, pad_zero=True)), replicates=128, peer_rules=False,
                         algebra_proof=False, shapes=False).verdict is Verdict.PASS


def test_a_correct_kernel_passes_every_shape():
    cert = kcert.certify(_case(padded_softmax), replicates=128, peer_rules=False, algebra_proof=False)
    assert cert.verdict is Verdict.PASS and not cert.shape_sweep.failed
    assert all(s.status == "run" for s in cert.shape_sweep.shapes)


def test_shapes_a_kernel_refuses_are_unsupported_not_failed():
    def only_128(x):
        if x.shape[-1] != 128:
            raise ValueError("this kernel is built for rows of 128")
        return softmax(x)

    cert = kcert.certify(_case(only_128), replicates=128, peer_rules=False, algebra_proof=False)
    assert cert.verdict is Verdict.PASS
    statuses = {s.label.split(" (")[0]: s.status for s in cert.shape_sweep.shapes}
    assert statuses["row length 65, past block 64"] == "unsupported"
    assert statuses["size-1 leading axis"] == "run"


def test_certify_shapes_true_derives_a_sweep_for_a_case_without_one():
    case = kcert.Case(name="mm", ref=torch.matmul, prod=lambda input, other: blocked_matmul(input, other, True),
                      inputs={"input": kcert.Gaussian((16, 64))}, weights={"other": kcert.Gaussian((64, 32))},
                      dtype=torch.float32)
    assert kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False).shape_sweep is None
    cert = kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False, shapes=True)
    assert cert.verdict is Verdict.FAIL and cert.shape_sweep.failed
