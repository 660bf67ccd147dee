"""The RoPE controls (family "rope") and the catalogue pieces they rest on.

Default suite: structure of every control, the catalogue's identities (cheap), and the quick
controls certified at their declared replicates. ``-m controls``: every RoPE control.
"""

import math

import pytest
import torch
from sample_kernels import assert_meets_bar, control_bar_failures

import kcert
from kcert.catalog import Operator
from kcert.catalog import rope as R
from kcert.controls import rope as C
from kcert.controls.registry import all_controls
from kcert.execution.realmode import run_real

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

V = kcert.Verdict

NEGATIVE_SOURCES = {
    "neox_rotation_on_interleaved_weights": "transformers #25199",
    "angles_bf16_autocast": "transformers PR #29285",
    "cos_sin_cache_bf16": "gpt-neox #1003",
    "llama3_unscaled_inv_freq": "transformers PR #32330",
    "yarn_attention_factor_wrong": "sglang PR #22711",
    "inv_freq_rounded_bf16": "sglang-jax #1472",
}

# The gates each quick negative must be caught by (and the one that must not, where the defect is
# not an algebraic one: autocast is off in real mode, so ref and prod are the same real function).
QUICK_GATES = {
    "angles_bf16_autocast": {"algebra": V.PASS, "bias": V.FAIL, "variance": V.FAIL},
    "llama3_unscaled_inv_freq": {"algebra": V.FAIL, "bias": V.FAIL, "variance": V.FAIL},
}


def rope_controls():
    return [c for c in all_controls() if c.family == "rope"]


def by_name(name):
    return next(c for c in rope_controls() if c.name == name)


# --- structure --------------------------------------------------------------------------------


def test_family_has_six_negatives_and_six_positives_with_unique_names():
    controls = rope_controls()
    kinds = [c.kind for c in controls]
    assert kinds.count("negative") == 6 and kinds.count("positive") == 6
    names = [c.name for c in controls]
    assert len(set(names)) == len(names)
    assert {c.name for c in controls if c.kind == "negative"} == set(NEGATIVE_SOURCES)


def test_negatives_cite_their_public_source():
    for c in rope_controls():
        if c.kind == "negative":
            assert c.source == NEGATIVE_SOURCES[c.name]
            assert c.source in c.doc


@pytest.mark.parametrize("control", rope_controls(), ids=lambda c: c.name)
def test_control_docstring_and_case(control):
    lines = control.doc.strip().splitlines()
    assert lines[0].strip() and lines[1].strip() == "", "first line: a one-line summary, then a blank line"
    assert "Source:" in control.doc and "Faithful:" in control.doc
    assert control.source.strip()
    case = control.build()
    assert isinstance(case, kcert.Case)
    assert case.name == control.name
    assert set(case.inputs) == {"q", "k", "position_ids"}
    assert isinstance(case.buckets, kcert.Labels)
    assert case.dtype is torch.bfloat16
    assert control.replicates >= 256


def test_quick_subset_is_two_negatives_and_one_positive():
    quick = [c for c in rope_controls() if c.quick]
    assert sorted(c.kind for c in quick) == ["negative", "negative", "positive"]
    assert {c.name for c in quick if c.kind == "negative"} == set(QUICK_GATES)


def test_contracts_reach_beyond_4096_and_beyond_the_original_context():
    for c in rope_controls():
        pos = c.build().inputs["position_ids"]
        assert isinstance(pos, kcert.Integers) and pos.low == 0
    highs = {c.name: c.build().inputs["position_ids"].high for c in rope_controls()}
    assert highs["llama3_unscaled_inv_freq"] == 131072 > R.LLAMA31.original_context
    assert highs["yarn_attention_factor_wrong"] == 262144 > R.YARN16.original_context
    assert highs["dynamic_ntk_frequency_scaling"] == 16384 > R.LLAMA2_DYNAMIC.original_context
    assert highs["long_positions_fused_float32"] == 131072
    assert sum(h > 4096 for h in highs.values()) >= 8


def test_operators_are_catalogue_entries():
    for op in R.OPERATORS.values():
        assert isinstance(op, Operator) and op.family == "rope" and op.triggers
        probes = op.inputs()
        assert set(probes) == {"q", "k", "position_ids"}


# --- catalogue identities (real mode, float64) ----------------------------------------------


def _draw(head_dim=128, high=131072, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, 16, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 16, head_dim, generator=g, dtype=torch.float64)
    pos = torch.randint(0, high, (1, 16), generator=g)
    return q, k, pos


def _real(fn, *args, **kw):
    return run_real(lambda: fn(*args, **kw), dtype=torch.float64)


def test_interleaved_kernel_on_permuted_layout_is_the_neox_rotation():
    q, k, pos = _draw(high=4096)
    ref = _real(R.rope_neox, q, k, pos, frequencies=R.LLAMA2.frequencies)
    prod = _real(C.rope_interleaved_on_neox_layout, q, k, pos, frequencies=R.LLAMA2.frequencies)
    for a, b in zip(ref, prod):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    x = torch.arange(2 * 8.0).reshape(2, 8)
    assert torch.equal(R.neox_to_interleaved(R.interleaved_to_neox(x)), x)
    # the missing permutation of transformers #25199 is not the identity
    wrong = _real(R.rope_neox, q, k, pos, frequencies=R.LLAMA2.frequencies)
    right = _real(R.rope_interleaved, q, k, pos, frequencies=R.LLAMA2.frequencies)
    assert (wrong[0] - right[0]).abs().max() > 0.1


def test_rotations_keep_the_norm_of_every_pair():
    q, k, pos = _draw()
    for kernel in (R.rope_neox, C.rope_neox_complex):
        out = _real(kernel, q, k, pos, frequencies=R.LLAMA31.frequencies)
        torch.testing.assert_close(out[0].norm(dim=-1), q.norm(dim=-1), rtol=1e-12, atol=0)


def test_llama3_rules_agree_and_the_defect_drops_the_scaling():
    pos = torch.zeros(1, 1, dtype=torch.int64)
    kw = R.LLAMA31.frequencies.keywords
    bands = _real(R.llama3_frequencies, pos, **kw)[0]
    clamped = _real(C.llama3_frequencies_clamped, pos, **kw)[0]
    torch.testing.assert_close(bands, clamped, rtol=1e-14, atol=0)
    default = _real(R.default_inv_freq, kw["dim"], kw["base"])
    unscaled = _real(C.llama3_frequencies_unscaled, pos, **kw)[0]
    assert torch.equal(unscaled, default)
    assert torch.equal(bands[:10], default[:10])  # short wavelengths kept
    torch.testing.assert_close(bands[-10:], default[-10:] / 8, rtol=1e-15, atol=0)  # long ones / factor


def test_dynamic_ntk_two_ways_agree():
    pos = torch.tensor([[16383]])
    kw = R.LLAMA2_DYNAMIC.frequencies.keywords
    a = _real(R.dynamic_ntk_frequencies, pos, **kw)[0]
    b = _real(C.dynamic_ntk_frequencies_scaled, pos, **kw)[0]
    torch.testing.assert_close(a, b, rtol=1e-13, atol=0)
    inside = _real(R.dynamic_ntk_frequencies, torch.tensor([[4095]]), **kw)[0]
    assert torch.equal(inside, _real(R.default_inv_freq, kw["dim"], kw["base"]))


def test_yarn_attention_factor_forms():
    assert R.yarn_attention_factor(16.0, mscale=1.0, mscale_all_dim=1.0) == 1.0
    assert R.yarn_attention_factor(16.0) == pytest.approx(0.1 * math.log(16) + 1)
    assert R.yarn_attention_factor(40.0, mscale=1.0, mscale_all_dim=0.707) == pytest.approx(
        (0.1 * math.log(40) + 1) / (0.0707 * math.log(40) + 1))
    pos = torch.zeros(1, 1, dtype=torch.int64)
    assert R.YARN16.frequencies(pos)[1] == 1.0
    wrong = C.yarn_frequencies_default_mscale(pos, **R.YARN16.frequencies.keywords)[1]
    assert wrong == pytest.approx(1.2773, abs=1e-4)


def test_position_dim_buckets_label_block_and_dim():
    spec = R.position_dim_buckets((0, 1024, 4096, 8192), head_dim=4)
    pos = torch.tensor([[0, 1023, 1024, 5000, 9000]])
    labels = spec.fn({"position_ids": pos}, {}, None)
    assert labels.shape == (1, 1, 5, 4)
    assert labels[0, 0, :, 0].tolist() == [0, 0, 4, 8, 8]
    assert labels[0, 0, 3].tolist() == [8, 9, 10, 11]
    assert spec.count == 12
    assert R.block_edges(8192) == (0, 1024, 2048, 4096, 8192)


def test_cache_builds_its_own_table_in_real_mode():
    cache = C._ModelDtypeCache(R.NEOX_ROTARY_DIM, R.NEOX_BASE, R.NEOX_CONTEXT)
    pos = torch.tensor([[1857]])
    bf16_cos, _ = cache.lookup(pos)
    assert bf16_cos.dtype is torch.bfloat16
    exact = _real(cache.lookup, pos)[0]
    assert exact.dtype is torch.float64
    angle = 1857 * R.NEOX_BASE ** (-2 / R.NEOX_ROTARY_DIM)
    assert float(exact[0, 0, 1]) == pytest.approx(math.cos(angle), abs=1e-12)
    assert abs(float(bf16_cos[0, 0, 1]) - math.cos(angle)) > 0.1  # the gpt-neox #1003 error


# --- certification --------------------------------------------------------------------------


def _certify(control):
    return kcert.certify(control.build(), replicates=control.replicates, seed=0)


@pytest.mark.parametrize("control", [c for c in rope_controls() if c.quick], ids=lambda c: c.name)
def test_quick_controls(control):
    cert = _certify(control)
    assert_meets_bar(control, cert)
    if control.kind == "negative":
        for gate, verdict in QUICK_GATES[control.name].items():
            assert cert.gates[gate] is verdict, (gate, cert.gates)


@pytest.mark.controls
def test_every_rope_control():
    failures = []
    for control in rope_controls():
        failures += control_bar_failures(control, _certify(control))
    assert not failures, "\n".join(failures)
