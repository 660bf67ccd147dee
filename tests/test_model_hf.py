"""kcert.certify_model on Hugging Face models built from tiny configs (random weights, no download):
recorded HF keyword inputs (position embeddings, masks) replay, eager vs sdpa attention does not FAIL, and a
key bias gradient that softmax cancels is left out of the backward row as vanishing (docs/model.md)."""

import copy

import pytest
import torch

import kcert
from kcert.verdict import Verdict

transformers = pytest.importorskip("transformers")

INPUTS = {"input_ids": kcert.Integers((1, 16), 0, 128)}


def _pair(config_cls, model_cls, **extra):
    config = config_cls(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                        attn_implementation="eager", **extra)
    torch.manual_seed(0)
    ref = model_cls(config).to(torch.bfloat16).eval()
    other = copy.deepcopy(config)
    other._attn_implementation = "sdpa"
    prod = model_cls(other).to(torch.bfloat16).eval()
    prod.load_state_dict(ref.state_dict())
    return ref, prod


def test_llama_attention_eager_vs_sdpa_does_not_fail():
    ref, prod = _pair(transformers.LlamaConfig, transformers.LlamaForCausalLM)
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("model.layers.0.self_attn",)),
                               end_to_end=False, replicates=64, peer_rules=False)
    forward, backward = cert.row("model.layers.0.self_attn"), cert.row("model.layers.0.self_attn", "backward")
    assert forward.verdict is not Verdict.FAIL and backward.verdict is not Verdict.FAIL
    # the attention weights are returned by eager only: named, not compared
    assert any("output[1] (ref only)" in n for n in forward.notes)
    assert [o.name for o in forward.certificate.outputs] == ["output[0]"]
    assert {o.name for o in backward.certificate.outputs} == {
        "grad_hidden_states", *(f"grad_param__{p}_proj__weight" for p in "qkvo")}


def test_a_key_bias_gradient_that_vanishes_is_left_out_and_named():
    from kcert.model.cases import module_cases
    from kcert.model.select import match

    ref, prod = _pair(transformers.Qwen2Config, transformers.Qwen2ForCausalLM)
    name = "model.layers.0.self_attn"

    def backward_case():
        m = match(ref, prod)
        return module_cases(name, ref, m.ref[name], m.prod[name], INPUTS, {"use_cache": False}, torch.bfloat16, 0,
                            True, "qwen2")

    rotated = backward_case()  # RoPE rotates the key bias per position: its gradient is not zero
    assert "grad_param__k_proj__bias" in rotated.backward.output_names
    for model in (ref, prod):  # no rotation: the bias shifts every score of a query alike, softmax cancels it
        model.model.rotary_emb.inv_freq.zero_()
    plain = backward_case()
    assert "grad_param__k_proj__bias" not in plain.backward.output_names
    assert {"grad_param__q_proj__bias", "grad_param__v_proj__bias"} <= set(plain.backward.output_names)
    assert any("vanish in exact arithmetic" in n and "k_proj.bias" in n for n in plain.notes)
