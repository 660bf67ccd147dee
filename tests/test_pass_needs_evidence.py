"""A PASS needs evidence: too few replicates, or an output dtype that changed without being declared,
never give a PASS (docs/verdicts.md)."""

import dataclasses

import pytest

import kcert
from kcert.gates.minimum import bias_minimum
from kcert.stats import power

from sample_kernels import rmsnorm_builtin, rmsnorm_ref


def occasional_gain(x, w):
    """A defect in about one replicate in ten: a 2% gain when the first element is large."""
    y = rmsnorm_ref(x, w)
    return (y.float() * 1.02).to(x.dtype) if float(x[0, 0]) > 1.28 else y


def case(prod=occasional_gain, **kw):
    return kcert.Case(name="rms", ref=rmsnorm_ref, prod=prod, inputs={"x": kcert.Gaussian((4, 64), shift=0.1)},
                      weights={"w": kcert.Gaussian((64,), shift=1.0, std=0.1)}, **kw)


def test_the_bias_minimum_is_the_power_to_see_a_bias_as_large_as_the_noise():
    # 35 by the normal form (z* + z_0.8)^2; the critical value at that R is 6.1, not 5 (Student t)
    assert bias_minimum(5.0, 0.8) == 47
    assert power.min_detectable_effect(47, 5.0, 0.8) <= 1.0 < power.min_detectable_effect(46, 5.0, 0.8)


def test_two_replicates_cannot_pass_the_bias_gate_of_an_occasional_defect():
    low = kcert.certify(case(), replicates=2, max_replicates=2, seed=0, algebra_proof=False)
    assert low.bias[0].verdict is kcert.Verdict.WARN  # before: PASS, exit 0
    codes = [d.code for d in low.bias[0].diagnostics]
    assert "too_few_replicates" in codes
    message = next(d.message for d in low.bias[0].diagnostics if d.code == "too_few_replicates")
    assert "R = 2 is below the 47 replicates behind a PASS" in message
    assert low.verdict is not kcert.Verdict.PASS
    high = kcert.certify(case(), replicates=1024, max_replicates=1024, seed=0, algebra_proof=False)
    assert high.bias[0].verdict is kcert.Verdict.FAIL


def test_enough_replicates_pass_and_a_fail_stays_a_fail_below_the_minimum():
    good = kcert.certify(case(rmsnorm_builtin), replicates=47, max_replicates=47, seed=0, algebra_proof=False)
    assert good.bias[0].verdict is kcert.Verdict.PASS
    assert "too_few_replicates" not in [d.code for d in good.bias[0].diagnostics]
    short = kcert.certify(case(rmsnorm_builtin), replicates=46, max_replicates=46, seed=0, algebra_proof=False)
    assert short.bias[0].verdict is kcert.Verdict.WARN

    def gain(x, w):
        return (rmsnorm_ref(x, w).float() * 1.02).to(x.dtype)

    # R = 16: a 2 % gain reaches |z| = 18 against the critical 8.3 (at R = 8, 15.8 against 17.1: WARN)
    bad = kcert.certify(case(gain), replicates=16, max_replicates=16, seed=0, algebra_proof=False)
    assert bad.bias[0].verdict is kcert.Verdict.FAIL


def float32_out(x, w):
    return rmsnorm_builtin(x, w).float()


def test_a_changed_output_dtype_warns_unless_declared():
    changed = kcert.certify(case(float32_out), replicates=64, seed=0, algebra_proof=False)
    assert changed.outputs[0].prod_dtype == "float32" and changed.outputs[0].dtype == "bfloat16"
    assert changed.bias[0].verdict is kcert.Verdict.WARN  # before: PASS, exit 0
    assert "output_dtype_differs" in [d.code for d in changed.bias[0].diagnostics]
    declared = kcert.certify(case(float32_out, dtypes_may_differ=True), replicates=64, seed=0, algebra_proof=False)
    assert declared.bias[0].verdict is kcert.Verdict.PASS
    message = next(d.message for d in declared.bias[0].diagnostics if d.code == "output_dtype_differs")
    assert "declared" in message
    # the same dtype needs no declaration
    same = kcert.certify(case(rmsnorm_builtin), replicates=64, seed=0, algebra_proof=False)
    assert "output_dtype_differs" not in [d.code for d in same.bias[0].diagnostics]


def test_dtypes_may_differ_is_checked():
    with pytest.raises(kcert.CaseError, match="dtypes_may_differ must be True or False"):
        dataclasses.replace(case(), dtypes_may_differ="yes")
