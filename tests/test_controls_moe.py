"""The moe control family (src/kcert/controls/moe.py) and its catalogue (src/kcert/catalog/moe.py).

Default suite: structural checks, reference-semantics checks of the catalogue and the quick
controls (2 negatives, 1 positive) at their declared replicates. ``-m controls``: every control of
the family at its declared replicates against the bar (negatives detected, positives not FAIL,
``expect`` exact).
"""

from __future__ import annotations

import pytest
import torch
from sample_kernels import assert_meets_bar

import kcert
from kcert.catalog import moe as cat
from kcert.controls import all_controls
from kcert.execution import probes
from kcert.execution.runner import Runner
from kcert.report.text import failure_message

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

FAMILY = [c for c in all_controls() if c.family == "moe"]
BY_NAME = {c.name: c for c in FAMILY}
QUICK = [c for c in FAMILY if c.quick]
SOURCES = {
    "selection_bias_in_combine_weights": "vllm PR #12002",
    "topk_not_renormalised": "torchtitan #1448",
    "raw_logits_as_combine_weights": "sglang PR #35160",
    "router_logits_bf16_flips_ties": "vllm PR #14027",
}
# Which gates must see each negative (FAIL), and which must not (a precision defect computes the
# same real function: the algebra gate must PASS it).
DETECTED_BY = {
    "selection_bias_in_combine_weights": {"algebra", "bias", "variance"},
    "topk_not_renormalised": {"algebra", "bias", "variance"},
    "raw_logits_as_combine_weights": {"algebra", "bias", "variance"},
    "router_logits_bf16_flips_ties": {"bias", "variance"},
}
NOT_DETECTED_BY = {"router_logits_bf16_flips_ties": {"algebra"}}


def _ids(controls):
    return [c.name for c in controls]


def _check(control, cert):
    """The bar for one control; returns a message on failure."""
    gates = {g: v.value for g, v in cert.gates.items()}
    where = f"{control.name}: overall {cert.verdict.value}, gates {gates}\n{failure_message(cert)}"
    assert_meets_bar(control, cert)
    if control.kind == "negative":
        for gate in DETECTED_BY.get(control.name, ()):
            assert cert.gates[gate] is kcert.Verdict.FAIL, where
        for gate in NOT_DETECTED_BY.get(control.name, ()):
            assert cert.gates[gate] is kcert.Verdict.PASS, where


# --- structure ---------------------------------------------------------------------------------


def test_family_size_and_quick_subset():
    kinds = [c.kind for c in FAMILY]
    assert kinds.count("negative") == 4 and kinds.count("positive") == 6
    assert [c.kind for c in QUICK].count("negative") == 2
    assert [c.kind for c in QUICK].count("positive") == 1
    assert set(SOURCES) == {c.name for c in FAMILY if c.kind == "negative"}


def test_names_unique_and_match_cases():
    names = _ids(FAMILY)
    assert len(names) == len(set(names))
    for c in FAMILY:
        case = c.build()
        assert isinstance(case, kcert.Case)
        assert case.name == c.name


@pytest.mark.parametrize("control", FAMILY, ids=_ids(FAMILY))
def test_docstring_and_source(control):
    lines = control.doc.strip().splitlines()
    assert lines[0].strip() and len(lines[0]) <= 110, "first line: a one-line summary"
    assert "Source:" in control.doc
    assert control.source.strip()
    if control.kind == "negative":
        assert SOURCES[control.name] in control.source
        assert "Math:" in control.doc and "Faithful:" in control.doc
    else:
        assert "Why " in control.doc and "Faithful:" in control.doc
    assert control.replicates >= 256


@pytest.mark.parametrize("control", FAMILY, ids=_ids(FAMILY))
def test_one_replicate_runs(control):
    """Every case runs one replicate (ref, prod, oracle, buckets) with matching shapes."""
    runner = Runner(control.build(), seed=0)
    runner.step(0)
    assert runner.oracle_unavailable is None
    acc = runner.accumulators[0]
    assert acc.moments["raw"].size >= 8  # one bucket per expert
    assert acc.e_prod[0] >= 0 and acc.e_ref[0] >= 0


# --- reference semantics (catalogue) -------------------------------------------------------------


def _draw(op, **contract):
    case = op.case("t", op.reference, **contract)
    w = probes.draw_weights(case, 0, torch.device("cpu"))
    d = probes.draw_inputs(case, 0, 0, torch.device("cpu"))
    return {**d.working, **w.working}


def test_deepseek_router_bias_selects_only_and_renormalises():
    cfg = cat.DEEPSEEK_V3
    kw = _draw(cat.DEEPSEEK_ROUTER, **cfg)
    dense = cat.DEEPSEEK_ROUTER.reference(**kw)
    assert dense.dtype == torch.float32 and dense.shape == (256, cfg["n_experts"])
    assert torch.all((dense > 0).sum(-1) == cfg["top_k"])
    torch.testing.assert_close(dense.sum(-1), torch.full((256,), cfg["scaling"]), rtol=1e-6, atol=0)
    scores = torch.sigmoid(cat.router_logits_fp32(kw["x"], kw["w_gate"]))
    chosen = dense > 0
    # combine weights are proportional to the unbiased scores of the selected experts
    ratio = torch.where(chosen, dense / scores, torch.zeros(()))
    per_row = ratio.sum(-1) / cfg["top_k"]
    torch.testing.assert_close(ratio[chosen], per_row.unsqueeze(-1).expand_as(ratio)[chosen], rtol=1e-5, atol=0)
    # ... while the selection follows the biased scores: the bias changes some selections
    unbiased = cat.deepseek_router(kw["x"], kw["w_gate"], None, **cfg)
    assert bool(((unbiased > 0) != chosen).any())
    # group limit: selected experts come from at most topk_group groups
    groups = chosen.reshape(256, cfg["n_group"], -1).any(-1).sum(-1)
    assert int(groups.max()) <= cfg["topk_group"]


def test_softmax_topk_router_and_its_rewrite_agree_on_exact_ties():
    logits = torch.tensor([[2.0, 1.0, 1.0, 1.0, -1.0, 0.5]], dtype=torch.bfloat16).repeat(4, 1)
    ref = cat.softmax_topk_router(logits, top_k=2, norm_topk_prob=True)
    assert ref.dtype == torch.bfloat16
    torch.testing.assert_close(ref.float().sum(-1), torch.ones(4), rtol=2**-8, atol=0)
    # torch.topk resolves exact ties the same way on bf16 logits and on their float32/float64 images
    for dtype in (torch.float32, torch.float64):
        assert torch.equal(torch.topk(logits, 3).indices, torch.topk(logits.to(dtype), 3).indices)


def test_mixtral_layer_matches_per_token_definition():
    kw = _draw(cat.MOE_LAYER, tokens=16)
    out = cat.MOE_LAYER.reference(**kw)
    assert out.dtype == torch.bfloat16 and out.shape == kw["x"].shape
    weights, idx = cat.mixtral_routing(kw["x"], kw["w_gate"], 2)
    assert idx.shape == (16, 2) and bool((idx[:, 0] != idx[:, 1]).all())
    f = {k: v.double() for k, v in kw.items()}
    expected = torch.zeros(16, out.shape[-1], dtype=torch.float64)
    for t in range(16):
        for s, e in enumerate(idx[t].tolist()):
            expected[t] += float(weights[t, s]) * cat.swiglu_expert(f["x"][t], f["w1"][e], f["w3"][e], f["w2"][e])
    torch.testing.assert_close(out.double(), expected, rtol=0.02, atol=0.02 * float(expected.abs().max()))
    labels = cat.top1_expert_labels(2)({"x": kw["x"]}, {"w_gate": kw["w_gate"]}, out)
    assert labels.shape == (16, 1) and torch.equal(labels[:, 0], idx[:, 0])


def test_boundary_tied_logits_places_a_near_tie_at_the_boundary():
    probe = cat.boundary_tied_logits(64, 16, 4, gap=1e-6)
    x = probe.sample(torch.Generator().manual_seed(0), torch.device("cpu"), torch.float32)
    v = x.double().sort(-1, descending=True).values
    gap = v[:, 3] - v[:, 4]
    assert bool((gap >= 0).all()) and bool((gap <= 1e-6 + 1e-6 * v[:, 3].abs()).all())


# --- quick controls (default suite) ---------------------------------------------------------------


@pytest.mark.parametrize("control", QUICK, ids=_ids(QUICK))
def test_quick_control(control):
    cert = kcert.certify(control.build(), replicates=control.replicates, seed=0)
    _check(control, cert)


# --- the whole family (-m controls) ------------------------------------------------------------------


@pytest.mark.controls
@pytest.mark.parametrize("control", FAMILY, ids=_ids(FAMILY))
def test_control_meets_the_bar(control):
    cert = kcert.certify(control.build(), replicates=control.replicates, seed=0)
    _check(control, cert)
