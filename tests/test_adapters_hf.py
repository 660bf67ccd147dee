"""kcert.adapters.hf: HF transformers modules as kcert kernels and cases (needs the hf extra)."""

import sys

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face adapter needs the hf extra: pip install 'kcert[hf]'")

from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import kcert
from kcert.adapters import ExtraMissing, hf
from kcert.catalog import norms as catalog_norms
from kcert.execution import probes
from kcert.execution.realmode import run_real
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py
CPU = torch.device("cpu")


def _draw(case, replicate=0):
    w = probes.draw_weights(case, 0, CPU)
    x = probes.draw_inputs(case, 0, replicate, CPU)
    return {**x.working, **w.working}, {**x.exact, **w.exact}


# --- module kernels and weights --------------------------------------------------------------------


def test_module_kernel_uses_the_case_weights_not_the_module_own():
    module = LlamaRMSNorm(16, eps=1e-5)
    with torch.no_grad():
        module.weight.fill_(123.0)  # must never be used
    kernel = hf.module_kernel(module, inputs=("x",), params={"w": "weight"})
    x = torch.randn(3, 16).bfloat16()
    w = (1 + 0.1 * torch.randn(16)).bfloat16()
    assert torch.equal(kernel(x=x, w=w), catalog_norms.rms_norm_hf(x, w, eps=1e-5))
    assert float(module.weight.detach()[0]) == 123.0  # functional call: the module is left as it was
    assert not module.training  # wrapped modules are put in eval mode


def test_module_kernel_rejects_bad_maps_and_arguments():
    module = LlamaRMSNorm(16)
    with pytest.raises(kcert.CaseError, match="not covered \\['weight'\\]"):
        hf.module_kernel(module, inputs=("x",), params={"w": "bias"})
    with pytest.raises(kcert.CaseError, match="needs weights="):
        hf.module_kernel(module, inputs=("x",), params=lambda w: {"weight": w["w"]})
    kernel = hf.module_kernel(module, inputs=("x",), params={"w": "weight"})
    with pytest.raises(TypeError, match="missing \\['w'\\], unexpected \\['gain'\\]"):
        kernel(x=torch.ones(2, 16), gain=torch.ones(16))
    wrong_rank = hf.module_kernel(module, inputs=("x",), params=lambda w: {"weight": w["w"]}, weights=("w",))
    with pytest.raises(kcert.KernelError, match="'weight' gets shape \\(4, 4\\)"):
        wrong_rank(x=torch.ones(2, 16), w=torch.ones(4, 4))


def test_module_weights_draw_is_trained_like_and_copy_keeps_values():
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    attention = transformers.models.llama.modeling_llama.LlamaAttention(config, layer_idx=0)
    drawn = hf.module_weights(attention, "draw")
    assert sorted(drawn) == ["k_proj__weight", "o_proj__weight", "q_proj__weight", "v_proj__weight"]
    g = torch.Generator().manual_seed(0)
    q = drawn["q_proj__weight"].sample(g, CPU, torch.float32)
    assert q.shape == (64, 64) and 0.8 < float(q.std() * 64 ** 0.5) < 3.0  # N(0, 1/fan_in) plus 1% x10
    gain = hf.module_weights(LlamaRMSNorm(256), "draw")["weight"].sample(g, CPU, torch.float32)
    gemma_gain = hf.module_weights(GemmaRMSNorm(256), "draw")["weight"].sample(g, CPU, torch.float32)
    assert abs(float(gain.mean()) - 1) < 0.05 and abs(float(gemma_gain.mean())) < 0.05

    copied = hf.module_weights(attention, "copy", dtype=torch.bfloat16)
    assert torch.equal(copied["k_proj__weight"].value, attention.k_proj.weight.detach().bfloat16())
    with torch.no_grad():
        attention.k_proj.weight[0, 0] = float("nan")
    with pytest.raises(kcert.CaseError, match="'k_proj.weight' .* non-finite"):
        hf.module_weights(attention, "copy")
    with pytest.raises(kcert.CaseError, match="mode must be 'draw' or 'copy'"):
        hf.module_weights(attention, "zeros")


def test_module_case_checks_shared_parameters():
    x = {"x": kcert.Gaussian((2, 16), shift=0.1)}
    with pytest.raises(kcert.CaseError, match="different parameters"):
        hf.module_case("mismatch", LlamaRMSNorm(16), LlamaRMSNorm(32), inputs=x)
    with pytest.raises(kcert.CaseError, match="needs an nn.Module"):
        hf.module_case("plain", catalog_norms.rms_norm, catalog_norms.rms_norm, inputs=x)
    case = hf.module_case("pair", LlamaRMSNorm(16, eps=1e-5), GemmaRMSNorm(16, eps=1e-5), inputs=x)
    assert sorted(case.weights) == ["weight"]


def test_a_compiled_module_is_accepted_and_runs_compiled_forward_and_backward():
    """prod = torch.compile(M2): the OptimizedModule names its parameters ``_orig_mod.<name>``; the
    case's weights still map onto them and the call goes through the compiled module."""
    dynamo_utils = pytest.importorskip("torch._dynamo.utils")
    x = {"x": kcert.Gaussian((1, 8, 64), shift=0.1)}
    eager = LlamaRMSNorm(64, eps=1e-5)
    compiled = torch.compile(LlamaRMSNorm(64, eps=1e-5), backend="aot_eager")
    case = hf.module_case("compiled", eager, compiled, inputs=x)
    assert sorted(case.weights) == ["weight"] and "torch.compile" in case.prod.name
    before = dynamo_utils.counters["frames"]["ok"]
    cert = kcert.certify(kcert.gradients(case), replicates=48, seed=0)  # the forward output, and gradients
    assert dynamo_utils.counters["frames"]["ok"] > before  # the compiled module ran
    assert any(n.startswith("torch.compile: dynamo compiled") for n in cert.notes)  # and the report says so
    from kcert.report.html import render_html
    from kcert.report.jsonio import to_dict

    assert to_dict(cert)["notes"] == list(cert.notes) and "torch.compile: dynamo compiled" in render_html([cert])
    assert [o.name for o in cert.outputs] == ["output", "grad_x", "grad_weight"]
    assert cert.gates["algebra"] is Verdict.PASS and cert.gates["bias"] is Verdict.PASS
    assert cert.verdict is not Verdict.FAIL
    # a compiled module whose weights differ from the case's is still given the case's weights
    inputs, _ = _draw(case)
    with torch.no_grad():
        compiled._orig_mod.weight.fill_(123.0)
    assert torch.equal(case.prod(**inputs), case.ref(**inputs))


def test_two_modules_of_one_convention_pass_and_of_two_conventions_fail():
    """A real negative through the adapter: Gemma's (1 + w) module vs Llama's w module on the same
    weights is an algebraic difference (Liger-Kernel #74 the other way round)."""
    x = {"x": kcert.Gaussian((1, 8, 64), shift=0.1)}
    same = hf.module_case("same", LlamaRMSNorm(64, eps=1e-5), LlamaRMSNorm(64, eps=1e-5), inputs=x)
    cert = kcert.certify(same, replicates=100, seed=0)  # the gates' minimums for a PASS (kcert.gates.minimum)
    assert cert.verdict is Verdict.PASS
    mixed = hf.module_case("mixed", LlamaRMSNorm(64, eps=1e-6), GemmaRMSNorm(64, eps=1e-6), inputs=x)
    cert = kcert.certify(mixed, replicates=64, seed=0)
    assert cert.gates["algebra"] is Verdict.FAIL and cert.verdict is Verdict.FAIL


def test_rmsnorm_case_picks_the_convention_and_the_module_eps():
    llama = hf.rmsnorm_case(LlamaRMSNorm(128, eps=1e-5), shape=(1, 4, 128))
    gemma = hf.rmsnorm_case(GemmaRMSNorm(128, eps=1e-6), shape=(1, 4, 128))
    for case, reference in ((llama, catalog_norms.rms_norm_hf), (gemma, catalog_norms.gemma_rms_norm)):
        working, _ = _draw(case)
        eps = 1e-5 if case is llama else 1e-6
        assert torch.equal(case.prod(**working), reference(**working, eps=eps))
        assert torch.equal(case.ref(**working), case.prod(**working))
    with pytest.raises(kcert.CaseError, match="hidden size 128"):
        hf.rmsnorm_case(LlamaRMSNorm(128), shape=(1, 4, 64))


# --- rotary ----------------------------------------------------------------------------------------


def test_rotary_frequencies_are_rebuilt_so_real_mode_sees_exact_angles():
    rebuilt = hf.rotary_case(seq=16)
    frozen = hf.rotary_case(seq=16, rebuild_frequencies=False)
    working, exact = _draw(rebuilt)
    for a, b in zip(rebuilt.prod(**working), frozen.prod(**working)):
        assert torch.equal(a, b)  # bitwise the init-time buffer in working precision
    oracle = run_real(lambda: rebuilt.ref(**exact))
    with_rebuild = run_real(lambda: rebuilt.prod(**exact))
    without = run_real(lambda: frozen.prod(**exact))
    assert max(float((a - b).abs().max()) for a, b in zip(oracle, with_rebuild)) < 1e-12
    assert max(float((a - b).abs().max()) for a, b in zip(oracle, without)) > 1e-6  # float32 inv_freq x position


def test_rotary_llama3_config_matches_catalogue_and_unknown_types_are_refused():
    config = transformers.LlamaConfig(
        hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128, max_position_embeddings=131072,
        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    case = hf.rotary_case(config, seq=16)
    working, _ = _draw(case)
    for a, b in zip(case.ref(**working), case.prod(**working)):
        assert torch.equal(a, b)
    yarn = transformers.LlamaConfig(head_dim=128, hidden_size=256, num_attention_heads=2, max_position_embeddings=65536,
                                    rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 16384})
    with pytest.raises(kcert.CaseError, match="rope_type 'yarn' has no automatic catalogue reference"):
        hf.rotary_case(yarn)


# --- attention -------------------------------------------------------------------------------------


def test_attention_eager_and_sdpa_agree_and_run_in_both_real_modes():
    case = hf.attention_case(seq=16, padding="right", batch=2)
    assert set(case.inputs) == {"hidden_states", "position_ids", "attention_mask"}
    working, exact = _draw(case)
    ref, prod = case.ref(**working), case.prod(**working)
    assert ref.shape == prod.shape == (2, 16, 256) and ref.dtype == torch.bfloat16
    assert float((ref.float() - prod.float()).abs().max()) < 0.1
    # the padding mask matters: without it the padded queries attend elsewhere
    unmasked = case.ref(**{**working, "attention_mask": torch.ones_like(working["attention_mask"])})
    assert not torch.equal(unmasked, ref)
    for dtype in (torch.float64, torch.float32):  # float32 real mode needs inputs in the mode's dtype
        a = run_real(lambda: case.ref(**exact), dtype=dtype)
        b = run_real(lambda: case.prod(**exact), dtype=dtype)
        assert float((a - b).abs().max()) < (1e-12 if dtype == torch.float64 else 1e-4)


# --- MoE -------------------------------------------------------------------------------------------


def test_mixtral_block_maps_the_catalogue_weights():
    case = hf.moe_case(tokens=32)
    working, exact = _draw(case)
    ref, prod = case.ref(**working), case.prod(**working)
    assert prod.shape == ref.shape == (32, 256)
    # same routing and experts: a few bf16 roundings of the (large, cancelling) expert outputs apart,
    # equal in real mode
    assert float((ref.float() - prod.float()).abs().max()) < 2 ** -7 * float(ref.float().abs().max())
    assert float((run_real(lambda: case.ref(**exact)) - run_real(lambda: case.prod(**exact))).abs().max()) < 1e-10
    # a swapped mapping (w1 and w3 exchanged) computes another function
    swapped = {**working, "w1": working["w3"], "w3": working["w1"]}
    assert float((case.prod(**swapped).float() - ref.float()).abs().max()) > 1.0
    assert case.prod_math is None and isinstance(case.buckets, kcert.Labels)


def test_moe_experts_implementations_are_a_case():
    case = hf.moe_case(tokens=16, ref="eager", prod_impl="batched_mm")
    working, _ = _draw(case)
    ref, prod = case.ref(**working), case.prod(**working)
    assert float((ref.float() - prod.float()).abs().max()) < 2 ** -7 * float(ref.float().abs().max())
    assert not torch.equal(ref, prod)  # the implementations round differently


# --- the extra ---------------------------------------------------------------------------------------


def test_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ModuleNotFoundError
    with pytest.raises(ExtraMissing, match=r'pip install "kcert\[hf\]"') as info:
        hf.rotary_case()
    assert isinstance(info.value, ImportError) and isinstance(info.value, kcert.KcertError)
    assert "rotary_case" in str(info.value)
    assert hf.transformers_version() is None
