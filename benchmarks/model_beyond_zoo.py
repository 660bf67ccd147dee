"""``kcert.certify_model`` on Hugging Face architectures outside the study's zoo (docs/model.md, "Beyond the
zoo"): each built from a tiny transformers config with random weights (no download), eager attention against
sdpa, float32, every module row forward and backward and the end-to-end row, at a small R with the looks
capped (a run that every architecture finishes, not a certificate: at this R most rows WARN for lack of
evidence). What it shows: every architecture runs through recording, matching, the float64 oracle and the
backward cases, and no benign pair FAILs a row; the table counts the verdicts, the rows whose gradient
elements vanish in exact arithmetic (zeroed, docs/model.md) and the wall time.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/model_beyond_zoo.py [-R 16] [--only NAME ...] \\
        [--markdown docs/model.md]
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import torch

import kcert
from kcert.model import padded_mask

V, S = 128, 16
_C = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=V, max_position_embeddings=64)
MARK = "model_beyond_zoo"


def architectures() -> dict[str, tuple]:
    """name -> (config class, model class, config keywords, inputs)."""
    import transformers as tf

    ids = {"input_ids": kcert.Integers((2, S), 0, V)}
    return {
        "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel, dict(n_embd=64, n_layer=2, n_head=4, vocab_size=V,
                                                           n_positions=64), ids),
        "bigcode": (tf.GPTBigCodeConfig, tf.GPTBigCodeForCausalLM, dict(n_embd=64, n_layer=2, n_head=4, vocab_size=V,
                                                                        n_positions=64, multi_query=True), ids),
        "gpt_neox": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM, dict(_C, intermediate_size=128, rotary_pct=0.25), ids),
        "gptj": (tf.GPTJConfig, tf.GPTJForCausalLM, dict(n_embd=64, n_layer=2, n_head=4, vocab_size=V, rotary_dim=8,
                                                         n_positions=64), ids),
        "opt": (tf.OPTConfig, tf.OPTForCausalLM, dict(_C, ffn_dim=128, word_embed_proj_dim=64), ids),
        "falcon": (tf.FalconConfig, tf.FalconForCausalLM, dict(_C, new_decoder_architecture=True, num_kv_heads=2,
                                                               bias=True), ids),
        "phi3": (tf.Phi3Config, tf.Phi3ForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2,
                                                         pad_token_id=0), ids),
        "qwen2_moe": (tf.Qwen2MoeConfig, tf.Qwen2MoeForCausalLM, dict(_C, intermediate_size=128,
                                                                      moe_intermediate_size=32,
                                                                      shared_expert_intermediate_size=64,
                                                                      num_experts=4, num_experts_per_tok=2,
                                                                      num_key_value_heads=2), ids),
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2,
                                                            head_dim=16), ids),
        "bert": (tf.BertConfig, tf.BertModel, dict(_C, intermediate_size=128),
                 {**ids, "attention_mask": kcert.Integers((2, S), 1, 2)}),
        "vit": (tf.ViTConfig, tf.ViTModel, dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                intermediate_size=128, image_size=32, patch_size=8),
                {"pixel_values": kcert.Gaussian((2, 3, 32, 32))}),
        "t5": (tf.T5Config, tf.T5ForConditionalGeneration, dict(d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                                                num_heads=4, vocab_size=V),
               {**ids, "decoder_input_ids": kcert.Integers((2, 8), 0, V)}),
        "gemma3": (tf.Gemma3TextConfig, tf.Gemma3ForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2,
                                                                   head_dim=16, sliding_window=8), ids),
        "olmo2": (tf.Olmo2Config, tf.Olmo2ForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2), ids),
        "phi": (tf.PhiConfig, tf.PhiForCausalLM, dict(_C, intermediate_size=128, partial_rotary_factor=0.5), ids),
        "stablelm": (tf.StableLmConfig, tf.StableLmForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2),
                     ids),
        "cohere": (tf.CohereConfig, tf.CohereForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2), ids),
        "granite": (tf.GraniteConfig, tf.GraniteForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2),
                    ids),
        "deepseek_v3": (tf.DeepseekV3Config, tf.DeepseekV3ForCausalLM,  # multi-head latent attention, routed experts
                        dict(_C, intermediate_size=128, num_key_value_heads=4, n_routed_experts=4,
                             num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16, q_lora_rank=32,
                             qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, first_k_dense_replace=1,
                             n_group=1, topk_group=1), ids),
        "smollm3": (tf.SmolLM3Config, tf.SmolLM3ForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2,
                                                                  pad_token_id=0), ids),
        "glm4": (tf.Glm4Config, tf.Glm4ForCausalLM, dict(_C, intermediate_size=128, num_key_value_heads=2, head_dim=16,
                                                         pad_token_id=0), ids),
        "llama_left_padded": (tf.LlamaConfig, tf.LlamaForCausalLM,
                              dict(_C, intermediate_size=128, num_key_value_heads=2),
                              {**ids, "attention_mask": padded_mask(2, S, min_tokens=6)}),
    }


def pair(config_cls, model_cls, config: dict):
    def build(attn):
        cfg = config_cls(**config)
        cfg._attn_implementation = attn
        cfg.use_cache = False
        torch.manual_seed(0)
        return model_cls(cfg).float().eval()

    ref, prod = build("eager"), build("sdpa")
    prod.load_state_dict(ref.state_dict())
    return ref, prod


def run(name: str, spec: tuple, replicates: int) -> dict:
    config_cls, model_cls, config, inputs = spec
    ref, prod = pair(config_cls, model_cls, config)
    start = time.perf_counter()
    cert = kcert.certify_model(ref, prod, inputs, dtype=torch.float32, replicates=replicates,
                               max_replicates=replicates, name=name, peer_rules=False)
    counts = collections.Counter(r.verdict.value for r in cert.rows)
    # the parameters whose gradient elements vanish (named by their module's last name: c_attn.bias), and in how
    # many backward rows
    zeroed = collections.Counter(name for r in cert.rows for name in {
        ".".join(m.split(".")[-2:]) for n in r.notes if n.startswith("elements of gradients")
        for m in re.findall(r"([\w.]+) \(\d+ of \d+\)", n)})
    return {"pair": name, "rows": len(cert.rows), "counts": dict(counts), "verdict": cert.verdict.value,
            "first_failure": cert.first_failure.module if cert.first_failure else None,
            "fails": [f"{r.module or '(model)'} {r.direction}" for r in cert.failures],
            "zeroed": dict(zeroed), "padding": cert.provenance.get("padding"), "warnings": len(cert.warnings),
            "wall": time.perf_counter() - start}


def markdown(results: list[dict], replicates: int) -> str:
    lines = [f"R = {replicates} (looks capped), float32, eager against sdpa, every row forward and backward and end "
             "to end; seed 0.", "",
             "| pair | rows | PASS | WARN | FAIL | SKIPPED | FAIL rows | gradient elements zeroed | padding | wall |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        c = r["counts"]
        lines.append(f"| `{r['pair']}` | {r['rows']} | {c.get('PASS', 0)} | {c.get('WARN', 0)} | {c.get('FAIL', 0)} | "
                     f"{c.get('SKIPPED', 0)} | {', '.join(r['fails']) or '-'} | "
                     f"{', '.join(f'`{z}` ({n} rows)' for z, n in r['zeroed'].items()) or '-'} | "
                     f"{r['padding'] or '-'} | {r['wall']:.0f} s |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-R", "--replicates", type=int, default=16)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--markdown", default=None, help="write the table between this file's markers")
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = []
    for name, spec in architectures().items():
        if args.only and name not in args.only:
            continue
        results.append(run(name, spec, args.replicates))
        r = results[-1]
        print(f"{name}: {r['verdict']}, {r['counts']}, FAIL rows {r['fails'] or '-'}, zeroed {r['zeroed'] or '-'}, "
              f"{r['wall']:.0f} s", flush=True)
    table = markdown(results, args.replicates)
    print(table)
    if args.markdown:
        text = open(args.markdown).read()
        begin, end = f"<!-- {MARK}: begin (generated) -->", f"<!-- {MARK}: end -->"
        i, j = text.index(begin) + len(begin), text.index(end)
        with open(args.markdown, "w") as f:
            f.write(text[:i] + "\n" + table + "\n" + text[j:])


if __name__ == "__main__":
    main()
