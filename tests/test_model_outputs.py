"""The end-to-end row's outputs (docs/model.md, "The end-to-end row"): a model's logits and its own loss (computed
when the inputs hold labels) are both certified; a prod that returns the loss without logits (a fused linear
cross-entropy in training mode) is compared on the loss, with a note, and a defect in that loss still FAILs; a
loss function that cannot read one model's output is named before any row."""

import copy
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import kcert
from kcert.verdict import Verdict

V, S = 32, 8
INPUTS = {"input_ids": kcert.Integers((2, S), 0, V), "labels": kcert.Integers((2, S), 0, V)}
FAST = dict(dtype=torch.float32, backward=False, modules=kcert.Modules(names=("head",)), replicates=64,
            peer_rules=False)


@dataclass
class Output:  # as transformers' CausalLMOutput: attributes, None where not computed
    logits: torch.Tensor | None
    loss: torch.Tensor | None = None


class LM(nn.Module):
    """Embedding, a linear head and the token cross-entropy when labels are given. ``fused``: the logits are not
    returned with the loss (as a fused linear cross-entropy in training mode); ``smoothing``: a defect in the
    loss (label smoothing the reference does not apply)."""

    def __init__(self, fused: bool = False, smoothing: float = 0.0):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(V, 16)
        self.head = nn.Linear(16, V)
        self.fused, self.smoothing = fused, smoothing

    def forward(self, input_ids, labels=None):
        logits = self.head(self.embed(input_ids))
        if labels is None:
            return Output(logits)
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), label_smoothing=self.smoothing)
        return Output(None if self.fused else logits, loss)


def pair(**prod):
    ref = LM().eval()
    made = LM(**prod).eval()
    made.load_state_dict(ref.state_dict())
    return ref, made


def test_the_models_own_loss_is_certified_with_its_logits():
    ref, prod = pair()
    cert = kcert.certify_model(ref, prod, INPUTS, **FAST)
    end = cert.row("", "end to end")
    assert [o.name for o in end.certificate.outputs] == ["logits", "loss"]
    assert end.verdict is not Verdict.FAIL and not end.notes


def test_a_prod_without_logits_is_compared_on_its_loss_with_a_note():
    ref, prod = pair(fused=True)
    cert = kcert.certify_model(ref, prod, INPUTS, **FAST)
    end = cert.row("", "end to end")
    assert [o.name for o in end.certificate.outputs] == ["loss"]
    assert end.verdict is not Verdict.FAIL
    assert any("logits: prod_model returns none, so this row compares loss only" in n for n in end.notes)


def test_a_defect_in_the_loss_alone_fails_the_end_to_end_row():
    ref, prod = pair(fused=True, smoothing=0.1)
    cert = kcert.certify_model(ref, prod, INPUTS, **FAST)
    assert cert.row("", "end to end").verdict is Verdict.FAIL
    assert cert.row("head").verdict is not Verdict.FAIL  # the head is the same: only the loss differs


def test_a_given_loss_keeps_its_name_beside_the_models_own():
    ref, prod = pair()
    cert = kcert.certify_model(ref, prod, INPUTS, loss=lambda out, batch: out.logits.square().mean(), **FAST)
    assert [o.name for o in cert.row("", "end to end").certificate.outputs] == ["logits", "loss", "loss (given)"]


def test_a_given_loss_that_cannot_read_prods_output_is_named_before_any_row():
    ref, prod = pair(fused=True)
    with pytest.raises(kcert.CaseError, match=r"the loss given raised (TypeError|AttributeError) on prod_model's "
                                              r"output \(Output\)"):
        kcert.certify_model(ref, prod, INPUTS, loss=lambda out, batch: out.logits.square().mean(), **FAST)


def test_models_with_other_outputs_are_still_refused():
    ref, _ = pair()

    class Hidden(nn.Module):  # returns its hidden states, no logits, no loss
        def __init__(self):
            super().__init__()
            self.embed, self.head = copy.deepcopy(ref.embed), copy.deepcopy(ref.head)

        def forward(self, input_ids, labels=None):
            return (self.embed(input_ids), self.head(self.embed(input_ids)))

    with pytest.raises(kcert.CaseError, match="the two models return other outputs"):
        kcert.certify_model(ref, Hidden().eval(), INPUTS, **FAST)
