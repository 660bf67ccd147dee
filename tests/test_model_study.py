"""The model study's zoo (benchmarks/model_zoo.py): every architecture builds and runs, every defect
reproduces at its module (prod's module output, or for a backward-only defect its input gradient, differs
from ref's on the same recorded inputs) and every pair keeps ref's parameters; the study's bar applied to
hand-made records; one small ``kcert.certify_model`` run on the cheapest defect when the engine is there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="the model zoo needs the hf extra: pip install 'kcert[hf]'")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import model_study  # noqa: E402
import model_zoo  # noqa: E402


@pytest.mark.parametrize("arch", model_zoo.ARCHS)
def test_each_architecture_builds_and_runs(arch):
    model = model_zoo.build(arch)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size <= 256
    batch = model_zoo.draw_batch(arch)
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (model_zoo.BATCH, model_zoo.SEQ, model_zoo.VOCAB)
    assert bool(torch.isfinite(logits).all())
    # the weights are seeded: the same seed gives the same model, another seed another one
    again, other = model_zoo.build(arch, 0), model_zoo.build(arch, 1)
    name, p = next(iter(model.named_parameters()))
    assert torch.equal(p, dict(again.named_parameters())[name])
    assert not torch.equal(p, dict(other.named_parameters())[name])


def test_the_study_has_enough_pairs():
    defects = [p for p in model_zoo.PAIRS if p.kind == "defect"]
    benign = [p for p in model_zoo.PAIRS if p.kind == "benign"]
    assert len(defects) >= 8 and len({p.arch for p in defects}) >= 3 and len(benign) >= 5
    assert len({p.name for p in model_zoo.PAIRS}) == len(model_zoo.PAIRS)
    assert {p.half for p in model_zoo.PAIRS} == {"tuning", "validation"}


@pytest.mark.parametrize("name", [p.name for p in model_zoo.PAIRS if p.kind == "defect"])
def test_each_defect_reproduces_at_its_module(name):
    p = model_zoo.pair(name)
    ref, prod = model_zoo.models(p)
    _assert_same_parameters(ref, prod)
    diff = model_zoo.module_difference(p, ref, prod, model_zoo.draw_batch(p.arch))
    if p.backward_only:
        assert diff["forward"] == 0.0 and diff["backward"] > 0.0
    else:
        assert diff["forward"] > 0.0


@pytest.mark.parametrize("name", [p.name for p in model_zoo.PAIRS if p.kind == "benign"])
def test_each_benign_pair_keeps_refs_parameters(name):
    # the patches are applied, not run: a compiled module compiles at its first call, not here
    _assert_same_parameters(*model_zoo.models(model_zoo.pair(name)))


def _assert_same_parameters(ref, prod):
    ref_params, prod_params = dict(ref.named_parameters()), dict(prod.named_parameters())
    assert set(ref_params) == set(prod_params)
    assert all(torch.equal(ref_params[k], prod_params[k]) for k in ref_params)


def _record(kind, rows, injected=None, backward_only=False, first=None):
    return {"kind": kind, "injected": injected, "backward_only": backward_only, "first_failure": first,
            "rows": [{"module": m, "direction": d, "verdict": v} for m, d, v in rows]}


def test_the_bar_is_applied_as_stated():
    at = "model.layers.0.mlp.act_fn"
    good = _record("defect", [(at, "forward", "FAIL"), ("model.layers.0.mlp", "forward", "FAIL"),
                              ("model.layers.1.mlp", "forward", "PASS"), ("", "end to end", "FAIL")],
                   at, first={"module": at, "direction": "forward"})
    assert model_study.judge(good)["met"]
    stray = _record("defect", [(at, "forward", "FAIL"), ("model.layers.1.mlp", "forward", "FAIL")],
                    at, first={"module": at, "direction": "forward"})
    assert not model_study.judge(stray)["met"]
    elsewhere = _record("defect", [("model.layers.1.mlp", "forward", "FAIL")], at,
                        first={"module": "model.layers.1.mlp", "direction": "forward"})
    assert not model_study.judge(elsewhere)["met"]
    fwd_of_backward_only = _record("defect", [(at, "forward", "FAIL"), (at, "backward", "FAIL")], at, True,
                                   first={"module": at, "direction": "forward"})
    assert not model_study.judge(fwd_of_backward_only)["met"]
    rows = [(f"m{i}", "forward", "PASS") for i in range(40)]
    assert model_study.judge(_record("benign", rows[:38] + [("a", "forward", "WARN")] * 2))["met"]  # 2/40 = 5 %
    assert not model_study.judge(_record("benign", rows[:37] + [("a", "forward", "WARN")] * 3))["met"]
    assert not model_study.judge(_record("benign", rows[:39] + [("a", "forward", "FAIL")]))["met"]


def test_certify_model_localizes_the_cheapest_defect():
    import kcert

    p = model_zoo.pair("gemma_exact_gelu")
    ref, prod = model_zoo.models(p)
    mods = kcert.Modules(names=("model.layers.1.mlp", "model.layers.1.mlp.act_fn"))
    cert = kcert.certify_model(ref, prod, model_zoo.inputs(p.arch), modules=mods, backward=False,
                               end_to_end=False, replicates=32, max_replicates=32, seed=0)
    assert {r.module for r in cert.rows} == {"model.layers.1.mlp", p.module}
    assert cert.first_failure is not None and cert.first_failure.module == p.module
    assert all(r.module in (p.module, "model.layers.1.mlp") for r in cert.failures)
