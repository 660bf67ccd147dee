"""Attention backends that take other arguments or lack a backward on this device (docs/model.md, "Another
interface"): a prod module whose backward raises NotImplementedError (flex attention on a CPU) gets a SKIPPED
backward row that says so, where the run stopped; any other error in prod's backward still stops the run, named.
Hugging Face's flex attention, given an adapter that builds its BlockMask from eager's mask, has its attention
certified forward, and a wrong scale in it is localized there."""

import copy
import importlib.util

import pytest
import torch
from torch import nn

import kcert
from kcert.verdict import Verdict

INPUTS = {"x": kcert.Gaussian((4, 8))}
FAST = dict(replicates=16, peer_rules=False, end_to_end=False)


class _Square(torch.autograd.Function):
    error = NotImplementedError

    @staticmethod
    def forward(ctx, x):
        return x * x

    @classmethod
    def backward(cls, ctx, grad):
        raise cls.error("this op does not support backward on CPU")


class _Broken(_Square):
    error = RuntimeError


class Square(nn.Module):
    def forward(self, x):
        return x * x


class SquareFunction(nn.Module):
    function = _Square

    def forward(self, x):
        return self.function.apply(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.sq, self.out = nn.Linear(8, 8), Square(), nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.sq(self.inp(x)))


def test_a_backward_not_implemented_here_is_a_skipped_row():
    ref = Net().eval()
    prod = copy.deepcopy(ref)
    prod.sq = SquareFunction()
    cert = kcert.certify_model(ref, prod, INPUTS, dtype=torch.float32, **FAST)
    row = cert.row("sq", "backward")
    assert row.verdict is Verdict.SKIPPED
    assert "has no backward here: NotImplementedError: this op does not support backward on CPU" in row.skipped_reason
    assert cert.row("sq", "forward").verdict is not Verdict.SKIPPED  # its forward is certified
    assert cert.row("out", "backward").verdict is not Verdict.SKIPPED  # and the run went on


def test_another_error_in_prods_backward_still_stops_the_run_named():
    ref = Net().eval()
    prod = copy.deepcopy(ref)
    prod.sq = SquareFunction()
    prod.sq.function = _Broken
    with pytest.raises(kcert.KernelError, match="prod raised RuntimeError: this op does not support backward"):
        kcert.certify_model(ref, prod, INPUTS, dtype=torch.float32, **FAST)


def _llama(attn):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=64, vocab_size=64,
                                      max_position_embeddings=32, attn_implementation=attn)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _flex_mask(args, kwargs):
    """eager's additive causal mask -> the BlockMask flex attention takes (these inputs have no padding)."""
    from torch.nn.attention.flex_attention import create_block_mask

    b, _, q, k = kwargs["attention_mask"].shape
    mask = create_block_mask(lambda b_, h, i, j: i >= j, b, None, q, k, device=kwargs["attention_mask"].device)
    return args, {**kwargs, "attention_mask": mask}


@pytest.mark.skipif(importlib.util.find_spec("torch.nn.attention.flex_attention") is None, reason="no flex attention")
@pytest.mark.parametrize("defect", [False, True])
def test_flex_attention_with_an_adapter_is_certified_and_a_wrong_scale_localized(defect):
    ref, prod = _llama("eager"), _llama("flex_attention")
    prod.load_state_dict(ref.state_dict())
    if defect:
        prod.model.layers[0].self_attn.scaling *= 1.1
    cert = kcert.certify_model(ref, prod, {"input_ids": kcert.Integers((2, 16), 0, 64)},
                               modules=kcert.Modules(names=("model.layers.0.self_attn", "model.layers.0.mlp")),
                               adapt={r"model\.layers\.0\.self_attn": _flex_mask}, replicates=16, peer_rules=False,
                               end_to_end=False)
    forward = cert.row("model.layers.0.self_attn")
    assert forward.verdict is not Verdict.SKIPPED, forward.skipped_reason
    assert "NotImplementedError" in cert.row("model.layers.0.self_attn", "backward").skipped_reason
    assert cert.row("model.layers.0.mlp", "backward").verdict is not Verdict.SKIPPED
    if defect:
        assert forward.verdict is Verdict.FAIL and cert.first_failure.module == "model.layers.0.self_attn"
    else:
        assert not cert.failures, [(r.module, r.direction, r.figure) for r in cert.failures]
