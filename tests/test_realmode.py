"""Real mode: a callable's floating arithmetic redirected to float64 (or float32)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kcert.errors import RealModeUnsupported
from kcert.execution.realmode import RealMode, run_real, semantic_round, to_real

BF16 = torch.bfloat16
F64 = torch.float64
F32 = torch.float32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def rmsnorm(x, w, eps=1e-6):
    """The usual bf16 RMSNorm, with the casts real mode has to neutralise."""
    dt = x.dtype
    h = x.float()
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return w * h.to(dt)


def rmsnorm_f64(x, w, eps=1e-6):
    x, w = x.double(), w.double()
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def max_rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max()).item()


# -- casts ---------------------------------------------------------------------------


def test_casts_are_noops_rmsnorm_is_float64():
    x = torch.randn(8, 64, dtype=BF16)
    w = (1 + 0.1 * torch.randn(64)).to(BF16)
    want = rmsnorm_f64(x, w)
    got = run_real(rmsnorm, x, w)
    assert got.dtype == F64
    assert max_rel(got, want) < 1e-15
    # the same function run normally rounds to bf16: the test can tell the difference
    assert max_rel(rmsnorm(x, w), want) > 1e-4


def test_every_cast_spelling_targets_real_dtype():
    x = torch.randn(3, dtype=BF16)
    with RealMode():
        assert x.to(BF16).dtype == F64
        assert x.to("cpu", torch.float16).dtype == F64
        assert x.to(dtype=F32).dtype == F64
        assert x.to(torch.device("cpu"), BF16, copy=True).dtype == F64
        assert x.type(BF16).dtype == F64
        assert x.type("torch.HalfTensor").dtype == F64
        assert x.type(torch.FloatTensor).dtype == F64
        for cast in (x.float(), x.half(), x.bfloat16(), x.double()):
            assert cast.dtype == F64
        assert x.sum(dtype=F32).dtype == F64
        assert F.softmax(x, -1, dtype=F32).dtype == F64
        assert x.to(torch.int32).dtype == torch.int32  # integer dtypes are kept
        assert torch.arange(4).float().dtype == F64
    with RealMode(F32):
        assert x.double().dtype == F32
        assert x.to(F64).dtype == F32


def test_casts_never_alias_their_input():
    # In the original code x.float() of a bf16 x is a copy; in real mode x is already
    # float64, so a plain no-op cast would let the write below corrupt the caller's x.
    def kernel(x):
        h = x.float()
        h.mul_(2)
        g = x.to(torch.float64)
        g.add_(1)
        return h + g

    x = torch.randn(5, dtype=F64)
    x0 = x.clone()
    out = run_real(kernel, x)
    assert torch.equal(x, x0)
    torch.testing.assert_close(out, 3 * x0 + 1, rtol=1e-15, atol=0)


# -- factories -----------------------------------------------------------------------


def test_factories_use_the_target_dtype():
    x = torch.randn(3, dtype=BF16)
    before = torch.get_default_dtype()
    with RealMode():
        assert torch.get_default_dtype() == F64
        assert torch.zeros(3).dtype == F64
        assert torch.ones_like(x, dtype=BF16).dtype == F64
        assert torch.zeros(2, dtype=BF16).dtype == F64
        assert torch.arange(0.0, 1.0, 0.25).dtype == F64
        full = torch.full((2,), 0.1)
        assert full.dtype == F64 and full[0].item() == 0.1  # the double 0.1, not bf16's
        t = torch.tensor([0.1])
        assert t.dtype == F64 and t.item() == 0.1
        assert torch.tensor([0.1], dtype=BF16).item() == 0.1
        assert torch.arange(5).dtype == torch.int64
        assert torch.zeros(2, dtype=torch.int32).dtype == torch.int32
        assert x.new_zeros(2, dtype=torch.float16).dtype == F64
    assert torch.get_default_dtype() == before
    with RealMode(F32):
        assert torch.zeros(1, dtype=F64).dtype == F32


def test_default_dtype_restored_after_exception():
    before = torch.get_default_dtype()
    with pytest.raises(ZeroDivisionError):
        with RealMode():
            assert torch.get_default_dtype() == F64
            1 / 0
    assert torch.get_default_dtype() == before
    with pytest.raises(RealModeUnsupported):
        run_real(lambda x: x.numpy(), torch.ones(2))
    assert torch.get_default_dtype() == before


def test_dtype_argument_is_validated():
    for bad in (BF16, torch.float16, torch.int64):
        with pytest.raises(ValueError):
            RealMode(bad)
        with pytest.raises(ValueError):
            run_real(lambda x: x, torch.ones(1), dtype=bad)
        with pytest.raises(ValueError):
            to_real(torch.ones(1), bad)


# -- library code ----------------------------------------------------------------------


def test_sdpa_on_bf16_matches_float64_attention():
    q, k, v = (torch.randn(2, 3, 7, 16, dtype=BF16) for _ in range(3))
    got = run_real(F.scaled_dot_product_attention, q, k, v)
    q64, k64, v64 = q.double(), k.double(), v.double()
    want = torch.softmax(q64 @ k64.transpose(-1, -2) / 16**0.5, dim=-1) @ v64
    assert got.dtype == F64
    assert max_rel(got, want) < 1e-13
    assert max_rel(F.scaled_dot_product_attention(q, k, v), want) > 1e-4


def test_bf16_linear_parameters_captured_are_converted():
    lin = nn.Linear(16, 8).to(BF16)
    x = torch.randn(5, 16, dtype=BF16)
    want = x.double() @ lin.weight.double().T + lin.bias.double()
    got = run_real(lin, x)
    assert got.dtype == F64
    assert max_rel(got, want) < 1e-15
    assert lin.weight.dtype == BF16  # the module itself is untouched
    # a closure over the module, called twice in one session (cached conversion)
    mode = RealMode()
    with mode:
        a = lin(x)
        b = lin(x)
    assert torch.equal(a, b) and max_rel(a, want) < 1e-15
    # the conversion cache lives for one session: a weight updated in between is seen
    with torch.no_grad():
        lin.weight.mul_(2)
    with mode:
        c = lin(x)
    assert max_rel(c, x.double() @ lin.weight.double().T + lin.bias.double()) < 1e-15


def test_integer_tensors_are_untouched():
    emb = nn.Embedding(10, 4).to(BF16)
    idx = torch.tensor([[1, 2], [3, 9]])
    with RealMode():
        out = emb(idx)
        assert idx.dtype == torch.int64
        counts = torch.bincount(idx.flatten())
    assert out.dtype == F64
    assert torch.equal(out, emb.weight.double()[idx])
    assert counts.dtype == torch.int64


# -- autograd ----------------------------------------------------------------------------


def test_autograd_through_bf16_parameter_is_float64():
    p = nn.Parameter(torch.randn(6, dtype=BF16))
    x = torch.randn(6, dtype=F64, requires_grad=True)

    def f(x):
        return torch.sin(p * x.to(p.dtype)).float().sum()  # a bf16 kernel

    p64, x64 = p.detach().double(), x.detach()
    dx = p64 * torch.cos(p64 * x64)
    dp_bf16 = (x64 * torch.cos(p64 * x64)).to(BF16)  # made outside: a real bf16 rounding
    with RealMode():
        for _ in range(2):  # a second pass reuses the cached conversion of p
            x.grad, p.grad = None, None
            loss = f(x)
            loss.backward()
            assert loss.dtype == F64
            torch.testing.assert_close(x.grad, dx, rtol=1e-14, atol=0)
            # the gradient reaching the bf16 leaf is the float64 one, rounded once
            assert p.grad.dtype == BF16 and torch.equal(p.grad, dp_bf16)
        (gx,) = torch.autograd.grad(f(x), [x])
        torch.testing.assert_close(gx, dx, rtol=1e-14, atol=0)
    # run normally, the bf16 arithmetic gives a visibly different gradient
    x.grad = None
    f(x).backward()
    assert max_rel(x.grad, dx) > 1e-4


# -- torch.compile ---------------------------------------------------------------------


def test_compiled_callable_aot_eager_is_float64():
    x = torch.randn(4, 32, dtype=BF16)
    w = torch.randn(32, dtype=BF16)
    compiled = torch.compile(rmsnorm, backend="aot_eager")
    with RealMode():
        got = compiled(x, w)
    assert got.dtype == F64
    assert max_rel(got, rmsnorm_f64(x, w)) < 1e-15
    # a bit trick inside a compiled callable is still caught
    bad = torch.compile(lambda t: t.float().view(torch.int32) & -65536, backend="aot_eager")
    with pytest.raises(RealModeUnsupported, match=r"Tensor\.view\(torch\.int32\)"):
        with RealMode():
            bad(x)
    # so is a write through a view of an outside bf16 buffer (no storage addresses here)
    out = torch.zeros(4, 32, dtype=BF16)

    def write_column(t):
        out[:, 0].copy_(t[:, 0])
        return out

    with pytest.raises(RealModeUnsupported, match=r"Tensor\.copy_.*torch\.bfloat16"):
        with RealMode():
            torch.compile(write_column, backend="aot_eager")(x)


def _have_cxx() -> bool:
    return bool(os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++"))


@pytest.mark.skipif(
    not _have_cxx(), reason="inductor on CPU needs a C++ compiler (g++/clang++), none found"
)
def test_compiled_callable_inductor_is_float64():
    x = torch.randn(4, 32, dtype=BF16)
    w = torch.randn(32, dtype=BF16)
    compiled = torch.compile(rmsnorm)
    with RealMode():
        got = compiled(x, w)
    assert got.dtype == F64
    assert max_rel(got, rmsnorm_f64(x, w)) < 1e-14


# -- float32 real mode -------------------------------------------------------------------


def test_float32_real_mode_matches_float32_evaluation():
    x = torch.randn(8, 64, dtype=BF16)
    w = torch.randn(64, dtype=BF16)
    got = run_real(rmsnorm, x, w, dtype=F32)
    assert got.dtype == F32
    h = x.float()
    want = w.float() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))
    assert torch.equal(got, want)
    # and it is not the float64 answer: float32 rounding is still there
    assert 0 < max_rel(got, rmsnorm_f64(x, w)) < 1e-6


# -- autocast ----------------------------------------------------------------------------


def mm_under_autocast(a, b):
    with torch.autocast("cpu", dtype=BF16):
        return a @ b


def test_autocast_inside_the_callable_does_not_lower_precision():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert mm_under_autocast(a, b).dtype == BF16  # autocast is really active
    got32 = run_real(mm_under_autocast, a, b, dtype=F32)
    assert got32.dtype == F32
    torch.testing.assert_close(got32, a @ b, rtol=1e-6, atol=1e-6)
    got64 = run_real(mm_under_autocast, a, b)
    assert got64.dtype == F64
    torch.testing.assert_close(got64, a.double() @ b.double(), rtol=1e-14, atol=1e-14)


# -- semantic_round ----------------------------------------------------------------------


def test_semantic_round_survives_real_mode():
    def normaliser(x):
        n = torch.tensor(3072**0.5, dtype=x.dtype)  # Gemma: sqrt(hidden) in bf16
        return x * semantic_round(n, BF16)

    x = torch.ones(2, dtype=BF16)
    got = run_real(normaliser, x)
    assert got.dtype == F64
    assert torch.equal(got, torch.full((2,), 55.5, dtype=F64))
    # without it real mode would keep the unrounded normaliser
    plain = run_real(lambda x: x * torch.tensor(3072**0.5, dtype=BF16), x)
    assert abs(plain[0].item() - 55.42562584220407) < 1e-12
    # under torch.compile too
    compiled = torch.compile(normaliser, backend="aot_eager")
    with RealMode():
        assert torch.equal(compiled(x), got)


def test_semantic_round_outside_real_mode_is_a_round_trip():
    t = torch.tensor([55.4256, 1.0 + 2**-10], dtype=F32)
    r = semantic_round(t, BF16)
    assert r.dtype == F32
    assert torch.equal(r, t.to(BF16).to(F32))
    assert r[0].item() == 55.5


def test_semantic_round_gradient_passes_in_real_mode():
    x = torch.tensor([3.3], dtype=F64, requires_grad=True)
    with RealMode():
        y = (semantic_round(x, BF16) * x).sum()
        y.backward()
    # d/dx [round(x) * x] with round treated as identity: round(x) + x, not rounded
    assert x.grad.item() == semantic_round(x.detach(), BF16).item() + 3.3


# -- what real mode refuses ----------------------------------------------------------------


def bf16_truncate(x):
    """Round-toward-zero to bf16 by masking the low 16 bits of the float32 pattern."""
    bits = x.float().view(torch.int32) & -65536
    return bits.view(torch.float32)


def test_integer_view_bit_trick_raises():
    x = torch.randn(4, 8, dtype=F32)
    t = bf16_truncate(x)  # runs normally: bf16 values, truncated toward zero
    assert torch.equal(t.to(BF16).float(), t) and bool((t.abs() <= x.abs()).all())
    with pytest.raises(RealModeUnsupported) as ei:
        run_real(bf16_truncate, x, name="trunc")
    msg = str(ei.value)
    assert "`trunc`" in msg and "Tensor.view(torch.int32)" in msg
    assert "torch.float64" in msg and "(4, 8)" in msg and "oracle" in msg


def test_float_dtype_view_raises_but_int_bits_to_float_is_allowed():
    x = torch.randn(4, dtype=BF16)
    y = torch.randn(4, dtype=F32)
    want = r"Tensor\.view\(torch\.bfloat16\)` on a torch\.float32 tensor of shape \(4,\)"
    with pytest.raises(RealModeUnsupported, match=want):
        with RealMode():
            y.view(BF16)  # float32 -> pairs of bf16: a reinterpretation
    with pytest.raises(RealModeUnsupported, match=r"torch\.ops\.aten\.view\.dtype"):
        with RealMode():
            torch.ops.aten.view.dtype(x, torch.int16)
    want = r"Tensor\.view\(torch\.int16\)` on a torch\.bfloat16"
    with pytest.raises(RealModeUnsupported, match=want):
        with RealMode():
            x.view(dtype=torch.int16)
    with RealMode():
        inf = torch.tensor([0x7F800000], dtype=torch.int32).view(F32)
        same = torch.ones(3).view(F64)  # a no-op view is fine
    assert inf.item() == float("inf") and same.dtype == F64


def fake_triton_launch(x):
    """What a Triton launcher does: allocate, then hand raw pointers to the kernel."""
    out = torch.empty_like(x)
    pointers = [x.data_ptr(), out.data_ptr()]  # noqa: F841
    return out


def test_raw_pointer_access_raises():
    x = torch.randn(3, 5, dtype=BF16)
    with pytest.raises(RealModeUnsupported) as ei:
        run_real(fake_triton_launch, x, name="rmsnorm_triton")
    msg = str(ei.value)
    assert "`rmsnorm_triton`" in msg and "Tensor.data_ptr()" in msg
    assert "torch.float64 tensor of shape (3, 5)" in msg and "Triton" in msg
    for grab, op in [
        (lambda t: t.untyped_storage(), "untyped_storage"),
        (lambda t: t.storage(), "storage"),
        (lambda t: t.__dlpack__(), "__dlpack__"),
        (lambda t: torch.from_dlpack(t), "__dlpack__"),
        (lambda t: t.__cuda_array_interface__, "__cuda_array_interface__"),
    ]:
        with pytest.raises(RealModeUnsupported, match=f"Tensor.{op}"):
            run_real(grab, x)
    # integer tensors (index arrays) may hand out pointers
    with RealMode():
        assert torch.arange(3).data_ptr() != 0


def test_leaving_torch_raises():
    x = torch.randn(2, 3, dtype=BF16)
    want = r"Tensor\.numpy\(\).*torch\.float64 tensor of shape \(2, 3\).*NumPy"
    with pytest.raises(RealModeUnsupported, match=want):
        run_real(lambda t: t.float().numpy(), x)
    with pytest.raises(RealModeUnsupported, match=r"Tensor\.__array__"):
        run_real(lambda t: np.exp(t), x)


def test_custom_operator_raises_unless_trusted():
    @torch.library.custom_op("kcert_test::scale", mutates_args=())
    def scale(t: torch.Tensor) -> torch.Tensor:
        return (t.to(BF16) * 3).to(t.dtype)  # invisible to real mode

    x = torch.randn(4, dtype=BF16)
    want = r"torch\.ops\.kcert_test\.scale.*custom operator"
    with pytest.raises(RealModeUnsupported, match=want):
        run_real(scale, x)
    with RealMode(trusted_ops={"kcert_test::scale"}):
        assert scale(x).dtype == F64


# -- in-place writes -----------------------------------------------------------------------


def test_inplace_write_into_outside_bf16_buffer_raises():
    out = torch.zeros(4, 8, dtype=BF16)
    x = torch.randn(4, 8, dtype=BF16)

    def via_copy(x):
        out.copy_(x * 2)
        return out

    def via_setitem(x):
        out[0] = x[0]
        return out

    def via_out_kwarg(x):
        torch.mul(x, 2, out=out)
        return out

    def via_view(x):
        out[:, 0].copy_(x[:, 0])
        return out

    def via_iadd(x):
        o = out
        o += x
        return o

    def via_inplace_flag(x):
        return F.relu(out, inplace=True)

    def via_init(x):
        return nn.init.normal_(out)  # keyword-only torch-function dispatch

    cases = [
        (via_copy, "Tensor.copy_"),
        (via_setitem, "Tensor.__setitem__"),
        (via_out_kwarg, r"torch.mul\(\.\.\., out=\.\.\.\)"),
        (via_view, "Tensor.copy_"),
        (via_iadd, "Tensor.add_"),
        (via_inplace_flag, r"inplace=True"),
        (via_init, r"torch\.nn\.init\.normal_"),
    ]
    for fn, op in cases:
        with pytest.raises(RealModeUnsupported, match=op) as ei:
            run_real(fn, x, name=fn.__name__)
        msg = str(ei.value)
        assert "torch.bfloat16 tensor of shape" in msg and "silently lost" in msg, fn.__name__
    assert torch.equal(out, torch.zeros(4, 8, dtype=BF16))  # nothing half-written


def test_inplace_writes_into_tensors_made_inside_work():
    x = torch.randn(4, 8, dtype=BF16)

    def kernel(x):
        buf = torch.empty(4, 8, dtype=BF16)  # made inside: float64 in real mode
        buf.copy_(x * 2)
        buf[0] = 1.0
        buf += x
        torch.mul(buf, 0.5, out=buf)
        buf[:, 1].zero_()
        return F.relu(buf, inplace=True)

    x64 = x.double()
    want = x64 * 2
    want[0] = 1.0
    want = ((want + x64) * 0.5)
    want[:, 1] = 0
    got = run_real(kernel, x)
    assert got.dtype == F64
    torch.testing.assert_close(got, want.relu(), rtol=1e-15, atol=0)


def test_writing_into_an_argument_and_returning_nothing_raises():
    def fill(out, x):
        out.copy_(x * 2)

    out = torch.zeros(3, dtype=BF16)
    with pytest.raises(RealModeUnsupported, match=r"`fill` returned None after writing"):
        run_real(fill, out, torch.ones(3, dtype=BF16), name="fill")
    # returning the written argument is fine: the caller gets the float64 result
    got = run_real(lambda o, x: o.copy_(x * 2), out, torch.ones(3, dtype=BF16))
    assert got.dtype == F64 and torch.equal(got, torch.full((3,), 2.0, dtype=F64))


def test_nesting():
    x = torch.randn(3, dtype=BF16)
    with RealMode():
        # same dtype: run_real inside an open session works
        assert run_real(lambda t: t.float() * 2, x).dtype == F64
        with pytest.raises(ValueError, match="cannot be entered inside"):
            with RealMode(F32):
                pass
        assert torch.zeros(1).dtype == F64  # the failed entry left the session intact


# -- run_real / to_real --------------------------------------------------------------------


def test_run_real_wraps_errors_that_appear_only_in_real_mode():
    def picky(x):
        if x.dtype != BF16:
            raise TypeError(f"expected bfloat16, got {x.dtype}")
        return x * 2

    x = torch.ones(2, dtype=BF16)
    assert picky(x).dtype == BF16  # fine when run normally
    with pytest.raises(RealModeUnsupported) as ei:
        run_real(picky, x, name="picky_kernel")
    msg = str(ei.value)
    assert msg.startswith("`picky_kernel` raised TypeError: expected bfloat16, got torch.float64")
    assert "when evaluated in real mode (torch.float64)" in msg
    assert isinstance(ei.value.__cause__, TypeError)
    assert isinstance(ei.value, RuntimeError)


def test_run_real_converts_outputs_and_passes_kwargs():
    w = torch.randn(3, dtype=BF16)

    def kernel(x, *, scale):
        return {"y": x * scale, "w": w, "n": torch.arange(3)}, [x.to(BF16)]

    scale = torch.tensor(0.1, dtype=BF16)
    outs = run_real(kernel, torch.ones(3, dtype=BF16), scale=scale, dtype=F32)
    d, (lst,) = outs
    assert d["y"].dtype == F32 and d["w"].dtype == F32 and d["n"].dtype == torch.int64
    assert d["y"][0].item() == torch.tensor(0.1, dtype=BF16).item()  # scale was made in bf16
    assert lst.dtype == F32


def test_to_real_nested_and_autograd_choice():
    a = torch.randn(2, dtype=BF16, requires_grad=True)
    b = torch.randn(2, dtype=F64)
    i = torch.arange(2)
    got = to_real({"a": a, "rest": (b, [i, 3.0])})
    assert got["a"].dtype == F64 and got["rest"][0] is b and got["rest"][1][0] is i
    assert got["rest"][1][1] == 3.0
    # a converted tensor stays connected: the gradient reaches the bf16 source
    got["a"].sum().backward()
    assert torch.equal(a.grad, torch.ones(2, dtype=BF16))
    assert to_real(b, F32).dtype == F32


def test_grouped_mm_has_its_definition_in_float64_real_mode():
    """torch._grouped_mm (mixture-of-experts layers) has no float64 kernel; real mode computes it from its
    definition: rows grouped by offs times one matrix per group (an empty group, rows past offs[-1] zero), a
    batched product, and 2D operands grouped along their shared dimension."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(7, 8, generator=g).to(torch.bfloat16)  # sizes of 8: the float32 kernel wants 16-byte strides
    b = torch.randn(3, 8, 8, generator=g).to(torch.bfloat16)
    offs = torch.tensor([2, 2, 6], dtype=torch.int32)  # group 1 empty, row 6 past the last offset
    out = run_real(lambda x, w: torch._grouped_mm(x, w, offs=offs), a, b)
    a64, b64 = a.double(), b.double()
    want = torch.zeros(7, 8, dtype=torch.float64)
    want[0:2], want[2:6] = a64[0:2] @ b64[0], a64[2:6] @ b64[2]
    assert out.dtype == torch.float64 and torch.equal(out, want)
    # float32 real mode uses the operator itself (it has a float32 kernel)
    assert torch.allclose(run_real(lambda x, w: torch._grouped_mm(x, w, offs=offs), a, b, dtype=torch.float32)[:6],
                          want[:6].float(), rtol=1e-5, atol=1e-5)
    batched = torch.randn(3, 2, 8, generator=g)
    assert torch.equal(run_real(lambda x, w: torch._grouped_mm(x, w), batched, b), batched.double() @ b64)
    left, right = torch.randn(2, 6, generator=g), torch.randn(6, 3, generator=g)
    split = torch.tensor([4, 6], dtype=torch.int32)
    stacked = run_real(lambda x, w: torch._grouped_mm(x, w, offs=split), left, right)
    assert torch.equal(stacked, torch.stack([left.double()[:, :4] @ right.double()[:4],
                                             left.double()[:, 4:] @ right.double()[4:]]))
    with pytest.raises(RealModeUnsupported, match="raised RuntimeError"):  # a bias: not rewritten, raises as before
        run_real(lambda x, w: torch._grouped_mm(x, w, offs=offs, bias=torch.zeros(3, 8)), a, b)
