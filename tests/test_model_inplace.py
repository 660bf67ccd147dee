"""Modules that write into their inputs (torchvision's ResNet blocks: ``ReLU(inplace=True)``, ``out +=
identity``): their backward rows run (an activation a backward row differentiates is given to the module as an
intermediate, not as an autograd leaf it may not write into), and a defect there is localized in both
directions (docs/model.md, "Modules that write into their inputs")."""

import copy

import torch
from torch import nn

import kcert
from kcert.verdict import Verdict


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, d), nn.Linear(d, d)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.fc2(self.relu(self.fc1(x)))
        out += x  # written into the second projection's output
        return self.relu(out)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


INPUTS = {"x": kcert.Gaussian((16, 8))}
FAST = dict(replicates=64, peer_rules=False, end_to_end=False)


def test_in_place_modules_get_backward_rows():
    ref = Net().eval()
    cert = kcert.certify_model(ref, copy.deepcopy(ref), INPUTS,
                               modules=kcert.Modules(names=("blocks.0", "blocks.0.relu")), **FAST)
    relu = cert.row("blocks.0.relu", "backward")
    assert relu.verdict is not Verdict.SKIPPED, relu.skipped_reason
    assert [o.name for o in relu.certificate.outputs] == ["grad_input"]
    block = cert.row("blocks.0", "backward")  # in-place ReLUs and out += x inside it
    assert block.verdict is not Verdict.SKIPPED and "grad_x" in [o.name for o in block.certificate.outputs]
    assert not cert.failures


def test_a_defect_in_an_in_place_module_is_localized_both_ways():
    ref = Net().eval()
    prod = copy.deepcopy(ref)
    prod.blocks[1].relu = nn.LeakyReLU(0.05, inplace=True)  # the defect, in place as the original
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("blocks.*",)), **FAST)
    assert cert.first_failure is not None and cert.first_failure.module == "blocks.1.relu"
    for direction in ("forward", "backward"):
        assert cert.row("blocks.1.relu", direction).verdict is Verdict.FAIL
        assert cert.row("blocks.0.relu", direction).verdict is not Verdict.FAIL
    assert {r.module for r in cert.failures} == {"blocks.1", "blocks.1.relu"}
