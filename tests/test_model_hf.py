"""kcert.certify_model on Hugging Face models built from tiny configs (random weights, no download):
recorded HF keyword inputs (position embeddings, masks) replay, eager vs sdpa attention does not FAIL, and a
key bias gradient that softmax cancels is left out of the backward row as vanishing, and so is the key third of
a fused query-key-value bias, element by element (docs/model.md)."""

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
    assert any("vanish in exact arithmetic" in n and "k_proj.bias" in n for n in plain.backward_notes)
    assert not any("vanish" in n for n in plain.notes)  # the forward row's notes: nothing of the gradients


def _gpt2_pair():
    config = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=128, n_positions=64,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    ref = transformers.GPT2Model(config).eval()
    other = copy.deepcopy(config)
    other._attn_implementation = "sdpa"
    prod = transformers.GPT2Model(other).eval()
    prod.load_state_dict(ref.state_dict())
    return ref, prod


def test_the_key_third_of_a_fused_qkv_bias_gradient_is_zeroed_and_the_rest_certified():
    """GPT-2's c_attn adds one bias to queries, keys and values: softmax cancels its key third (zero gradient
    in exact arithmetic, rounding noise in float32), the query and value thirds are real gradients. Before,
    the whole tensor was certified and eager against sdpa FAILed on the noise (418 ULP on one channel)."""
    from kcert.model.cases import VANISHING_DRAWS, module_cases
    from kcert.model.select import match

    ref, prod = _gpt2_pair()
    m = match(ref, prod)
    built = module_cases("", ref, ref, prod, INPUTS, {"use_cache": False}, torch.float32, 0, True, "gpt2")
    back = built.backward
    bias = back.output_names.index("grad_param__h__0__attn__c_attn__bias")
    assert "grad_param__wte__weight" in back.output_names  # not vanishing: certified
    note = next(n for n in built.backward_notes if n.startswith("elements of gradients that vanish"))
    assert f"on {VANISHING_DRAWS} draws" in note and "h.0.attn.c_attn.bias (64 of 192)" in note
    # the token embedding's rows no draw used are exactly zero, not rounding noise: never zeroed
    assert "wte" not in note and "wpe" not in note
    cotangent = torch.randn(1, 16, 64)
    values = {"input_ids": torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(1)),
              "cotangent": cotangent, **{k: p.value for k, p in back.weights.items()}}
    from kcert.model.record import record
    recorded = record(ref, ref, {"input_ids": values["input_ids"]}, "gpt2", {"use_cache": False})
    layout_values = back.ref.kernel.fn.layout.flatten(recorded, "gpt2")
    grads = back.ref(**{**values, **layout_values})
    assert torch.equal(grads[bias][64:128], torch.zeros(64))  # the key third: zero on both sides
    assert grads[bias][:64].abs().max() > 0 and grads[bias][128:].abs().max() > 0


def test_gpt2_eager_vs_sdpa_backward_does_not_fail_on_the_cancelled_key_bias():
    ref, prod = _gpt2_pair()
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("h.0.attn",)), dtype=torch.float32,
                               end_to_end=False, replicates=64, peer_rules=False)
    backward = cert.row("h.0.attn", "backward")
    assert backward.verdict is not Verdict.FAIL, backward.figure
    assert "grad_param__c_attn__bias" in {o.name for o in backward.certificate.outputs}
    assert any("c_attn.bias (64 of 192)" in n for n in backward.notes)
    assert not any("c_attn.bias" in n for n in cert.row("h.0.attn").notes)


def test_a_checkpointed_decoder_layer_in_training_mode_gets_its_backward_row():
    """Gradient checkpointing on (training mode): the float64 oracle runs the layer without it (the recompute in
    backward ran outside the parameters handed in, and the backward row was SKIPPED), the working-precision
    calls keep it, and the models' flags are left as they were."""
    ref, prod = _pair(transformers.LlamaConfig, transformers.LlamaForCausalLM)
    ref, prod = ref.float().train(), prod.float().train()
    for model in (ref, prod):
        model.gradient_checkpointing_enable()
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("model.layers.0",)), dtype=torch.float32,
                               end_to_end=False, replicates=64, peer_rules=False)
    backward = cert.row("model.layers.0", "backward")
    assert backward.certificate is not None, backward.skipped_reason
    assert backward.verdict is not Verdict.FAIL
    assert ref.model.layers[0].gradient_checkpointing and prod.model.layers[0].gradient_checkpointing
