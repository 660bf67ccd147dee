"""kcert.adapters.triton_interpreter: each patch of triton 3.6's CPU interpreter, shown failing as
shipped and working inside ``interpreter_compat()``, on small kernels written like third-party ones.

The kernels are plain functions here, jitted in each test: with ``TRITON_INTERPRET=1`` set they are
what triton builds when a module is imported in interpreter mode (``InterpretedFunction``), and
without it compiled ``JITFunction``s (the ``jit_before_interpret`` case)."""

import importlib.metadata
import sys
import warnings

import numpy as np
import pytest
import torch

from kcert.adapters import triton as kt
from kcert.adapters import triton_interpreter as ti

triton = pytest.importorskip("triton", reason="the interpreter patches need triton (pip install 'kcert[opaque]')")
tl = pytest.importorskip("triton.language")
from triton.language.extra import libdevice  # noqa: E402
from triton.language.extra.libdevice import rsqrt  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("one_thread"),  # see conftest.py
    pytest.mark.skipif(not triton.__version__.startswith(ti.TESTED_TRITON + "."),
                       reason=f"the patches are written for triton {ti.TESTED_TRITON}"),
]
STUB_RSQRT = rsqrt
NUMPY_2_4 = tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 4)


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _interpreted(fn):
    assert ti.interpreter_requested()
    jitted = triton.jit(fn)
    assert type(jitted).__name__ == "InterpretedFunction"
    return jitted


# --- kernels (plain functions, jitted per test) ---------------------------------------------------------


def scale_by_float(x_ptr, y_ptr, eps, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    eps = eps.to(tl.float32)  # Liger's kernels pin scalar arguments this way
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * eps)


def row_sums_strided(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    # a persistent-style loop over rows with tensor bounds (tl.program_id, a runtime int)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
        tl.store(y_ptr + row, tl.reduce(x, 0, _add))


def row_offsets_int64(y_ptr, ROWS: tl.constexpr):
    for row in range(0, ROWS):
        row64 = row.to(tl.int64)  # a loop variable cast for 64-bit addressing
        tl.store(y_ptr + row64, row64 * 3)


def norm_with_libdevice(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    r = rsqrt(tl.reduce(x * x, 0, _add) / BLOCK + 1e-6)
    tl.store(y_ptr + offs, libdevice.tanh(x * r))


def first_config_block(y_ptr, n, BLOCK: tl.constexpr):
    tl.store(y_ptr + tl.program_id(0), BLOCK)


def calls_a_helper(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _helper(tl.load(x_ptr + offs)))


def helper(x):
    return x * 2.0 + 1.0


def add(a, b):
    return a + b


_add = None  # jitted in _jit_combine (interpreted or compiled, as each test needs)
_helper = None


@pytest.fixture(autouse=True)
def _jit_combine(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(sys.modules[__name__], "_add", triton.jit(add))
    monkeypatch.setattr(sys.modules[__name__], "_helper", triton.jit(helper))


# --- the patches, one by one ------------------------------------------------------------------------------


def test_float_arguments_arrive_as_float32_scalars(interpret):
    kernel = _interpreted(scale_by_float)
    x = torch.randn(16)
    y = torch.empty_like(x)
    with pytest.raises(interpreter.InterpreterError, match="'float' object has no attribute 'to'"):
        kernel[(1,)](x, y, 1e-3, BLOCK=16)
    with ti.interpreter_compat():
        kernel[(1,)](x, y, 1e-3, BLOCK=16)
    # the GPU sees the float32 value of the argument
    assert torch.equal(y, x * torch.tensor(1e-3, dtype=torch.float32))


def test_tensor_loop_bounds(interpret):
    kernel = _interpreted(row_sums_strided)
    x = torch.randn(6, 16)
    y = torch.empty(6)
    if NUMPY_2_4:
        with pytest.raises(interpreter.InterpreterError, match="only 0-dimensional arrays"):
            kernel[(2,)](x, y, 6, 16, BLOCK=16)
    with ti.interpreter_compat():
        kernel[(2,)](x, y, 6, 16, BLOCK=16)
    torch.testing.assert_close(y, x.sum(-1))


def test_loop_variables_are_tensors(interpret):
    kernel = _interpreted(row_offsets_int64)
    y = torch.zeros(5, dtype=torch.int64)
    with pytest.raises(interpreter.InterpreterError, match="'int' object has no attribute 'to'"):
        kernel[(1,)](y, ROWS=5)
    with ti.interpreter_compat():
        kernel[(1,)](y, ROWS=5)
    assert y.tolist() == [0, 3, 6, 9, 12]


def test_loop_variable_type_follows_the_bounds():
    t = ti._Triton()
    assert [int(v.handle.data[0]) for v in t.loop_range(1, 7, 2)] == [1, 3, 5]
    assert {v.dtype for v in t.loop_range(3)} == {tl.int32}
    wide = tl.tensor(interpreter.TensorHandle(np.array([4], dtype=np.int64), tl.int64), tl.int64)
    assert {v.dtype for v in t.loop_range(0, wide)} == {tl.int64}


def test_libdevice_functions(interpret):
    kernel = _interpreted(norm_with_libdevice)
    x = torch.randn(32)
    y = torch.empty_like(x)
    with pytest.raises(interpreter.InterpreterError, match="NoneType"):
        kernel[(1,)](x, y, BLOCK=32)
    with ti.interpreter_compat():
        kernel[(1,)](x, y, BLOCK=32)
    expected = torch.tanh(x * torch.rsqrt(x.pow(2).mean() + 1e-6))
    torch.testing.assert_close(y, expected, rtol=4e-7, atol=4e-7)


def test_libdevice_symbols():
    assert ti.libdevice_function("__nv_rsqrtf")(np.float32([4.0])) == np.float32(0.5)
    assert ti.libdevice_function("__nv_erff") is ti.LIBDEVICE["erf"]  # "erff": the float32 suffix
    assert ti.libdevice_function("__nv_fast_expf") is np.exp
    assert ti.libdevice_function("__nv_fdiv_rn") is np.divide
    assert ti.libdevice_function("__nv_isnand") is np.isnan
    with pytest.raises(NotImplementedError, match="directed rounding"):
        ti.libdevice_function("__nv_fdiv_rz")
    with pytest.raises(NotImplementedError, match="__nv_j0f has no numpy implementation"):
        ti.libdevice_function("__nv_j0f")


def test_autotune_runs_the_first_config(interpret):
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
                             key=["n"])(_interpreted(first_config_block))
    y = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="0 active drivers"):
        kernel[(2,)](y, 7)
    with ti.interpreter_compat():
        kernel[(2,)](y, 7)
    assert y.tolist() == [32, 32]


def test_functions_jitted_before_the_interpreter_was_requested(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    kernel = triton.jit(calls_a_helper)
    monkeypatch.setattr(sys.modules[__name__], "_helper", triton.jit(helper))
    assert type(kernel).__name__ == "JITFunction"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(8)
    y = torch.empty_like(x)
    with pytest.raises(RuntimeError, match="active drivers"):  # a compiled launch needs a GPU driver
        kernel[(1,)](x, y, BLOCK=8)
    with ti.interpreter_compat():
        kernel[(1,)](x, y, BLOCK=8)
    torch.testing.assert_close(y, x * 2 + 1)
    # an interpreted kernel calling a compiled helper
    monkeypatch.setattr(sys.modules[__name__], "_helper", triton.jit(helper))  # interpreted now
    interpreted = triton.jit(calls_a_helper)
    monkeypatch.delenv("TRITON_INTERPRET")
    compiled_helper = triton.jit(helper)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(sys.modules[__name__], "_helper", compiled_helper)
    with pytest.raises(interpreter.InterpreterError, match="Cannot call @triton.jit'd outside of the scope"):
        interpreted[(1,)](x, y, BLOCK=8)
    with ti.interpreter_compat():
        interpreted[(1,)](x, y, BLOCK=8)
    torch.testing.assert_close(y, x * 2 + 1)


# --- scope ------------------------------------------------------------------------------------------------


def test_every_patch_is_undone(interpret):
    before = (interpreter._patch_lang, interpreter._implicit_cvt, libdevice.tanh, rsqrt,
              triton.runtime.jit.JITFunction.run, triton.runtime.autotuner.Autotuner.__dict__["do_bench"])
    kernel = _interpreted(norm_with_libdevice)
    x = torch.randn(32)
    with ti.interpreter_compat():
        with ti.interpreter_compat():  # re-entrant
            kernel[(1,)](x, torch.empty_like(x), BLOCK=32)
        assert interpreter._implicit_cvt is not before[1]  # still patched in the outer block
    after = (interpreter._patch_lang, interpreter._implicit_cvt, libdevice.tanh, rsqrt,
             triton.runtime.jit.JITFunction.run, triton.runtime.autotuner.Autotuner.__dict__["do_bench"])
    assert all(a is b for a, b in zip(before, after))
    # the kernel module's globals (patched during each launch) are restored
    assert "range" not in globals() and globals()["rsqrt"] is STUB_RSQRT


def test_outside_the_interpreter_nothing_is_patched(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    original = interpreter._implicit_cvt
    with ti.interpreter_compat():
        assert interpreter._implicit_cvt is original


def test_another_triton_version_warns_and_patches_nothing(interpret, monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.9.0")
    monkeypatch.setattr(ti, "_WARNED", set())
    original = interpreter._implicit_cvt
    with pytest.warns(ti.InterpreterCompatWarning, match="this is triton 3.9.0, which runs unpatched"):
        with ti.interpreter_compat():
            assert interpreter._implicit_cvt is original
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason
        with ti.interpreter_compat():
            pass


def test_triton_prod_runs_inside_the_patches(interpret):
    kernel = _interpreted(scale_by_float)

    def launch(x):
        y = torch.empty_like(x)
        kernel[(1,)](x, y, 0.5, BLOCK=x.numel())
        return y

    x = torch.randn(16)
    assert torch.equal(kt.triton_prod(launch)(x=x), x * 0.5)
    with pytest.raises(interpreter.InterpreterError):
        kt.triton_prod(launch, compat=False)(x=x)
    assert kt.INTERPRETER_PATCHES is ti.PATCHES and set(ti.PATCHES) == {
        "loop_bounds", "loop_variable", "float_arguments", "libdevice", "autotune", "jit_before_interpret"}


def test_counting_launches_names_the_kernels_a_call_launches(interpret, monkeypatch):
    kernel = _interpreted(scale_by_float)
    x = torch.randn(16)
    y = torch.empty_like(x)
    with ti.interpreter_compat(), ti.counting_launches() as launched:
        kernel[(1,)](x, y, 1e-3, BLOCK=16)
        kernel[(1,)](x, y, 1e-3, BLOCK=16)
        torch.nn.functional.rms_norm(x, (16,))  # torch's own kernels are not Triton launches
    assert launched == ["scale_by_float", "scale_by_float"]
    with ti.interpreter_compat():  # the counter is undone on exit
        kernel[(1,)](x, y, 1e-3, BLOCK=16)
    assert len(launched) == 2
    monkeypatch.delenv("TRITON_INTERPRET")
    with ti.counting_launches() as outside:  # outside the interpreter nothing is counted (nor patched)
        pass
    assert outside == []
