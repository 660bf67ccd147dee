"""Random draws in a model's forward (docs/model.md, "Random draws"): a model in training mode with dropout, or a
forward that samples, is refused before any row with the modules that draw named, where it made benign rows FAIL
by the algebra gate; a model in training mode that draws nothing runs; the generators' states are left as found."""

import copy

import pytest
import torch
from torch import nn

import kcert
from kcert.model.export import write_case_file
from kcert.model.randomness import drawing_modules

INPUTS = {"input": kcert.Gaussian((4, 8))}
FAST = dict(dtype=torch.float32, backward=False, replicates=16, max_replicates=16, peer_rules=False)


class Noisy(nn.Module):
    """Adds a little Gaussian noise in its own forward, in any mode (a sampling or noise-injecting layer)."""

    def forward(self, x):
        return x + 1e-3 * torch.randn_like(x)


class SelfDropout(nn.Module):
    """Dropout in its own forward (as attention implementations drop probabilities), with a child that draws
    nothing."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return nn.functional.dropout(self.proj(x), p=0.5, training=self.training)


def mlp(p: float) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Dropout(p), nn.Linear(8, 8))  # training mode, as nn.Module builds it


def test_a_model_in_training_mode_with_dropout_is_refused_and_the_dropout_named():
    ref = mlp(0.1)
    prod = copy.deepcopy(ref)
    with pytest.raises(kcert.CaseError) as info:
        kcert.certify_model(ref, prod, INPUTS, name="train", **FAST)
    message = str(info.value)
    assert "certify_model('train')" in message
    assert "ref_model and prod_model draw random numbers in their forwards (in training mode): 1 (Dropout, p=0.1)" \
        in message
    assert "call .eval() on both models" in message


def test_the_same_models_in_eval_mode_run():
    ref = mlp(0.1).eval()
    cert = kcert.certify_model(ref, copy.deepcopy(ref), INPUTS, **FAST)
    assert cert.verdict is not kcert.Verdict.FAIL
    assert {r.module for r in cert.rows} >= {"0", "2"}


def test_training_mode_without_draws_is_not_refused():
    ref = mlp(0.0)  # dropout with p = 0 in training mode draws nothing
    assert ref.training
    cert = kcert.certify_model(ref, copy.deepcopy(ref), INPUTS, **FAST)
    assert cert.verdict is not kcert.Verdict.FAIL


def test_only_prod_drawing_in_eval_mode_is_named_with_its_own_fix():
    ref = nn.Sequential(nn.Linear(8, 8), nn.Identity()).eval()
    prod = copy.deepcopy(ref)
    prod[1] = Noisy()
    with pytest.raises(kcert.CaseError) as info:
        kcert.certify_model(ref, prod, INPUTS, **FAST)
    message = str(info.value)
    assert "prod_model's forward draws random numbers (in eval mode): 1 (Noisy)" in message
    assert "ref_model's" not in message and "ref_model and" not in message  # ref draws nothing: not named
    assert "make the forward deterministic" in message


def test_the_innermost_drawing_modules_are_named_and_the_generator_left_as_found():
    model = nn.Sequential(SelfDropout(), nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)))
    x = torch.randn(4, 8)
    torch.manual_seed(123)
    names = drawing_modules(model, {"input": x})
    assert names == ["0", "1.1"]  # not the containers holding them, not SelfDropout's Linear
    after = torch.rand(3)  # the forward's draws are undone: the next draw is the seed's first
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(3))
    assert drawing_modules(model.eval(), {"input": x}) == []


def test_a_draw_in_the_models_own_forward_names_the_model():
    assert drawing_modules(Noisy(), {"x": torch.randn(4, 8)}) == [""]


def test_export_refuses_too(tmp_path):
    ref = mlp(0.1)
    pair = kcert.ModelPair("train", ref, copy.deepcopy(ref), INPUTS, dtype=torch.float32)
    out = tmp_path / "case.py"
    with pytest.raises(kcert.CaseError, match=r"--export-case \(pair 'train'\): .*1 \(Dropout, p=0\.1\)"):
        write_case_file(pair, str(tmp_path / "pairs.py"), "0", str(out), backward=False)
    assert not out.exists()
