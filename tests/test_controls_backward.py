"""The backward controls (family ``backward``): structure, the mechanisms, the quick subset, and
the whole family.

Default suite: cheap structural checks, the two mechanisms checked directly (the in-place write
reaches the residual gradient; the bf16 accumulator loses precision across chunks), and the
controls marked ``quick=True`` (the in-place RMSNorm negative and its out-of-place positive).
``-m controls``: every backward control at its declared replicates, against the bar.
"""

import functools

import pytest
import torch
from sample_kernels import control_bar_failures

import kcert
from kcert.catalog import backward as catalog
from kcert.controls import backward as controls_module
from kcert.controls.registry import all_controls
from kcert.execution import probes
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

CPU = torch.device("cpu")
SOURCES = {
    "rms_norm_backward_overwrites_shared_grad": "Liger-Kernel #370 (fixed by PR #376)",
    "fused_linear_cross_entropy_bf16_grad_weight": "Liger-Kernel #512, PR #830 (float32 accumulation)",
}
POSITIVES = {"rms_norm_backward_out_of_place", "rms_norm_manual_backward", "swiglu_manual_backward",
             "fused_linear_cross_entropy_fp32_accumulation"}
# Which gates must FAIL each negative (measured; the docstrings give the figures).
DETECTING_GATES = {
    "rms_norm_backward_overwrites_shared_grad": ("algebra", "bias", "variance"),
    "fused_linear_cross_entropy_bf16_grad_weight": ("bias",),
}


def _controls():
    return [c for c in all_controls() if c.family == "backward"]


def _by_name(name):
    return next(c for c in _controls() if c.name == name)


def _certify(control):
    return kcert.certify(control.build(), replicates=control.replicates, seed=0)


# --- structure (cheap) ---------------------------------------------------------------------


def test_family_counts_sources_and_docstrings():
    controls = _controls()
    negatives = {c.name: c for c in controls if c.kind == "negative"}
    assert set(negatives) == set(SOURCES)
    assert {c.name for c in controls if c.kind == "positive"} == POSITIVES
    for name, source in SOURCES.items():
        assert negatives[name].source == source
    for c in controls:
        doc = c.doc.strip()
        assert "Source:" in doc and ("Faithful:" in doc or "Why benign:" in doc), c.name
        assert "Measured" in doc, c.name
        assert c.replicates >= 256 and c.expect in ("PASS", "FAIL"), c.name


def test_cases_are_gradient_cases_that_run_once():
    for c in _controls():
        case = c.build()
        assert isinstance(case, kcert.Case) and case.name == c.name
        names = tuple(case.output_names)
        assert any(n.startswith("grad_") for n in names), c.name
        draw = probes.draw_inputs(case, 0, 0, CPU)
        weights = probes.draw_weights(case, 0, CPU)
        kwargs = {**draw.working, **weights.working}
        ref, prod = case.ref(**kwargs), case.prod(**kwargs)
        assert len(ref) == len(prod) == len(names), c.name
        for a, b in zip(ref, prod):
            assert a.shape == b.shape and a.dtype == b.dtype, c.name


def test_quick_subset():
    quick = {c.name: c.kind for c in _controls() if c.quick}
    assert quick == {"rms_norm_backward_overwrites_shared_grad": "negative", "rms_norm_backward_out_of_place": "positive"}


def test_liger_chunk_heuristic():
    assert catalog.liger_chunk_size(512, 16, 2048) == 4  # the control: 128 chunks
    assert catalog.liger_chunk_size(8192, 4096, 128256) == 256  # Llama-3 8B: 32 chunks
    assert catalog.liger_chunk_size(8192, 896, 151936) == 64  # Qwen2.5-0.5B: 128 chunks
    assert catalog.liger_chunk_size(100, 64, 64) == 128


# --- the mechanisms, directly ------------------------------------------------------------------


def test_in_place_backward_reaches_the_residual_gradient_only():
    """Liger-Kernel #370 as modelled: with the in-place backward, the residual gradient is wrong and
    the weight gradients are not; out of place, everything matches autograd through the catalogue."""
    case = catalog.POST_NORM_BLOCK.case("blk", catalog.post_norm_residual_block, shape=(1, 8, 64))
    draw = probes.draw_inputs(case, 0, 0, CPU)
    weights = probes.draw_weights(case, 0, CPU)
    g = torch.randn(1, 8, 64, dtype=torch.float64)
    names = ("x", "w_pre", "w_mix", "w_post")

    def grads(norm):
        leaves = {k: v.double().requires_grad_() for k, v in {**draw.exact, **weights.exact}.items()}
        y = catalog.post_norm_residual_block(**leaves, norm=norm)
        return dict(zip(names, torch.autograd.grad(y, [leaves[n] for n in names], g.clone())))

    ref = grads(catalog.N.rms_norm)
    fixed = grads(catalog.rms_norm_manual)
    broken = grads(controls_module.rms_norm_in_place_backward)
    for n in names:
        torch.testing.assert_close(fixed[n], ref[n], rtol=1e-5, atol=1e-5)
    assert (broken["x"] - ref["x"]).abs().max() > 0.1
    for n in ("w_pre", "w_mix", "w_post"):
        torch.testing.assert_close(broken[n], ref[n], rtol=1e-5, atol=1e-5)


def test_bf16_accumulator_loses_precision_across_chunks():
    """Liger-Kernel #512 as modelled: against the reference's single GEMM, the float32 accumulator
    gives the same bf16 weight gradient almost everywhere, the bf16 running sum changes most of it
    and pulls it towards zero (small addends lost to the running sum); the input gradient is the
    reference's either way (bitwise but for one rounding in a few elements: the GEMM's blocking
    depends on torch's thread count)."""
    case = catalog.LINEAR_CROSS_ENTROPY.case("lce", catalog.linear_cross_entropy)
    weights = probes.draw_weights(case, 0, CPU)
    for r in range(3):
        draw = probes.draw_inputs(case, 0, r, CPU)

        def grads(fn, draw=draw):
            x = draw.working["x"].clone().requires_grad_()
            w = weights.working["w"].clone().requires_grad_()
            return torch.autograd.grad(fn(x, w, draw.working["labels"]), [x, w])

        ref = grads(catalog.linear_cross_entropy)
        for acc, changed in ((torch.float32, (0.0, 0.001)), (torch.bfloat16, (0.5, 0.8))):
            gx, gw = grads(functools.partial(catalog.fused_linear_cross_entropy, accum_dtype=acc))
            dx = (gx.double() - ref[0].double()).abs()
            assert float((dx != 0).double().mean()) <= 0.001 and float(dx.max()) <= 2**-8 * float(ref[0].abs().max())
            d = gw.double() - ref[1].double()
            assert changed[0] <= float((d != 0).double().mean()) <= changed[1], acc
            if acc == torch.bfloat16:
                assert float((d * ref[1].double().sign()).mean()) < 0


# --- the quick subset (default suite) -------------------------------------------------------


def test_quick_negative_detected_by_every_gate():
    control = _by_name("rms_norm_backward_overwrites_shared_grad")
    cert = _certify(control)
    assert cert.verdict is Verdict.FAIL
    for gate in DETECTING_GATES[control.name]:
        assert cert.gates[gate] is Verdict.FAIL, gate
    bias = {b.output: b.verdict for b in cert.bias}
    assert bias == {"output": Verdict.PASS, "grad_x": Verdict.FAIL}  # the forward is right; the defect is in dX


def test_quick_positive_passes():
    cert = _certify(_by_name("rms_norm_backward_out_of_place"))
    assert cert.verdict is Verdict.PASS, kcert.report.text.failure_message(cert)


# --- the whole family (-m controls) ---------------------------------------------------------


@pytest.mark.controls
def test_all_backward_controls():
    failures = []
    for control in _controls():
        cert = _certify(control)
        failures += control_bar_failures(control, cert)
        for gate in DETECTING_GATES.get(control.name, ()) if control.kind == "negative" else ():
            if cert.gates[gate] is not Verdict.FAIL:
                failures.append(f"negative {control.name}: {gate} gate {cert.gates[gate].value}, expected FAIL")
    assert not failures, "\n".join(failures)
