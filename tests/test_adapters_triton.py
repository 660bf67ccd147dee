"""kcert.adapters.triton: the CPU-interpreter guard and Triton prods. Triton itself is not needed:
the launch is mocked by a function that reads the tensors' raw memory, as Triton's launcher does."""

import pytest
import torch

import kcert
from kcert.adapters import triton as kt
from kcert.catalog import norms as N
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def cuda(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.fixture
def nothing(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def fake_triton_rms_norm(x, w, eps=N.LLAMA_EPS):
    """Stands in for a Triton launch: takes raw pointers (what the launcher passes to the kernel)
    and writes into an output it allocates."""
    x.data_ptr(), w.data_ptr()
    y = torch.empty_like(x)
    y.copy_(N.rms_norm(x, w, eps))
    return y


def _case_kwargs(shape=(1, 8, 64)):
    return {"inputs": dict(N.RMSNORM.inputs(shape=shape)), "weights": dict(N.RMSNORM.weights(shape=shape))}


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("0", False), ("", False)])
def test_interpreter_requested(monkeypatch, value, expected):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert kt.interpreter_requested() is expected


def test_modes(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert kt.execution_mode() == "interpreter"  # the interpreter wins even with a GPU, as in triton
    monkeypatch.delenv("TRITON_INTERPRET")
    assert kt.execution_mode() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert kt.execution_mode() == "unavailable"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_interpreter_refuses_low_precision(interpreter, dtype):
    with pytest.raises(kt.TritonPrecisionError, match="float32 only") as info:
        kt.check_precision(dtype, where="my case")
    text = str(info.value)
    assert text.startswith("my case: the case dtype is " + str(dtype).removeprefix("torch."))
    assert "raw 16-bit patterns" in text and "device='cuda'" in text
    assert isinstance(info.value, ValueError) and isinstance(info.value, kcert.KcertError)
    with pytest.raises(kt.TritonPrecisionError):
        kt.triton_case("low", N.rms_norm, fake_triton_rms_norm, dtype=dtype, **_case_kwargs())


def test_interpreter_accepts_float32_and_says_so(interpreter):
    assert kt.check_precision(torch.float32) == "interpreter"
    case = kt.triton_case("f32", N.rms_norm, fake_triton_rms_norm, dtype=torch.float32, **_case_kwargs())
    assert "Triton CPU interpreter in float32" in case.description and "float32 only on CPU" in case.description
    # a low-precision tensor reaching the launch is refused even in a float32 case
    with pytest.raises(kt.TritonPrecisionError, match="argument 'w' is bfloat16"):
        case.prod(x=torch.ones(2, 64), w=torch.ones(64, dtype=torch.bfloat16))


def test_cuda_runs_any_dtype(cuda):
    assert kt.check_precision(torch.bfloat16) == "cuda"
    case = kt.triton_case("bf16", N.rms_norm, fake_triton_rms_norm, dtype=torch.bfloat16, description="gpu run",
                          **_case_kwargs())
    assert case.description == "gpu run"
    x, w = torch.randn(2, 64).bfloat16(), torch.ones(64).bfloat16()
    assert torch.equal(case.prod(x=x, w=w), N.rms_norm(x, w))  # no check in the way on CUDA


def test_no_cuda_no_interpreter_is_refused(nothing):
    with pytest.raises(kt.TritonUnavailable, match="set TRITON_INTERPRET=1"):
        kt.triton_case("none", N.rms_norm, fake_triton_rms_norm, dtype=torch.float32, **_case_kwargs())


def fake_triton_in_input_dtype(x, w, eps=N.LLAMA_EPS):
    """A launch that computes in its input dtype (float64 inputs in float64), as a Triton kernel
    without an explicit upcast does."""
    x.data_ptr(), w.data_ptr()
    y = torch.empty_like(x)
    y.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w)
    return y


def test_float32_capped_triton_prod_gets_a_same_precision_algebra_test_in_a_float32_case(interpreter):
    # fake_triton_rms_norm computes float64 inputs in float32 (rms_norm upcasts with .float()): the
    # ladder's float64 rung computes at float32 too, and float32 is the case's own precision; the
    # same-precision comparison with ref (issue 22) still tests the algebra, with no prod_math and no
    # acceptance
    case = kt.triton_case("same", N.rms_norm, fake_triton_rms_norm, dtype=torch.float32, **_case_kwargs())
    cert = kcert.certify(case, replicates=128, seed=0)
    assert cert.algebra.ladder.accepted == ("float32", "float64")
    assert cert.gates["algebra"] is Verdict.PASS and "same-precision" in cert.algebra.level_text
    assert cert.gates["bias"] is Verdict.PASS  # the oracle comes from ref: bias and variance need nothing more
    assert cert.verdict is Verdict.PASS and not case.accept_untested_algebra
    with_math = kt.triton_case("math", N.rms_norm, fake_triton_rms_norm, dtype=torch.float32, prod_math=N.rms_norm,
                               **_case_kwargs())
    assert kcert.certify(with_math, replicates=64, seed=0).gates["algebra"] is Verdict.PASS


def test_triton_prod_validates():
    with pytest.raises(TypeError, match="fn must be callable"):
        kt.triton_prod(3)
    assert kt.triton_prod(fake_triton_rms_norm).name == "fake_triton_rms_norm"


def test_triton_prod_that_accepts_float64_gets_the_ladder_in_the_interpreter(interpreter):
    case = kt.triton_case("ladder", N.rms_norm, fake_triton_in_input_dtype, dtype=torch.float32, **_case_kwargs())
    cert = kcert.certify(case, replicates=128, seed=0)
    assert cert.gates["algebra"] is Verdict.PASS and cert.algebra.level == "precision ladder"
    assert cert.algebra.level_text == "precision ladder (float64 vs float32)"
    assert cert.verdict is Verdict.PASS


def test_on_cuda_the_ladder_runs_the_launch_at_low_precision_too(cuda):
    # the device is mocked: the launch runs on the CPU, and nothing refuses bfloat16 outside the interpreter
    case = kt.triton_case("gpu", N.rms_norm, fake_triton_rms_norm, dtype=torch.bfloat16, **_case_kwargs())
    cert = kcert.certify(case, replicates=128, seed=0)
    assert cert.algebra.ladder.accepted == ("bfloat16", "float32", "float64")
    assert cert.algebra.level_text == "precision ladder (float32 vs bfloat16)"
    assert cert.verdict is Verdict.PASS


def test_interpreter_refusal_is_recorded_as_a_rung_not_used(interpreter):
    case = kt.triton_case("declared", N.rms_norm, fake_triton_in_input_dtype, dtype=torch.float32,
                          prod_precisions=(torch.bfloat16, torch.float32, torch.float64), **_case_kwargs())
    cert = kcert.certify(case, replicates=64, seed=0)
    rungs = {r.dtype: r for r in cert.algebra.ladder.rungs}
    assert not rungs["bfloat16"].accepted and "TritonPrecisionError" in rungs["bfloat16"].reason
    assert cert.gates["algebra"] is Verdict.PASS
