"""examples/liger_cases.py: Liger-Kernel's Triton kernels against their Hugging Face / torch references,
in Triton's CPU interpreter in float32 (through kcert.adapters.triton.interpreter_compat).

Default suite: the case file loads, and every case's prod (forward, and gradients through Liger's own
backward kernels) computes its reference's function to float32 rounding at one draw. ``-m controls``:
two cases certified at R = 128 with the verdict issue 22 sets as the target (PASS, no prod_math, no
acceptance)."""

from pathlib import Path

import pytest
import torch

from kcert import certify
from kcert.casefile import load_cases
from kcert.execution.ladder import relative_error
from kcert.execution.realmode import run_real
from sample_kernels import as_outputs, draw_float32

pytest.importorskip("triton", reason="the example needs triton (pip install 'kcert[opaque]')")
pytest.importorskip("liger_kernel", reason="the example needs liger-kernel (pip install 'kcert[opaque]')")
pytest.importorskip("transformers", reason="the example's references are transformers modules (kcert[hf])")

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "liger_cases.py"
CASES = ("liger_rms_norm_llama", "liger_rms_norm_llama_grad", "liger_rms_norm_gemma", "liger_swiglu",
         "liger_swiglu_grad", "liger_cross_entropy", "liger_cross_entropy_grad", "liger_fused_linear_cross_entropy_grad")


@pytest.fixture(scope="module")
def cases():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")  # no GPU here: the interpreter, float32
        yield {c.name: c for c in load_cases(EXAMPLE)}


def test_the_example_defines_its_cases_in_float32(cases):
    assert tuple(cases) == CASES
    for case in cases.values():
        assert case.dtype == torch.float32 and case.prod_math is None and not case.accept_untested_algebra
        assert "Triton CPU interpreter in float32" in case.description


@pytest.mark.parametrize("name", CASES)
def test_liger_computes_its_reference_to_float32_rounding(cases, name, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = cases[name]
    kw = draw_float32(case, 1)
    exact = {n: v.double() if v.is_floating_point() else v for n, v in kw.items()}
    oracle = as_outputs(run_real(lambda: case.ref(**exact), dtype=torch.float64, name="ref"))
    before = {n: v.clone() for n, v in kw.items()}
    prod, ref = as_outputs(case.prod(**kw)), as_outputs(case.ref(**kw))
    assert all(torch.equal(before[n], kw[n]) for n in kw), "a launch changed its inputs"
    for j, (o, p, r) in enumerate(zip(oracle, prod, ref)):
        e_prod, e_ref = relative_error(o, p), relative_error(o, r)
        # float32 rounding on both sides (a few ULPs of the output's peak), and of the same size
        assert e_prod < 1e-6 and e_prod < 8 * max(e_ref, 2.0**-24), (name, j, e_prod, e_ref)


@pytest.mark.controls
@pytest.mark.parametrize("name", ["liger_rms_norm_llama", "liger_fused_linear_cross_entropy_grad"])
def test_liger_example_certifies(cases, name, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cert = certify(cases[name], replicates=128, seed=0)
    assert cert.gates["bias"].value == "PASS" and cert.gates["variance"].value == "PASS"
    assert cert.verdict.value == "PASS", (name, cert.gates["algebra"].value, cert.algebra.reason)
