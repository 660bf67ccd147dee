"""Padded batches (kcert.model.padding, docs/model.md "Padded batches"): outputs at padded positions are zeroed on
both sides, so eager against sdpa attention on a left-padded batch does not FAIL on rows no training step uses
(it FAILs with padding=None, the control), a defect at the tokens still FAILs, and a padding input that is not a
(batch, positions) 0/1 tensor is refused by name."""

import copy

import pytest
import torch

import kcert
from kcert.model.padding import masked, padded_mask
from kcert.verdict import Verdict

transformers = pytest.importorskip("transformers")

V, S = 128, 16


INPUTS = {"input_ids": kcert.Integers((2, S), 0, V), "attention_mask": padded_mask(2, S, min_tokens=6)}


def _llama(attn):
    config = transformers.LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation=attn, use_cache=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).float().eval()


def _pair():
    ref, prod = _llama("eager"), _llama("sdpa")
    prod.load_state_dict(ref.state_dict())
    return ref, prod


RUN = dict(modules=kcert.Modules(names=("model.layers.0.self_attn",)), dtype=torch.float32, replicates=16,
           max_replicates=16, peer_rules=False)


def test_eager_vs_sdpa_on_a_padded_batch_fails_only_without_padding():
    ref, prod = _pair()
    control = kcert.certify_model(ref, prod, INPUTS, padding=None, **RUN)
    # the control: eager and sdpa differ where a padded query attends to nothing, and in backward through it
    assert control.row("model.layers.0.self_attn", "backward").verdict is Verdict.FAIL
    assert control.row("", "end to end").verdict is Verdict.FAIL
    cert = kcert.certify_model(ref, prod, INPUTS, **RUN)  # padding="attention_mask", the default
    assert cert.provenance["padding"] == "attention_mask"
    assert not cert.failures, [(r.module, r.direction, r.figure) for r in cert.failures]


def test_a_defect_at_the_tokens_still_fails_on_a_padded_batch():
    ref = _llama("eager")
    prod = copy.deepcopy(ref)
    prod.model.layers[0].self_attn.scaling *= 1.05  # a wrong attention scale
    cert = kcert.certify_model(ref, prod, INPUTS, **RUN)
    assert cert.first_failure is not None and cert.first_failure.module == "model.layers.0.self_attn"


@pytest.mark.parametrize("probe, padding, message", [
    (kcert.Gaussian((2, S)), "attention_mask", "must draw a (batch, positions) tensor of 0 and 1"),
    (kcert.Integers((2, 1, S, S), 0, 2), "attention_mask", "got a (2, 1, 16, 16) torch.int64 tensor"),
    (kcert.Integers((2, S), 0, 3), "attention_mask", "tensor of 0 and 1"),
    (kcert.Integers((2, S), 1, 2), "mask", "padding='mask' names no input"),
])
def test_a_padding_input_of_the_wrong_kind_is_named(probe, padding, message):
    ref, prod = _pair()
    inputs = {"input_ids": kcert.Integers((2, S), 0, V), "attention_mask": probe}
    with pytest.raises(kcert.CaseError) as info:
        kcert.certify_model(ref, prod, inputs, padding=padding, **RUN)
    assert message in str(info.value)


def test_masked_zeroes_outputs_led_by_batch_and_positions_only():
    valid = torch.tensor([[0, 1, 1], [1, 1, 1]])
    hidden, table, flat = torch.ones(2, 3, 4), torch.ones(3, 4), torch.ones(6, 4)
    out = masked((hidden, table, flat, torch.tensor(2.0)), valid)
    assert out[0][0, 0].eq(0).all() and out[0][0, 1:].eq(1).all() and out[0][1].eq(1).all()
    assert out[1] is table and out[2] is flat and out[3].item() == 2.0  # other layouts: left as they are
    assert masked((hidden,), torch.ones(2, 3, dtype=torch.long))[0] is hidden  # nothing padded: untouched
    x = torch.ones(2, 3, 4, requires_grad=True)
    masked((x,), valid)[0].sum().backward()
    assert x.grad[0, 0].eq(0).all() and x.grad[0, 1].eq(1).all()  # no gradient from a padded position
