"""The accelerator's reduction (kcert.execution.fused_triton), run on the CPU by Triton's interpreter,
against the CPU kernel (kcert.execution.fused): the same sums, counts, extremes and ULP counts, bit
for bit, on every format, layout, label kind and lane count; the same fall-back on non-finite values.

The interpreter runs the kernel as Python over numpy arrays (seconds for a few thousand elements),
so the shapes are small; lanes are made by lowering the elements a lane needs."""

import importlib

import numpy as np
import pytest
import torch

import kcert
from kcert.execution import fused
from kcert.execution.outputs import bucket_labels, make_layout
from kcert.stats import bitwise as S

triton = pytest.importorskip("triton", reason="the accelerator's reduction is a Triton kernel")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),  # see conftest.py
    pytest.mark.skipif(not fused.available(), reason="numba is not installed (pip install 'kcert[fast]')"),
]


@pytest.fixture
def interpreted():
    """fused_triton with its kernels built for Triton's interpreter (``TRITON_INTERPRET=1`` is read
    when a kernel is decorated, so the module is reloaded with it set, and again without it after);
    ``interpreter_compat`` runs triton's own ``tl.max`` and ``tl.sum``, decorated when triton was first
    imported, in the interpreter too."""
    from kcert.adapters.triton_interpreter import interpreter_compat
    from kcert.execution import fused_triton

    mp = pytest.MonkeyPatch()
    mp.setenv("TRITON_INTERPRET", "1")
    try:
        with interpreter_compat():
            yield importlib.reload(fused_triton)
    finally:
        mp.undo()
        importlib.reload(fused_triton)


@pytest.fixture
def jit_built():
    """fused_triton with its kernels decorated for compilation, whatever an earlier test left in
    ``TRITON_INTERPRET`` (the control suite's Triton families set it for the whole process)."""
    from kcert.execution import fused_triton

    mp = pytest.MonkeyPatch()
    mp.delenv("TRITON_INTERPRET", raising=False)
    try:
        yield importlib.reload(fused_triton)
    finally:
        mp.undo()
        importlib.reload(fused_triton)


def _outputs(shape, ref_dtype=torch.bfloat16, prod_dtype=None, seed=3):
    g = torch.Generator().manual_seed(seed)
    exact = torch.randn(shape, generator=g, dtype=torch.float64) + 0.1
    r = exact.to(ref_dtype)
    p = (exact * (1 + 1e-2 * torch.randn(shape, generator=g, dtype=torch.float64))).to(prod_dtype or ref_dtype)
    r.view(-1)[::7] = 0  # sign(0): the sign-aligned rows add zeros there
    return r, p, exact


def _both(r, p, o, spec, **kw):
    """(CPU kernel's result, Triton kernel's result) of one output."""
    layout = make_layout(0, "out", r, p, spec, "test")
    labels = bucket_labels(spec, {}, {}, r, "test") if isinstance(spec, kcert.Labels) else None
    count = spec.count if isinstance(spec, kcert.Labels) else None
    args = (r, p, o, layout.bucket_axes, labels, count, layout.bitwise_comparable)
    return fused.FusedReducer().reduce(*args), fused.FusedReducer().reduce(*args, backend="triton")


def _assert_identical(cpu, gpu):
    assert cpu is not fused.NOT_APPLICABLE and cpu is not fused.NONFINITE
    sums, counts, peaks, histogram = gpu
    np.testing.assert_array_equal(sums, cpu[0])  # bit for bit: assert_array_equal has no tolerance
    np.testing.assert_array_equal(counts, cpu[1])
    assert peaks == cpu[2]
    np.testing.assert_array_equal(histogram, cpu[3])


@pytest.mark.parametrize("ref_dtype, prod_dtype", [
    (torch.bfloat16, None), (torch.float16, None), (torch.float32, None), (torch.float64, None),
    (torch.bfloat16, torch.float32),  # different formats: no L0, both decoded
    (torch.float16, torch.bfloat16),
])
@pytest.mark.parametrize("oracle", [True, False])
def test_every_format_gives_the_cpu_kernels_bits(interpreted, ref_dtype, prod_dtype, oracle):
    r, p, o = _outputs((6, 300), ref_dtype, prod_dtype)  # two segments per row (256 + 44): blocks straddled
    _assert_identical(*_both(r, p, o if oracle else None, kcert.Axes(-1)))


@pytest.mark.parametrize("shape, spec", [
    ((3, 1100), kcert.Axes(-1)),  # segments of 1024 + 76 positions: windows alternate
    ((5, 700), kcert.Axes(0)),  # summed innermost group: folded over the segment width afterwards
    ((2, 3, 5, 40), kcert.Axes(0, 2)),  # bucket axes apart
    ((4, 50), kcert.Axes()),  # one bucket
    # labels broadcast along heads, counting up along the last axis: accumulated in label space (runs)
    ((2, 3, 6, 64), kcert.Labels(lambda i, w, r: (torch.arange(6)[:, None] // 2) * 64 + torch.arange(64),
                                 count=3 * 64)),
    # per-element labels with excluded ones: accumulated by position, then scattered
    ((40, 64), kcert.Labels(lambda i, w, r: (torch.arange(40 * 64) % 11 - 1).reshape(40, 64), count=12)),
])
def test_every_layout_gives_the_cpu_kernels_bits(interpreted, shape, spec):
    r, p, o = _outputs(shape)
    _assert_identical(*_both(r, p, o, spec))


def test_lanes_are_added_in_order_as_on_the_cpu(interpreted, monkeypatch):
    """Lanes need 2^20 elements each, too many for the interpreter: lowered to 4096, the (8, 3000)
    output runs in 5 lanes on both kernels, whose lane sums must agree bit for bit."""
    monkeypatch.setattr(fused, "LANE_MIN_ELEMENTS", 4096)
    r, p, o = _outputs((8, 3000))
    plan = fused.FusedReducer().plan(r, True, (1,), None, None)
    assert plan.lanes == 5 and len(plan.segments) == 24
    _assert_identical(*_both(r, p, o, kcert.Axes(-1)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_ulp_bins_at_every_distance(interpreted, dtype):
    """Distances 0 .. far beyond 2^16, both signs, +-0, and (float64) a key difference that overflows
    int64: every bin, against the numpy reference, and the sums against the CPU kernel's."""
    g = torch.Generator().manual_seed(5)
    r = torch.randn(1024, generator=g, dtype=torch.float64).to(dtype)
    steps = torch.tensor([0, 1, 2, 3, 4, 5, 8, 9, 100, 2**15, 2**16, 2**16 + 1, 2**20], dtype=torch.int64)
    width = r.element_size() * 8
    ints = {16: torch.int16, 32: torch.int32, 64: torch.int64}[width]
    moved = r.view(ints).to(torch.int64) + steps[torch.arange(1024) % len(steps)]
    moved = torch.clamp(moved, -(2 ** (width - 1)), 2 ** (width - 1) - 1)
    p = moved.to(ints).view(dtype)
    p = torch.where(torch.isfinite(p), p, r)  # stepping may reach inf/nan patterns: keep those finite
    r[0], p[0] = 0.0, -0.0
    if dtype == torch.float64:
        r[1], p[1] = 1e300, -1e300
    cpu, gpu = _both(r, p, r.double(), kcert.Axes())
    _assert_identical(cpu, gpu)
    np.testing.assert_array_equal(gpu[3], S.ulp_histogram(r.view(ints).numpy(), p.view(ints).numpy()))
    assert gpu[3][3:S.SATURATED_BIN + 1].sum() > 0


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize("where", ["ref", "prod", "oracle"])
def test_non_finite_values_fall_back_as_on_the_cpu(interpreted, bad, where):
    r, p, o = _outputs((4, 64))
    {"ref": r, "prod": p, "oracle": o}[where][2, 5] = bad
    cpu, gpu = _both(r, p, o, kcert.Axes(-1))
    assert cpu is fused.NONFINITE and gpu is fused.NONFINITE


def test_a_cuda_run_names_the_triton_kernel():
    """The certificate's provenance names the kernel that would run on each device."""
    assert fused.kernel_for(torch.device("cpu")) == "compiled (numba)"
    assert fused.kernel_for(torch.device("cuda")) == "compiled (triton)"
    assert fused.kernel_for(torch.device("meta")) == "torch"


def test_the_scatter_without_numba_adds_in_position_order(monkeypatch):
    """A CUDA machine without numba finishes the Triton kernel's sums with np.add.at: the same
    additions, in the same order, as the numba scatter's."""
    r, _, _ = _outputs((40, 64))
    labels = bucket_labels(kcert.Labels(lambda i, w, x: (torch.arange(40 * 64) % 11 - 1).reshape(40, 64), count=12),
                           {}, {}, r, "test")
    plan = fused.FusedReducer().plan(r, True, (), labels, 12)
    assert not plan.by_runs and plan.labels is not None
    total = np.random.default_rng(0).standard_normal((plan.rows, plan.acc_size)) * np.logspace(0, 12, plan.acc_size)
    peak, histogram = np.zeros(3), np.zeros(S.N_BINS, np.int64)
    with_numba = fused.finish(plan, total, peak, histogram, True)
    monkeypatch.setattr(fused, "numba", None)
    without = fused.finish(plan, total, peak, histogram, True)
    np.testing.assert_array_equal(without[0], with_numba[0])
    np.testing.assert_array_equal(without[1], with_numba[1])


@pytest.mark.parametrize("ref_dtype, has_oracle", [(torch.bfloat16, True), (torch.float16, False),
                                                   (torch.float64, True)])
def test_the_kernel_compiles_for_a_gpu_without_fused_multiply_adds(ref_dtype, has_oracle, jit_built):
    """No GPU is needed to compile: triton builds the kernel for an sm_90 (H100/H200) target with its
    own ptxas. The PTX must hold no fused multiply-add (a contraction rounds once where the CPU
    kernel rounds twice) and no flush-to-zero (a subnormal bf16 or float16 read as 0)."""
    fused_triton = jit_built

    compiler = pytest.importorskip("triton.compiler")
    target = pytest.importorskip("triton.backends.compiler").GPUTarget("cuda", 90, 32)
    e, m, w = fused_triton._FORMATS[ref_dtype]
    ints = {16: "*i16", 32: "*i32", 64: "*i64"}[w]
    constants = dict(RE=e, RM=m, RW=w, PE=e, PM=m, PW=w, HAS_ORACLE=has_oracle, COMPARE=True,
                     BLOCK=fused_triton.BLOCK, BINS=fused_triton.BINS, SATURATED=S.SATURATED_BIN)
    signature = {"ref_ptr": ints, "prod_ptr": ints, "oracle_ptr": "*fp64", "programs_ptr": "*i64",
                 "starts_ptr": "*i64", "entries_ptr": "*i64", "acc_ptr": "*fp64", "peaks_ptr": "*fp64",
                 "hist_ptr": "*i64", "acc_size": "i64"} | {k: "constexpr" for k in constants}
    if "nvidia" not in importlib.import_module("triton.backends").backends:
        pytest.skip("this triton build has no CUDA backend")
    source = compiler.ASTSource(fn=fused_triton._kernel, signature=signature, constexprs=constants)
    ptx = triton.compile(source, target=target).asm["ptx"]
    assert "add.f64" in ptx and "fma" not in ptx and ".ftz" not in ptx
