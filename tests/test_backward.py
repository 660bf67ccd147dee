"""kcert.gradients: a case's backward as a case of its own (names, probes, buckets, seeds, the
gradients themselves in working precision and in real mode, hand-written backward passes, errors)."""

import dataclasses

import pytest
import torch
from sample_kernels import rmsnorm_ref

import kcert
from kcert.backward import DEFAULT_COTANGENT_SHIFT, _dry_run, gradients
from kcert.errors import CaseError, KernelError
from kcert.execution import probes
from kcert.execution.realmode import run_real
from kcert.verdict import Verdict

CPU = torch.device("cpu")
F64 = torch.float64
EPS = 1e-6  # rmsnorm_ref's


def rms_exact(x, w, dy):
    """Closed-form float64 gradients of y = x rstd w (the RMSNorm of tests/sample_kernels.py)."""
    x, w, dy = x.double(), w.double(), dy.double()
    rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS)
    xhat = x * rstd
    g = dy * w
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (dy * xhat).reshape(-1, x.shape[-1]).sum(0)


class ManualRMSNorm(torch.autograd.Function):
    """rmsnorm_ref with a hand-written backward computed in float32; ``scale`` multiplies dx
    (1.0: correct; anything else: a defective backward)."""

    @staticmethod
    def forward(ctx, x, w, scale):
        ctx.save_for_backward(x, w)
        ctx.scale = scale
        return rmsnorm_ref(x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        x32, g = x.float(), dy.float() * w.float()
        rstd = torch.rsqrt(x32.square().mean(-1, keepdim=True) + EPS)
        xhat = x32 * rstd
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True)) * ctx.scale
        dw = (dy.float() * xhat).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(w.dtype), None


def manual(scale=1.0):
    def prod(x, w):
        return ManualRMSNorm.apply(x, w, scale)

    return prod


def rms_case(prod=None, **kw):
    return kcert.Case(name="rms", ref=rmsnorm_ref, prod=prod or manual(), inputs={"x": kcert.Gaussian((4, 64), shift=0.1)},
                      weights={"w": kcert.Gaussian((64,), shift=1.0, std=0.1)}, **kw)


def call(case, fn, seed=0, r=0, exact=False):
    draw = probes.draw_inputs(case, seed, r, CPU)
    weights = probes.draw_weights(case, seed, CPU)
    kwargs = {**draw.exact, **weights.exact} if exact else {**draw.working, **weights.working}
    return fn(**kwargs), kwargs


# --- the derived case ----------------------------------------------------------------------------


def test_lazy_export():
    assert kcert.gradients is gradients


def test_names_probes_and_buckets():
    g = gradients(rms_case())
    assert g.name == "rms_grad"
    assert tuple(g.output_names) == ("output", "grad_x", "grad_w")
    assert list(g.inputs) == ["x", "cotangent"] and list(g.weights) == ["w"]
    cot = g.inputs["cotangent"]
    assert isinstance(cot, kcert.Gaussian) and cot.shape == (4, 64) and cot.shift == DEFAULT_COTANGENT_SHIFT
    # forward keeps the case's buckets; input gradient per channel; weight gradient per parameter channel
    assert g.buckets == (kcert.Axes(-1), kcert.Axes(-1), kcert.Axes(0))
    assert g.dtype == torch.bfloat16 and "gradients w.r.t. x, w" in g.description

    only = gradients(rms_case(), "w", include_forward=False, name="rms_dw")
    assert only.name == "rms_dw" and tuple(only.output_names) == ("grad_w",) and only.buckets == (kcert.Axes(0),)


def test_default_buckets_for_a_linear_weight_and_overrides():
    def lin(x, w):
        return torch.nn.functional.linear(x, w)

    case = kcert.Case(name="lin", ref=lin, prod=lin, inputs={"x": kcert.Gaussian((8, 16))},
                      weights={"w": kcert.Gaussian((4, 16))})
    g = gradients(case)
    assert g.buckets == (kcert.Axes(-1), kcert.Axes(-1), kcert.Axes(0))  # one bucket per output row of w
    g = gradients(case, buckets={"w": kcert.Axes(0, 1)})
    assert g.buckets[2] == kcert.Axes(0, 1) and g.buckets[1] == kcert.Axes(-1)
    g = gradients(case, buckets=kcert.Axes())
    assert g.buckets[1:] == (kcert.Axes(), kcert.Axes())


def test_original_inputs_draw_as_before_and_cotangent_per_replicate():
    case = rms_case()
    g = gradients(case)
    a0 = probes.draw_inputs(g, 7, 0, CPU).working
    assert torch.equal(a0["x"], probes.draw_inputs(case, 7, 0, CPU).working["x"])
    assert torch.equal(a0["cotangent"], probes.draw_inputs(g, 7, 0, CPU).working["cotangent"])  # reproducible
    a1 = probes.draw_inputs(g, 7, 1, CPU).working
    assert not torch.equal(a0["cotangent"], a1["cotangent"])  # redrawn per replicate
    assert a0["cotangent"].dtype == torch.bfloat16  # rounded to the case dtype like an upstream gradient
    assert abs(float(a0["cotangent"].float().mean()) - DEFAULT_COTANGENT_SHIFT) < 0.15


def test_gradients_match_autograd_in_working_precision():
    g = gradients(rms_case(prod=rmsnorm_ref))
    (out, gx, gw), kwargs = call(g, g.ref)
    x = kwargs["x"].clone().requires_grad_()
    w = kwargs["w"].clone().requires_grad_()
    y = rmsnorm_ref(x, w)
    ex, ew = torch.autograd.grad(y, [x, w], kwargs["cotangent"])
    assert torch.equal(out, y.detach()) and torch.equal(gx, ex) and torch.equal(gw, ew)
    assert gx.dtype == gw.dtype == torch.bfloat16 and not gx.requires_grad


def test_oracle_is_float64_autograd_in_real_mode_also_through_a_hand_written_backward():
    g = gradients(rms_case())
    for fn in (g.ref, g.prod):  # autograd through rmsnorm_ref; ManualRMSNorm's float32 backward
        (_, gx, gw), kwargs = call(g, lambda fn=fn, **kw: run_real(lambda: fn(**kw), name="k"), exact=True)
        dx, dw = rms_exact(kwargs["x"], kwargs["w"], kwargs["cotangent"])
        assert gx.dtype == F64 and gw.dtype == F64
        torch.testing.assert_close(gx, dx, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(gw, dw, rtol=1e-12, atol=1e-13)
    # the same hand-written backward outside real mode really is float32: visibly less exact
    (_, gx32, _), kwargs = call(g, g.prod, exact=True)
    assert (gx32 - rms_exact(kwargs["x"], kwargs["w"], kwargs["cotangent"])[0]).abs().max() > 1e-9


def test_given_oracle_is_differentiated():
    def oracle(x, w):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS) * w

    g = gradients(rms_case(oracle=oracle))
    (_, gx, gw), kwargs = call(g, g.oracle, exact=True)
    dx, dw = rms_exact(kwargs["x"], kwargs["w"], kwargs["cotangent"])
    torch.testing.assert_close(gx, dx, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(gw, dw, rtol=1e-12, atol=1e-13)


def test_backward_writing_into_its_upstream_gradient_leaves_the_draw_alone():
    class Overwrite(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, dy):
            dy.mul_(2)  # in place, into the upstream gradient
            return dy

    case = kcert.Case(name="ow", ref=lambda x: x * 2, prod=Overwrite.apply, inputs={"x": kcert.Gaussian((3, 8))})
    g = gradients(case)
    (_, gx), kwargs = call(g, g.prod)
    before = kwargs["cotangent"].clone()
    assert torch.equal(gx, 2 * kwargs["cotangent"])
    (_, gx), _ = call(g, g.prod)
    assert torch.equal(kwargs["cotangent"], before)


def test_backward_returning_its_saved_input_as_the_gradient_certifies():
    class GradIntoInput(torch.autograd.Function):
        """Liger-Kernel's SwiGLU backward: the gradient is written into the saved input's memory and that
        tensor is returned, so the gradient autograd hands back is the leaf itself (it requires grad)."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 3

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            x.data.copy_(dy * 3)
            return x

    case = kcert.Case(name="gi", ref=lambda x: x * 3, prod=GradIntoInput.apply, inputs={"x": kcert.Gaussian((3, 8))})
    g = gradients(case)
    (_, gx), kwargs = call(g, g.prod)
    assert not gx.requires_grad and torch.equal(gx, 3 * kwargs["cotangent"])
    assert kcert.certify(g, replicates=64, seed=0).gates["bias"] is Verdict.PASS  # reduced without a traceback


def test_cotangent_options():
    def loss(x, w):
        return (rmsnorm_ref(x, w).float() ** 2).mean()

    case = kcert.Case(name="loss", ref=loss, prod=loss, inputs={"x": kcert.Gaussian((4, 64))},
                      weights={"w": kcert.Gaussian((64,), shift=1.0)})
    g = gradients(case, cotangent=kcert.Fixed(torch.tensor(1.0)), include_forward=False)
    (gx, _), kwargs = call(g, g.ref)
    x = kwargs["x"].clone().requires_grad_()
    assert torch.equal(gx, torch.autograd.grad(loss(x, kwargs["w"]), [x])[0])  # loss.backward()
    g = gradients(case, cotangent=lambda shape: kcert.Gaussian(shape, std=0.5))
    assert g.inputs["cotangent"] == kcert.Gaussian((), std=0.5)

    def two(x, w):
        return rmsnorm_ref(x, w), x * w

    case2 = kcert.Case(name="two", ref=two, prod=two, inputs={"x": kcert.Gaussian((4, 64))},
                       weights={"w": kcert.Gaussian((64,))}, output_names=("y", "z"))
    g = gradients(case2, cotangent={"z": kcert.Uniform((4, 64))})
    assert list(g.inputs) == ["x", "cotangent_0", "cotangent_1"]
    assert isinstance(g.inputs["cotangent_0"], kcert.Gaussian) and isinstance(g.inputs["cotangent_1"], kcert.Uniform)
    assert tuple(g.output_names) == ("y", "z", "grad_x", "grad_w")
    (_, _, gx, _), kwargs = call(g, g.ref)
    x = kwargs["x"].clone().requires_grad_()
    expect = torch.autograd.grad(two(x, kwargs["w"]), [x], [kwargs["cotangent_0"], kwargs["cotangent_1"]])[0]
    assert torch.equal(gx, expect)


def test_ref_that_cannot_run_on_meta_is_evaluated_on_cpu():
    def ref(x, w):
        if float(x.detach().abs().max()) > 1e6:  # data-dependent: impossible on the meta device
            raise AssertionError
        return rmsnorm_ref(x, w)

    case = dataclasses.replace(rms_case(), ref=ref)
    g = gradients(case)
    assert g.inputs["cotangent"].shape == (4, 64)
    values = {**probes.draw_inputs(case, 0, 0, CPU).working, **probes.draw_weights(case, 0, CPU).working}
    assert _dry_run(case, values, ("x", "w")).device == "cpu"
    assert _dry_run(rms_case(), values, ("x", "w")).device == "meta"


# --- certification end to end ----------------------------------------------------------------------


def test_certify_detects_a_defective_hand_written_backward_and_passes_a_correct_one():
    bad = kcert.certify(gradients(rms_case(prod=manual(1.01))), replicates=64, seed=0, max_replicates=64)
    assert bad.verdict is Verdict.FAIL
    assert bad.gates["algebra"] is Verdict.FAIL  # x 1.01 is a different real function
    by_output = {b.output: b.verdict for b in bad.bias}
    assert by_output["grad_x"] is Verdict.FAIL and by_output["output"] is Verdict.PASS
    assert by_output["grad_w"] is Verdict.PASS  # the defect is where it is: dx only
    good = kcert.certify(gradients(rms_case()), replicates=64, seed=0, max_replicates=64)
    assert good.gates["algebra"] is Verdict.PASS and good.gates["bias"] is Verdict.PASS
    assert good.verdict is not Verdict.FAIL


def test_prod_without_a_backward_is_a_kernel_error():
    def no_grad_prod(x, w):
        with torch.no_grad():
            return rmsnorm_ref(x, w)

    g = gradients(rms_case(prod=no_grad_prod))
    with pytest.raises(KernelError, match="output of prod does not require grad"):
        kcert.certify(g, replicates=2, seed=0)


# --- errors -------------------------------------------------------------------------------------


def test_error_no_floating_input():
    case = kcert.Case(name="ints", ref=lambda i: i.float(), prod=lambda i: i.float(),
                      inputs={"i": kcert.Integers((4,), 0, 8)}, weights={"m": kcert.Fixed(torch.ones(4))})
    with pytest.raises(CaseError, match="no floating input or weight to differentiate"):
        gradients(case)


def test_error_wrt_names():
    with pytest.raises(CaseError, match=r"wrt names 'v', which is not an input or weight .*inputs \['x'\]"):
        gradients(rms_case(), wrt=["x", "v"])
    with pytest.raises(CaseError, match="names an argument twice"):
        gradients(rms_case(), wrt=["x", "x"])
    with pytest.raises(CaseError, match="at least one"):
        gradients(rms_case(), wrt=[])
    case = kcert.Case(name="ids", ref=lambda x, i: x[i], prod=lambda x, i: x[i],
                      inputs={"x": kcert.Gaussian((8,)), "i": kcert.Integers((3,), 0, 8)})
    with pytest.raises(CaseError, match="wrt names 'i', a torch.int64 tensor"):
        gradients(case, wrt="i")


def test_error_output_without_grad_and_unused_wrt():
    def detached(x, w):
        return rmsnorm_ref(x, w).detach()

    with pytest.raises(CaseError, match="output of ref does not require grad"):
        gradients(dataclasses.replace(rms_case(), ref=detached))
    case = kcert.Case(name="unused", ref=lambda x, b: x * 2, prod=lambda x, b: x * 2,
                      inputs={"x": kcert.Gaussian((4,)), "b": kcert.Gaussian((4,))})
    with pytest.raises(CaseError, match=r"no output of ref depends on \['b'\]"):
        gradients(case)
    assert tuple(gradients(case, wrt="x").output_names) == ("output", "grad_x")


def test_error_cotangent_and_buckets():
    with pytest.raises(CaseError, match=r"cotangent probe for output has shape \(4, 63\) but output has shape \(4, 64\)"):
        gradients(rms_case(), cotangent=kcert.Gaussian((4, 63)))
    with pytest.raises(CaseError, match=r"cotangent names outputs \['y'\]"):
        gradients(rms_case(), cotangent={"y": kcert.Gaussian((4, 64))})
    with pytest.raises(CaseError, match="must return a kcert probe"):
        gradients(rms_case(), cotangent=lambda shape: torch.zeros(shape))
    with pytest.raises(CaseError, match=r"buckets for grad_w.*Axes\(1,\) does not fit an output with 1 dimensions"):
        gradients(rms_case(), buckets={"w": kcert.Axes(1)})
    with pytest.raises(CaseError, match=r"buckets names \['b'\]"):
        gradients(rms_case(), buckets={"b": kcert.Axes(0)})


def test_error_name_clashes():
    case = kcert.Case(name="c", ref=lambda x, cotangent: x * cotangent, prod=lambda x, cotangent: x * cotangent,
                      inputs={"x": kcert.Gaussian((4,)), "cotangent": kcert.Gaussian((4,))})
    with pytest.raises(CaseError, match="already has an argument named 'cotangent'"):
        gradients(case)
    with pytest.raises(CaseError, match="must be a kcert.Case"):
        gradients(object())
