"""The norm controls (family ``norm``): structure, the quick subset, and the whole family.

Default suite: cheap structural checks and the controls marked ``quick=True`` (two negatives
detected by different gates, one positive). ``-m controls``: every norm control at its declared
replicates, against the bar (negatives detected, positives not FAIL, ``expect=`` exact).
"""


import pytest
import torch
from sample_kernels import assert_meets_bar, control_bar_failures

import kcert
from kcert.catalog import norms as catalog
from kcert.controls import norms as controls_module  # noqa: F401 - registers the family
from kcert.controls.registry import all_controls
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

SOURCES = {
    "gemma_one_plus_w_bf16": "transformers PR #29402, vllm #3653, TransformerEngine PR #1690",
    "llama_kernel_on_gemma_weights": "Liger-Kernel #74",
    "mean_square_in_bf16_outliers": "sglang #27540",
    "bf16_truncation_not_rne": "ROCm/aiter #1978",
    "eps_added_to_rms": "gpt-neox #1342",
    "divide_by_rsqrt": "llm-foundry #371",
    "layernorm_stats_low_precision": "pytorch #66707",
    "hf_double_rounding_te1132": "TransformerEngine #1132",
}

# Which gate must detect each quick negative (the others may or may not).
QUICK_DETECTING_GATE = {
    "gemma_one_plus_w_bf16": "bias",
    "eps_added_to_rms": "algebra",
}


def _norm_controls():
    return [c for c in all_controls() if c.family == "norm"]


def _certify(control):
    return kcert.certify(control.build(), replicates=control.replicates, seed=0)


# --- structure (cheap) ---------------------------------------------------------------------


def test_family_counts_and_sources():
    controls = _norm_controls()
    negatives = {c.name: c for c in controls if c.kind == "negative"}
    positives = [c for c in controls if c.kind == "positive"]
    assert set(negatives) == set(SOURCES)
    assert len(positives) == 7
    for name, source in SOURCES.items():
        assert negatives[name].source == source


def test_names_unique_and_docstrings():
    controls = _norm_controls()
    names = [c.name for c in controls]
    assert len(names) == len(set(names))
    for c in controls:
        doc = c.doc.strip()
        lines = doc.splitlines()
        assert lines and lines[0].strip(), c.name
        assert "Source:" in doc, c.name
        assert "Faithful:" in doc or "Why benign:" in doc, c.name
        assert c.source.strip(), c.name
        assert c.replicates >= 256, c.name
        assert c.expect in (None, "PASS", "WARN", "FAIL"), c.name


def test_cases_build_and_run_once():
    for c in _norm_controls():
        case = c.build()
        assert isinstance(case, kcert.Case)
        assert case.name == c.name
        # one draw through ref and prod: shapes and dtypes agree with the contract
        from kcert.execution import probes

        draw = probes.draw_inputs(case, 0, 0, torch.device("cpu"))
        weights = probes.draw_weights(case, 0, torch.device("cpu"))
        kwargs = {**draw.working, **weights.working}
        ref, prod = case.ref(**kwargs), case.prod(**kwargs)
        assert ref.shape == prod.shape == draw.working["x"].shape, c.name
        assert ref.dtype == prod.dtype == case.dtype, c.name


def test_quick_subset():
    quick = [c for c in _norm_controls() if c.quick]
    assert sorted(c.name for c in quick if c.kind == "negative") == sorted(QUICK_DETECTING_GATE)
    assert [c.name for c in quick if c.kind == "positive"] == ["gemma_rms_norm_fused_rewrite"]


def test_catalogue_contracts():
    for op in catalog.OPERATORS:
        assert op.family == "norm"
        assert isinstance(op.buckets, kcert.Axes) and op.buckets.axes == (-1,)
        inputs = op.inputs()
        assert inputs["x"].shape == catalog.SHAPE
    channels = catalog.outlier_channel_indices(catalog.HIDDEN)
    assert len(channels) == catalog.OUTLIERS and len(set(channels)) == catalog.OUTLIERS
    g = torch.Generator().manual_seed(0)
    x = catalog.hidden_states(outlier_scale=100.0).sample(g, torch.device("cpu"), torch.float32)
    big = x[..., channels].abs().mean()
    rest = x[..., [i for i in range(catalog.HIDDEN) if i not in channels]].abs().mean()
    assert big > 50 * rest


def test_truncation_is_bit_exact():
    from kcert.controls.norms import _truncate_bf16

    g = torch.Generator().manual_seed(0)
    y = torch.randn(100_000, generator=g) * torch.exp(3 * torch.randn(100_000, generator=g))
    y = torch.cat([y, torch.tensor([1.0, -1.0, 0.99999994, 1.9999999, -1.9999999, 2.0, 0.0, 1e-39, 3e38])])
    bits = y.view(torch.int32)
    expected = ((bits >> 16) << 16).view(torch.float32).to(torch.bfloat16)
    assert torch.equal(_truncate_bf16(y).float(), expected.float())


def test_bf16_mean_square_drops_ordinary_squares_next_to_outliers():
    """The mechanism of sglang #27540 as modelled: with massive outlier channels the bf16 reduction
    loses the ordinary squares (a one-sided error), the float32 one does not."""
    from kcert.controls.norms import _thread_partials, _tree_sum

    g = torch.Generator().manual_seed(0)
    x = catalog.hidden_states(outlier_scale=catalog.MASSIVE_OUTLIER_SCALE).sample(g, torch.device("cpu"), torch.float32)
    x = x.to(torch.bfloat16)
    exact = x.double().square().sum(-1)
    low = _tree_sum(_thread_partials(x * x)).squeeze(-1).double()
    high = _tree_sum(_thread_partials(x.float().square())).squeeze(-1).double()
    assert ((low - exact) / exact).mean() < -5e-4  # systematic loss, several times 2^-12
    assert ((high - exact) / exact).abs().max() < 1e-6


# --- the quick subset (default suite) -------------------------------------------------------


@pytest.mark.parametrize("name", sorted(QUICK_DETECTING_GATE))
def test_quick_negative_detected(name):
    control = next(c for c in _norm_controls() if c.name == name)
    cert = _certify(control)
    assert_meets_bar(control, cert)
    assert cert.gates[QUICK_DETECTING_GATE[name]] is Verdict.FAIL, kcert.report.text.failure_message(cert)


def test_quick_positive_not_fail():
    control = next(c for c in _norm_controls() if c.quick and c.kind == "positive")
    assert_meets_bar(control, _certify(control))


# --- the whole family (-m controls) ---------------------------------------------------------


@pytest.mark.controls
def test_all_norm_controls():
    failures = []
    for control in _norm_controls():
        failures += control_bar_failures(control, _certify(control))
    assert not failures, "\n".join(failures)
