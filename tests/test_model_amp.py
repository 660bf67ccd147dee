"""``certify_model(..., autocast=torch.bfloat16)`` (docs/model.md, "Mixed precision"): float32 models certified as
an autocast training step runs them. A public defect that only autocast shows (transformers' Llama rotary angles
as a matmul that autocast lowers to bfloat16, before PR #29285) FAILs and is localized under autocast and not
without it; every working-precision call runs under autocast, the float64 ones do not; harm is judged in the
autocast dtype; the hooks are gone afterwards; an exported case keeps autocast."""

import copy
import types

import pytest
import torch
from torch import nn

import kcert
from kcert import rounding
from kcert.verdict import Verdict

transformers = pytest.importorskip("transformers")

INPUTS = {"input_ids": kcert.Integers((2, 32), 0, 128)}
FAST = dict(dtype=torch.float32, backward=False, end_to_end=False, replicates=64, peer_rules=False)
ROTARY = kcert.Modules(names=("model.rotary_emb",))


def rotary_as_matmul(self, x, position_ids):
    """transformers' Llama rotary embedding before PR #29285: the angles as a matrix product, autocast left on."""
    inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def llama_pair():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="eager")
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(config).eval()
    prod = copy.deepcopy(ref)
    prod.model.rotary_emb.forward = types.MethodType(rotary_as_matmul, prod.model.rotary_emb)
    return ref, prod


def test_a_defect_only_autocast_shows_fails_under_autocast_alone():
    ref, prod = llama_pair()
    under = kcert.certify_model(ref, prod, INPUTS, modules=ROTARY, autocast=torch.bfloat16, **FAST)
    assert under.first_failure is not None and under.first_failure.module == "model.rotary_emb"
    assert under.provenance["autocast"] == "bfloat16"
    bias = under.first_failure.certificate.bias[0]
    assert bias.harm_format == "bfloat16"
    plain = kcert.certify_model(ref, prod, INPUTS, modules=ROTARY, **FAST)  # float32 throughout: the same angles
    assert plain.row("model.rotary_emb").verdict is not Verdict.FAIL
    for model in (ref, prod):  # the hooks are removed
        assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


class Seen(nn.Module):
    """Records the dtype of what it receives on every call, and whether kcert's real mode (an exact evaluation:
    the float64 oracle, the algebra gate's float32 and float64 rungs) was on."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, x):
        self.calls.append((x.dtype, bool(getattr(rounding.real_mode_state, "dtypes", None))))
        return x * 2


def test_every_working_precision_call_runs_under_autocast_and_the_oracle_does_not():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 8), Seen()).eval()
    prod = copy.deepcopy(ref)
    cert = kcert.certify_model(ref, prod, {"input": kcert.Gaussian((4, 8))}, autocast=torch.bfloat16,
                               modules=kcert.Modules(names=("1",)), **{**FAST, "end_to_end": True})
    assert cert.verdict is not Verdict.FAIL
    for model in (ref, prod):  # the Linear's product is lowered by autocast: bf16 into Seen, never in real mode
        working = {dtype for dtype, real in model[1].calls if not real}
        assert working == {torch.bfloat16}
        assert torch.bfloat16 not in {dtype for dtype, real in model[1].calls if real}
    assert (torch.float64, True) in ref[1].calls  # the oracle ran, without autocast


def test_an_unknown_autocast_dtype_a_16_bit_model_and_a_torchscript_prod_under_autocast_are_refused():
    ref = nn.Sequential(nn.Linear(8, 8)).eval()
    inputs = {"input": kcert.Gaussian((4, 8))}
    with pytest.raises(kcert.CaseError, match="autocast must be None, torch.bfloat16 or torch.float16"):
        kcert.certify_model(ref, copy.deepcopy(ref), inputs, autocast=torch.float64, **FAST)
    with pytest.raises(kcert.CaseError, match=r"prod_model has 2 parameters in another dtype \(0.weight: "
                                              r"torch.bfloat16\)"):
        kcert.certify_model(ref, copy.deepcopy(ref).bfloat16(), inputs, autocast=torch.bfloat16, **FAST)
    with pytest.raises(kcert.CaseError, match="certify a TorchScript prod without autocast"):
        kcert.certify_model(ref, torch.jit.script(copy.deepcopy(ref)), inputs, autocast=torch.bfloat16, **FAST)
    with pytest.raises(kcert.CaseError, match="give dtype=torch.float32"):
        kcert.certify_model(ref, copy.deepcopy(ref), inputs, autocast=torch.bfloat16,
                            **{**FAST, "dtype": torch.bfloat16})


def _model_file(path, options: str):
    path.write_text(
        f"import sys\nsys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})\n"
        "import torch, kcert\nfrom test_model_amp import llama_pair, INPUTS, ROTARY\n"
        "ref, prod = llama_pair()\n"
        "rope = kcert.ModelPair('rope', ref, prod, INPUTS, modules=ROTARY, dtype=torch.float32,\n"
        f"                       options={options})\n")
    return path


def test_the_command_line_runs_under_autocast_and_says_so(tmp_path, capsys):
    from kcert.cli import main

    path = _model_file(tmp_path / "pairs.py", "{'backward': False}")
    code = main(["model", str(path), "--autocast", "bfloat16", "-R", "64", "--no-end-to-end", "--no-peer-rules"])
    out = capsys.readouterr().out
    assert code == 1, out  # the rotary defect, which only autocast shows
    assert "autocast: both models ran under torch.autocast(bfloat16)" in out


def test_an_exported_case_keeps_autocast(tmp_path):
    from kcert.model.export import module_case

    path = _model_file(tmp_path / "pairs.py", "{'autocast': torch.bfloat16, 'backward': False}")
    case = module_case(str(path), "rope", "model.rotary_emb")
    assert case.training_format == "bfloat16"
    cert = kcert.certify(case, replicates=64, peer_rules=False)
    assert cert.verdict is Verdict.FAIL
