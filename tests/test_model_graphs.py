"""prods that are graphs rather than Python modules (docs/model.md, "Matching"): a TorchScript prod (scripted or
traced) and torch.export's module() are certified end to end, their modules that cannot run on their own SKIPPED
with the reason instead of stopping the run, and torch.export.unflatten's modules certified one by one; a
TorchScript ref is refused with the reason; a draw inside a TorchScript prod is still found; a prod compiled in
place (model.compile()) is seen as compiled whole."""

import copy

import pytest
import torch
from torch import nn

import kcert
from kcert.verdict import Verdict

INPUTS = {"input": kcert.Gaussian((4, 16))}
FAST = dict(dtype=torch.float32, replicates=32, max_replicates=32, peer_rules=False)


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).eval()


@pytest.mark.parametrize("how", ["script", "trace"])
def test_a_torchscript_prod_is_certified_end_to_end_and_its_modules_skipped(how):
    ref = mlp()
    copied = copy.deepcopy(ref)
    prod = torch.jit.script(copied) if how == "script" else torch.jit.trace(copied, torch.randn(4, 16))
    cert = kcert.certify_model(ref, prod, INPUTS, **FAST)
    end = cert.row("", "end to end")
    assert end.certificate is not None and end.verdict is not Verdict.FAIL
    modules = [r for r in cert.rows if r.module]
    assert modules and all(r.verdict is Verdict.SKIPPED for r in modules)
    assert all("TorchScript module" in r.skipped_reason for r in modules)
    assert cert.verdict is Verdict.WARN  # skipped rows: no module certified in isolation


def test_a_torch_export_module_is_certified_end_to_end():
    ref = mlp()
    exported = torch.export.export(copy.deepcopy(ref), (), {"input": torch.randn(4, 16)}).module()
    cert = kcert.certify_model(ref, exported, INPUTS, backward=False, **FAST)
    assert cert.row("", "end to end").verdict is not Verdict.FAIL
    assert "defines no forward" in cert.row("0").skipped_reason  # a holder of the graph's parameters
    assert ("ref", "1") in cert.unmatched  # the GELU is inlined into the root graph


def test_an_export_with_a_defect_fails_end_to_end():
    ref = mlp()
    bad = copy.deepcopy(ref)
    bad[1] = nn.GELU(approximate="tanh")
    exported = torch.export.export(bad, (), {"input": torch.randn(4, 16)}).module()
    cert = kcert.certify_model(ref, exported, INPUTS, backward=False, **FAST)
    assert cert.row("", "end to end").verdict is Verdict.FAIL


def test_an_unflattened_export_is_certified_module_by_module():
    ref = mlp()
    bad = copy.deepcopy(ref)
    bad[1] = nn.GELU(approximate="tanh")
    program = torch.export.export(bad, (), {"input": torch.randn(4, 16)})
    cert = kcert.certify_model(ref, torch.export.unflatten(program), INPUTS, backward=False, **FAST)
    assert cert.first_failure is not None and cert.first_failure.module == "1"  # the GELU, localized
    assert cert.row("0").verdict is not Verdict.FAIL and cert.row("2").verdict is not Verdict.FAIL


def test_a_torchscript_ref_is_refused():
    ref = mlp()
    with pytest.raises(kcert.CaseError, match="ref_model is a TorchScript module"):
        kcert.certify_model(torch.jit.script(ref), mlp(), INPUTS, **FAST)


def test_a_draw_inside_a_torchscript_prod_is_found():
    ref = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5)).eval()
    prod = torch.jit.script(copy.deepcopy(ref).train())
    with pytest.raises(kcert.CaseError, match=r"prod_model's forward draws random numbers \(in training mode\): "
                                              r"\(model\)"):
        kcert.certify_model(ref, prod, INPUTS, **FAST)


def test_a_prod_compiled_in_place_is_seen_as_compiled_whole():
    ref = mlp()
    prod = copy.deepcopy(ref)
    prod[1] = nn.GELU(approximate="tanh")  # a defect inside the compiled model
    prod.compile(backend="eager")  # in place: the module stays, its call is compiled
    torch._dynamo.reset()
    cert = kcert.certify_model(ref, prod, INPUTS, backward=False, **FAST)
    assert cert.provenance.get("prod_compiled_whole") is True
    end = cert.row("", "end to end")
    assert any("compile'd as a whole" in n for n in end.notes)
    assert cert.first_failure is not None and cert.first_failure.module == "1"  # localized in the eager module rows
    # without the end-to-end row prod's compiled call is never needed: the looks at its modules with hooks
    # (interfaces, random draws) run eagerly and compile nothing (hooks traced into the graph recompiled it)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    kcert.certify_model(ref, prod, INPUTS, backward=False, end_to_end=False, **FAST)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 0
