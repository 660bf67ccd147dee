"""Patches that reach ref (docs/model.md, "A patch that reaches ref too"): a module-level function, a class's forward
or a torch function replaced from elsewhere is found in ref's code on any device, named in the certificate's
warnings and provenance, and holds the verdict at WARN; unpatched models, HF's included, show nothing."""

import copy
import sys

import pytest
import torch
from torch import nn

import kcert
from kcert.model.patches import patched_functions
from model_fixtures import tiny


def double(x):
    return 2 * x


class Doubler(nn.Module):
    def forward(self, x):
        return double(x)


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.silu(self.lin(x))


def elsewhere(source: str, name: str):
    """A function defined in another module (a fused-kernel library's), as a patch brings one."""
    namespace = {"__name__": "fusedlib.ops", "torch": torch}
    exec(source, namespace)  # noqa: S102 - a fixed test source
    return namespace[name]


FUSED_DOUBLE = elsewhere("def fused_double(x):\n    return x + x\n", "fused_double")


def test_a_patched_module_function_is_found():
    model = nn.Sequential(nn.Linear(8, 8), Doubler())
    assert patched_functions(model) == {}
    setattr(sys.modules[__name__], "double", FUSED_DOUBLE)
    try:
        assert patched_functions(model) == {f"{__name__}.double": "fusedlib.ops.fused_double"}
    finally:
        setattr(sys.modules[__name__], "double", double)


def test_a_patched_class_forward_is_found(monkeypatch):
    monkeypatch.setattr(Doubler, "forward", elsewhere("def fused_forward(self, x):\n    return x + x\n",
                                                      "fused_forward"))
    assert patched_functions(Doubler()) == {f"{__name__}.Doubler.forward": "fusedlib.ops.fused_forward"}


def test_a_patched_torch_function_is_found(monkeypatch):
    def my_silu(x, inplace=False):
        return x * torch.sigmoid(x)

    monkeypatch.setattr(torch.nn.functional, "silu", my_silu)
    assert patched_functions(Gated()) == {"torch.nn.functional.silu": f"{__name__}.{my_silu.__qualname__}"}


def test_unpatched_models_show_nothing():
    assert patched_functions(tiny()) == {}
    assert patched_functions(Gated()) == {}


def test_an_unpatched_hugging_face_model_shows_nothing():
    tf = pytest.importorskip("transformers")
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2)
    assert patched_functions(tf.LlamaForCausalLM(cfg)) == {}


def test_the_certificate_warns_and_is_held_at_warn(monkeypatch):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 8), Doubler()).eval()
    prod = copy.deepcopy(ref)
    monkeypatch.setattr(sys.modules[__name__], "double", FUSED_DOUBLE)  # reaches both: x + x against itself
    cert = kcert.certify_model(ref, prod, {"input": kcert.Gaussian((4, 8))}, dtype=torch.float32, backward=False,
                               replicates=256, peer_rules=False)  # enough for these rows to PASS (64 WARN)
    assert cert.provenance["ref_patched"] == {f"{__name__}.double": "fusedlib.ops.fused_double"}
    assert any("ref_model runs functions patched in from elsewhere" in w for w in cert.warnings)
    assert all(r.verdict is kcert.Verdict.PASS for r in cert.rows)  # the patch compared with itself
    assert cert.verdict is kcert.Verdict.WARN  # held there by the warning
