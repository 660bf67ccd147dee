"""kcert.certify_model leaves the user's models as it found them (kcert/model/state.py, docs/model.md "State
the forwards write"): BatchNorm in training mode updates its running statistics on each of the hundreds of
forwards a run makes; they are put back after the run, also when it stops on an error, and the report says which
buffers the forwards wrote into."""

import copy

import pytest
import torch
from rich.console import Console
from torch import nn

import kcert
from kcert.model.report import render


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


INPUTS = {"x": kcert.Gaussian((4, 3, 6, 6))}
FAST = dict(replicates=16, peer_rules=False)


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_training_mode_batch_norm_statistics_are_put_back():
    ref = ConvNet().train()
    prod = copy.deepcopy(ref)
    before_ref, before_prod = _state(ref), _state(prod)
    bn_stats = ref.bn.running_mean  # the same tensor object must hold the old values, not a new one
    cert = kcert.certify_model(ref, prod, INPUTS, **FAST)
    for model, before in ((ref, before_ref), (prod, before_prod)):
        after = model.state_dict()
        assert all(torch.equal(after[k], v) for k, v in before.items())
    assert ref.bn.running_mean is bn_stats
    restored = cert.provenance["buffers_restored"]
    assert set(restored) == {"ref", "prod"}
    assert {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"} == set(restored["ref"])
    console = Console(record=True, width=200)
    render(cert, console)
    assert "state: the forwards wrote into buffers (ref's bn.running_mean" in console.export_text()


def test_the_control_a_forward_in_training_mode_does_write_the_statistics():
    model = ConvNet().train()
    before = model.bn.running_mean.clone()
    with torch.no_grad():
        model(torch.randn(4, 3, 6, 6))
    assert not torch.equal(model.bn.running_mean, before)  # what the run would leave behind


def test_eval_mode_changes_nothing_and_reports_nothing():
    ref = ConvNet().eval()
    cert = kcert.certify_model(ref, copy.deepcopy(ref), INPUTS, **FAST)
    assert "buffers_restored" not in cert.provenance


def test_state_is_put_back_when_the_run_stops_on_an_error():
    ref = ConvNet().train()
    prod = copy.deepcopy(ref)
    before = _state(ref)

    def loss(out, inputs):
        raise ValueError("no loss here")

    with pytest.raises(kcert.KcertError):
        kcert.certify_model(ref, prod, INPUTS, loss=loss, **FAST)
    assert all(torch.equal(ref.state_dict()[k], v) for k, v in before.items())
