"""Matching modules across frameworks (``rename``, docs/model.md "Another framework's names"): the rules, their
errors, and a Hugging Face Llama against a port of it in another layout (benchmarks/model_port.py: Meta's module
names, interleaved complex rotary, sdpa, bare-tensor logits, weights converted from the Hugging Face state dict)."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import kcert
from kcert.errors import CaseError
from kcert.model.rename import Rename
from kcert.model.report import dumps, headline
from kcert.model.select import match
from kcert.verdict import Verdict

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_rules_rename_whole_names_first_match_first():
    rename = Rename.build({r"layers\.(\d+)\.attention": r"model.layers.\1.self_attn", r"norm": "model.norm",
                           r"layers\.(\d+)\.(.*)": r"model.layers.\1.\2"})
    assert rename.name("layers.3.attention") == "model.layers.3.self_attn"
    assert rename.name("norm") == "model.norm"
    # a whole-name match: the rule for "norm" leaves a name that only ends in it to the next rules
    assert rename.name("layers.0.attention_norm") == "model.layers.0.attention_norm"
    assert rename.name("output") == "output"  # no rule: kept
    assert rename.parameter("layers.1.attention.weight") == "model.layers.1.self_attn.weight"
    assert Rename.build(["a=b", ("c", "d")]).describe() == ["a=b", "c=d"]
    assert Rename.build(None) is None and Rename.build({}) is None


def test_a_function_renames_and_none_keeps():
    rename = Rename.build(lambda n: "x." + n if n.startswith("a") else None)
    assert rename.name("a1") == "x.a1" and rename.name("b") == "b"
    with pytest.raises(CaseError, match="returned int for 'b'"):
        Rename.build(lambda n: 3).name("b")


@pytest.mark.parametrize("spec, words", [
    (["layers"], "is not PATTERN=REPLACEMENT"),
    ({"layers(": "x"}, "is not a regular expression"),
    ([3], "must be a \\(pattern, replacement\\) pair"),
    (3, "got int"),
])
def test_malformed_rules_are_named(spec, words):
    with pytest.raises(CaseError, match=words):
        Rename.build(spec)


def _stack():
    return nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4))


def test_two_modules_given_one_name_or_a_rule_that_renames_nothing_is_an_error():
    with pytest.raises(CaseError, match="prod's modules '0' and '2' are both named 'fc'"):
        match(_stack(), _stack(), Rename.build({r"0|2": "fc"}))
    with pytest.raises(CaseError, match=r"rename no module of prod: 9=x"):
        match(_stack(), _stack(), Rename.build({"1": "act", "9": "x"}))
    with pytest.raises(CaseError, match=r"cannot rename '0'"):
        match(_stack(), _stack(), Rename.build({"0": r"\2"}))


def test_renamed_modules_match_and_unmatched_ones_keep_prod_names():
    ref = nn.Sequential()
    ref.add_module("proj", nn.Linear(4, 4))
    ref.add_module("act", nn.GELU())
    prod = nn.Sequential()
    prod.add_module("w1", nn.Linear(4, 4))
    prod.add_module("extra", nn.GELU())
    found = match(ref, prod, Rename.build({"w1": "proj"}))
    assert found.prod["proj"] is prod.w1 and found.prod_names == {"proj": "w1"}
    assert found.only_ref == ("act",) and found.only_prod == ("extra",)


transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(BENCHMARKS))
import model_port  # noqa: E402

INPUTS = {"input_ids": kcert.Integers((1, 16), 0, 128)}


def _hf_llama():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()


def test_a_port_in_another_layout_is_matched_through_the_rules():
    ref = _hf_llama()
    port = model_port.from_hf(ref)
    cert = kcert.certify_model(ref, port, INPUTS, rename=model_port.RENAME, backward=False, replicates=32,
                               peer_rules=False)
    assert cert.verdict is not Verdict.FAIL  # a faithful port; its rows WARN at R = 32 for lack of evidence
    norm = cert.row("model.layers.0.input_layernorm")
    assert norm.prod_module == "layers.0.attention_norm" and norm.prod_kind == "RMSNorm" and norm.certificate
    assert cert.row("lm_head").prod_module == "output"
    # the attention and the decoder layer take another signature (x, freqs): not run on ref's arguments
    for name in ("model.layers.0", "model.layers.0.self_attn"):
        row = cert.row(name)
        assert row.verdict is Verdict.SKIPPED and "forward(x, freqs) does not take" in row.skipped_reason
    # the end-to-end row pairs ref's logits with the port's bare tensor
    end = cert.row("", "end to end")
    assert end.certificate is not None and [o.name for o in end.certificate.outputs] == ["logits"]
    # prod's query and key weights are stored permuted: named under ref's names (parameters follow their module)
    (warning,) = cert.warnings
    assert "model.layers.0.self_attn.q_proj.weight" in warning and "k_proj.weight" in warning
    assert "v_proj" not in warning
    assert cert.provenance["renamed"]["model.layers.0.self_attn.q_proj"] == "layers.0.attention.wq"
    assert ("prod", "layers") in cert.unmatched and ("ref", "model.rotary_emb") in cert.unmatched
    payload = json.loads(dumps([cert]))
    rows = {(r["module"], r["direction"]): r for r in payload["rows"]}
    assert rows[("model.layers.0.mlp.gate_proj", "forward")]["prod_module"] == "layers.0.feed_forward.w1"

    # without the rules nothing matches: every module is unmatched, only the end-to-end row runs
    bare = kcert.certify_model(ref, port, INPUTS, backward=False, replicates=8, peer_rules=False)
    assert [r.direction for r in bare.rows] == ["end to end"]
    assert ("ref", "model.layers.0.self_attn.q_proj") in bare.unmatched


def test_a_defect_of_the_port_is_localized_under_both_names():
    ref = _hf_llama()
    port = model_port.eps_outside(model_port.from_hf(ref))  # layer 0's attention norm, in the model's dtype
    assert port.layers[0].attention_norm.weight.dtype == torch.bfloat16
    cert = kcert.certify_model(ref, port, INPUTS, rename=model_port.RENAME, modules=kcert.Modules(leaves=True),
                               end_to_end=False, replicates=32, peer_rules=False)
    first = cert.first_failure
    assert (first.module, first.prod_module, first.deciding_gate) == (
        "model.layers.0.input_layernorm", "layers.0.attention_norm", "algebra")
    assert [r.module for r in cert.failures] == ["model.layers.0.input_layernorm"] * 2  # forward and backward
    assert "model.layers.0.input_layernorm (prod: layers.0.attention_norm)" in headline(cert)


def test_the_classic_conversion_bug_fails_end_to_end_only():
    ref = _hf_llama()
    port = model_port.from_hf(ref, permute=False)  # query and key weights copied without the rotary permutation
    cert = kcert.certify_model(ref, port, INPUTS, rename=model_port.RENAME, modules=kcert.Modules(names=(
        "model.layers.0.self_attn.q_proj",)), backward=False, replicates=16, peer_rules=False)
    # the weights are ref's bit for bit, so nothing warns of them; the port's interleaved rotary reads them wrongly,
    # inside the attention that cannot run on ref's arguments: only the end-to-end row sees it
    assert cert.warnings == ()
    assert cert.row("model.layers.0.self_attn.q_proj").verdict is not Verdict.FAIL
    end = cert.row("", "end to end")
    assert end.verdict is Verdict.FAIL and end.deciding_gate == "algebra" and cert.first_failure is None
    assert "the model FAILs end to end, no selected module FAILs on its own" in headline(cert)


def test_an_adapter_certifies_the_ports_attention_and_localizes_the_conversion_bug():
    ref = _hf_llama()
    attention = kcert.Modules(names=("model.layers.0.self_attn",))
    good = kcert.certify_model(ref, model_port.from_hf(ref), INPUTS, rename=model_port.RENAME,
                               adapt=model_port.ADAPT, modules=attention, end_to_end=False, replicates=16,
                               peer_rules=False)
    for direction in ("forward", "backward"):
        row = good.row("model.layers.0.self_attn", direction)
        assert row.certificate is not None and row.verdict is not Verdict.FAIL
        assert row.certificate.gates["algebra"] is Verdict.PASS  # its own converted weights: the same function
    # the port returns a bare tensor for HF's (output, weights): it stands for output[0]; the weights are named
    forward = good.row("model.layers.0.self_attn")
    assert [o.name for o in forward.certificate.outputs] == ["output[0]"]
    assert any("output[1] (ref only)" in n for n in forward.notes)
    bad = kcert.certify_model(ref, model_port.from_hf(ref, permute=False), INPUTS, rename=model_port.RENAME,
                              adapt=model_port.ADAPT, modules=attention, end_to_end=False, backward=False,
                              replicates=8, peer_rules=False)
    first = bad.first_failure
    assert (first.module, first.prod_module, first.deciding_gate) == (
        "model.layers.0.self_attn", "layers.0.attention", "algebra")


def test_adapter_errors_are_named():
    ref = _hf_llama()
    port = model_port.from_hf(ref)
    common = dict(rename=model_port.RENAME, modules=kcert.Modules(names=("model.layers.0.self_attn",)),
                  end_to_end=False, backward=False, replicates=8, peer_rules=False)
    with pytest.raises(CaseError, match="pattern 'model.layers.0.attn' matches none of ref's modules"):
        kcert.certify_model(ref, port, INPUTS, adapt={"model.layers.0.attn": model_port.hf_arguments}, **common)
    with pytest.raises(kcert.KernelError, match="must return \\(args, kwargs\\)"):
        kcert.certify_model(ref, port, INPUTS, adapt={r".*self_attn": lambda a, k: k}, **common)
    # arguments the adapter makes that prod's forward still does not take: SKIPPED, saying so
    cert = kcert.certify_model(ref, port, INPUTS, adapt={r".*self_attn": lambda a, k: ((), {"y": 1})}, **common)
    row = cert.row("model.layers.0.self_attn")
    assert row.verdict is Verdict.SKIPPED and "cannot run on its adapter's arguments" in row.skipped_reason


def test_the_command_line_renames_and_export_keeps_the_pairs_own(tmp_path, capsys):
    from kcert.casefile import load_cases
    from kcert.cli import main

    src = tmp_path / "pairs.py"
    src.write_text(textwrap.dedent(f"""
        import sys, torch, transformers, kcert
        sys.path.insert(0, {str(BENCHMARKS)!r})
        import model_port

        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                          max_position_embeddings=64, attn_implementation="eager")
        torch.manual_seed(0)
        ref = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
        port = model_port.from_hf(ref)
        inputs = {{"input_ids": kcert.Integers((1, 16), 0, 128)}}
        plain = kcert.ModelPair("plain", ref, port, inputs)
        renamed = kcert.ModelPair("renamed", ref, port, inputs, options={{"rename": model_port.RENAME}})
    """))
    out = tmp_path / "r.json"
    args = ["model", str(src), "--case", "plain", "--modules", "model.norm", "--no-backward", "--no-end-to-end",
            "-R", "8", "--no-peer-rules", "--json", str(out)]
    rules = ["--rename", "norm=model.norm", "--rename", r"layers\.(\d+)=model.layers.\1"]
    assert main(args + rules) == 3  # unmatched modules hold it at WARN
    assert "model.norm (prod: norm)" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert [(r["module"], r["prod_module"]) for r in report["rows"]] == [("model.norm", "norm")]
    assert report["provenance"]["rename"] == ["norm=model.norm", r"layers\.(\d+)=model.layers.\1"]

    assert main(args + ["--rename", "nothing=x"]) == 2
    assert "rename no module of prod: nothing=x" in capsys.readouterr().err

    case = tmp_path / "case.py"
    export = ["model", str(src), "--case", "renamed", "--no-backward", "--export-case"]
    assert main(export + ["model.norm", str(case), "--rename", "norm=model.norm"]) == 2
    assert "set it there" in capsys.readouterr().err
    assert main(export + ["model.layers.0.input_layernorm", str(case)]) == 0
    (exported,) = load_cases(str(case))
    assert kcert.certify(exported, replicates=8, peer_rules=False).verdict is not Verdict.FAIL
