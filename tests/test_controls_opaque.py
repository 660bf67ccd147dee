"""The opaque controls (family ``opaque``): custom ops, numba, a C++ operator, Triton in its CPU
interpreter and a compiled backward, certified with no prod_math. Default suite: structure and the
two quick numpy controls; ``-m controls``: every opaque control at its declared replicates, with its
measured verdict and algebra level."""

import pytest

import kcert
from kcert.controls import opaque, registry
from kcert.controls.registry import all_controls, not_runnable
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

# Measured (seed 0): verdict and the algebra level reached; recorded in the docstrings and in
# docs/method.md ("The precision ladder").
MEASURED = {
    "custom_op_numpy_eps_on_rms": ("FAIL", "precision ladder (float32 vs bfloat16)"),
    "custom_op_numba_layer_norm_drops_eps": ("FAIL", "precision ladder (float32 vs bfloat16)"),
    "cpp_extension_gelu_tanh_for_erf": ("FAIL", "precision ladder (float32 vs bfloat16)"),
    "cpp_extension_gelu_wrong_constant": ("FAIL", "precision ladder (float32 vs bfloat16)"),
    "triton_rms_norm_eps_on_rms": ("FAIL", "precision ladder (float32 vs float64)"),
    "triton_softmax_approximate_exp": ("FAIL", "precision ladder (float32 vs float64)"),
    "compiled_gradients_eps_on_rms": ("FAIL", "precision ladder (float32 vs bfloat16)"),
    "custom_op_numpy_rms_norm": ("PASS", "precision ladder (float32 vs bfloat16)"),
    "custom_op_bfloat16_only_accepted": ("PASS", "none (accepted)"),
    "custom_op_numba_layer_norm": ("PASS", "precision ladder (float64 vs bfloat16)"),
    "cpp_extension_gelu_erf": ("PASS", "precision ladder (float64 vs bfloat16)"),
    "triton_rms_norm": ("PASS", "precision ladder (float64 vs float32)"),
}


def _opaque():
    return [c for c in all_controls() if c.family == "opaque"]


def test_family_structure():
    controls = {c.name: c for c in _opaque()}
    missing = not_runnable()
    assert set(controls) | {n for n, (f, _) in missing.items() if f == "opaque"} == set(MEASURED)
    for name, c in controls.items():
        assert c.expect == MEASURED[name][0], name
        assert c.kind == ("negative" if MEASURED[name][0] == "FAIL" else "positive"), name
        assert c.source and c.doc.strip(), name
    assert sorted(c.name for c in controls.values() if c.quick) == ["custom_op_numpy_eps_on_rms",
                                                                    "custom_op_numpy_rms_norm"]
    for name in ("custom_op_numpy_rms_norm", "custom_op_bfloat16_only_accepted"):
        case = controls[name].build()
        assert isinstance(case, kcert.Case) and case.name == name and case.prod_math is None


def test_a_missing_toolchain_is_reported_not_registered(monkeypatch):
    monkeypatch.setattr(registry, "_UNAVAILABLE", dict(registry._UNAVAILABLE))

    @opaque._register("positive", "nowhere", "no C++ compiler: 'c++' is not on PATH")
    def not_here() -> kcert.Case:
        """doc"""

    reasons = not_runnable()
    assert reasons["not_here"] == ("opaque", "no C++ compiler: 'c++' is not on PATH")
    assert "not_here" not in {c.name for c in all_controls()}


@pytest.mark.parametrize("name", ["custom_op_numpy_rms_norm", "custom_op_numpy_eps_on_rms"])
def test_quick_opaque_control(name):
    control = next(c for c in _opaque() if c.name == name)
    cert = kcert.certify(control.build(), replicates=256, seed=0)
    verdict, level = MEASURED[name]
    assert cert.verdict.value == verdict, kcert.report.text.failure_message(cert)
    assert cert.algebra.level_text == level


@pytest.mark.controls
def test_all_opaque_controls():
    failures = []
    for control in _opaque():
        cert = kcert.certify(control.build(), replicates=control.replicates, seed=0)
        verdict, level = MEASURED[control.name]
        if cert.verdict.value != verdict or cert.algebra.level_text != level:
            failures.append(f"{control.name}: measured {verdict} at {level}, got {cert.verdict.value} at "
                            f"{cert.algebra.level_text}: {kcert.report.text.failure_message(cert)}")
        if control.kind == "positive":
            # a positive must genuinely differ from ref somewhere (L0 counts bitwise-equal elements)
            if all(b.fraction_equal == 1.0 for b in cert.bitwise):
                failures.append(f"{control.name}: bitwise equal to ref, proves nothing")
        else:
            # the negatives are algebraic: the ladder must be what fails them
            if cert.gates["algebra"] is not Verdict.FAIL:
                failures.append(f"{control.name}: algebra {cert.gates['algebra'].value}, not FAIL")
    assert not failures, "\n".join(failures)
