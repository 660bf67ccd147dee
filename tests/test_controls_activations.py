"""Controls of the activation, GEMM and loss families (kcert.controls.activations).

Default suite: the quick controls at <= 256 replicates, structural checks and catalogue checks.
``-m controls``: every control of these families at its declared replicates, against the bar.
"""

import math

import pytest
import torch
from sample_kernels import assert_meets_bar

import kcert
from kcert import Verdict
from kcert.catalog import activations as act
from kcert.catalog import linear as lin
from kcert.catalog import losses as los
from kcert.controls import activations as module
from kcert.controls.registry import all_controls
from kcert.report.text import failure_message

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

FAMILIES = ("activation", "gemm", "loss")
NEGATIVE_SOURCES = {
    "gelu_erf_instead_of_tanh": "transformers PR #29402",
    "addmm_bias_bf16_after_splitk": "pytorch PR #180875",
    "splitk_partials_bf16": "pytorch PR #153095",
    "silu_one_minus_sigmoid_bf16": "tiny-llm PR #164",
    "grad_accum_loss_per_microbatch": "transformers #34191",
}
# The gate that must see each quick negative (at the quick replicate count).
QUICK_DETECTED_BY = {
    "gelu_erf_instead_of_tanh": "algebra",
    "silu_one_minus_sigmoid_bf16": "bias",
}


def family_controls():
    return [c for c in all_controls() if c.family in FAMILIES and c.build.__module__ == module.__name__]


def by_name(name):
    return next(c for c in family_controls() if c.name == name)


# --- structure ------------------------------------------------------------------------------------


def test_family_has_five_negatives_and_eight_positives():
    controls = family_controls()
    assert sorted(c.name for c in controls if c.kind == "negative") == sorted(NEGATIVE_SOURCES)
    assert sum(c.kind == "positive" for c in controls) == 8
    quick = [c for c in controls if c.quick]
    assert sum(c.kind == "negative" for c in quick) == 2 and sum(c.kind == "positive" for c in quick) == 1


def test_negative_sources_are_the_public_reports():
    for c in family_controls():
        if c.kind == "negative":
            assert c.source == NEGATIVE_SOURCES[c.name]


@pytest.mark.parametrize("control", family_controls(), ids=lambda c: c.name)
def test_control_is_documented_and_builds(control):
    lines = control.doc.strip().splitlines()
    assert lines[0].strip() and not lines[0].startswith("Source")  # a one-line summary first
    assert "Source:" in control.doc and control.source.strip()
    assert ("Math:" in control.doc and "Faithful:" in control.doc) if control.kind == "negative" \
        else "Benign:" in control.doc
    case = control.build()
    assert isinstance(case, kcert.Case)
    assert case.name == control.name
    assert control.replicates >= 256


def test_control_names_are_unique():
    names = [c.name for c in all_controls()]
    assert len(names) == len(set(names))


# --- catalogue ------------------------------------------------------------------------------------


def test_catalogue_operators_build_cases():
    for op in act.OPERATORS + lin.OPERATORS + los.OPERATORS:
        case = op.case(f"{op.name}_self", op.reference)
        assert case.inputs and op.family in FAMILIES


def test_grad_accum_loss_is_the_token_mean_of_the_step():
    labels = los.padded_labels(3, 2, 16, 32, lengths=[16, 3, 9, 1, 12, 5])
    logits = torch.randn(3, 2, 16, 32, dtype=torch.float64)
    step = los.grad_accum_loss(logits, labels)
    flat = los.cross_entropy(logits.reshape(-1, 32), labels.reshape(-1))
    tokens = los.token_losses(logits, labels)
    # the references upcast to float32, as transformers does
    assert torch.allclose(step, flat, rtol=1e-6)
    assert torch.allclose(tokens.sum() / (labels != los.IGNORE_INDEX).sum(), flat, rtol=1e-6)
    per_micro = module.grad_accum_mean_of_means(logits, labels)
    assert not torch.allclose(per_micro, flat, rtol=1e-3)  # unequal token counts: the defect shows


def test_softcap_and_z_loss_match_their_definition():
    labels = los.padded_labels(1, 2, 8, 16, lengths=[8, 5])[0]
    logits = 40 * torch.randn(2, 8, 16, dtype=torch.float64)
    got = los.cross_entropy(logits, labels, softcap=30.0, z_loss=1e-3)
    z = 30.0 * torch.tanh(logits / 30.0)
    valid = labels != los.IGNORE_INDEX
    lse = torch.logsumexp(z, -1)
    target = z.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    want = ((lse - target)[valid].mean() + 1e-3 * lse[valid].square().mean())
    assert torch.allclose(got.double(), want, rtol=1e-6)
    chunked = module.chunked_token_losses(logits, labels, chunk=5, softcap=30.0, z_loss=1e-3)
    assert torch.allclose(chunked.sum().double() / valid.sum(), want, rtol=1e-6)


def test_splitk_with_float32_workspace_is_one_rounding():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 256, generator=g).bfloat16()
    w = (0.05 * torch.randn(32, 256, generator=g)).bfloat16()
    b = (0.05 * torch.randn(32, generator=g)).bfloat16()
    exact = torch.nn.functional.linear(x.double(), w.double(), b.double())
    one = lin.splitk_matmul(x, w, b, splits=4)
    assert one.dtype == torch.bfloat16
    assert torch.all((one.double() - exact).abs() <= exact.abs() * 2.0 ** -8 + 1e-6)  # one rounding
    with pytest.raises(ValueError):
        lin.splitk_matmul(x, w, splits=3)


def test_input_range_buckets_cover_signs_and_binades():
    spec = act.input_range_buckets("x", -2, 2)
    x = torch.tensor([0.0, 0.1, 0.5, 1.0, 3.0, 100.0, -0.1, -1.5, -100.0])
    labels = spec.fn({"x": x}, {}, x)
    assert labels.tolist() == [0, 0, 1, 2, 3, 4, 5, 7, 9]
    assert spec.count == 10
    assert act.input_range_label(7, -2, 2) == "|x| in [2^0, 2^1), sign -"


def test_silu_defect_flushes_the_negative_tail_to_zero():
    x = torch.tensor([-8.0, -7.0, -2.0, 3.0]).bfloat16()
    out = module.silu_one_minus_sigmoid(x)
    assert out[0] == 0 and out[1] == 0  # sigmoid(|x|) rounds to 1 in bf16
    assert act.silu(x)[0] < 0


# --- quick controls (default suite) ------------------------------------------------------------------


def _certify(control, replicates):
    return kcert.certify(control.build(), replicates=replicates, seed=0)


@pytest.mark.parametrize("control", [c for c in family_controls() if c.quick], ids=lambda c: c.name)
def test_quick_control(control):
    cert = _certify(control, min(control.replicates, 256))
    assert_meets_bar(control, cert)
    if control.kind == "negative":
        gate = QUICK_DETECTED_BY[control.name]
        assert cert.gates[gate] in (Verdict.WARN, Verdict.FAIL), failure_message(cert)


# --- the whole family (-m controls) ---------------------------------------------------------------


@pytest.mark.controls
@pytest.mark.parametrize("control", family_controls(), ids=lambda c: c.name)
def test_control_meets_the_bar(control):
    cert = _certify(control, control.replicates)
    assert_meets_bar(control, cert)
    assert math.isfinite(cert.provenance.wall_time_s)
