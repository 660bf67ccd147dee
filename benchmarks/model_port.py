"""A Llama written in another framework's layout, and ``kcert model`` across the two layouts (``rename``, ``adapt``).

The port has the module names of Meta's reference layout (``tok_embeddings``, ``layers.N.attention.wq``,
``feed_forward.w1``, ...), its interleaved complex-number rotary embedding (so the query and key weights are stored
permuted against Hugging Face's), attention through ``scaled_dot_product_attention``, and returns its logits as a
bare tensor. Its weights are converted from a Hugging Face ``LlamaForCausalLM``'s state dict, as a user porting a
checkpoint does. Used by tests/test_model_rename.py (tiny) and, run as a script, on the zoo's Llama
(benchmarks/model_zoo.py) with defects injected into the port; the table goes to docs/model.md:

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_port.py [-R 1024] [--backward] \
        [--json benchmarks/data/model_port.json] [--markdown docs/model.md]
"""

import argparse
import json
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# prod's (this layout's) qualified names -> ref's (Hugging Face's), as regular expressions on whole names
RENAME = {
    r"tok_embeddings": r"model.embed_tokens",
    r"layers\.(\d+)": r"model.layers.\1",
    r"layers\.(\d+)\.attention": r"model.layers.\1.self_attn",
    r"layers\.(\d+)\.attention\.w([qkv])": r"model.layers.\1.self_attn.\2_proj",
    r"layers\.(\d+)\.attention\.wo": r"model.layers.\1.self_attn.o_proj",
    r"layers\.(\d+)\.attention_norm": r"model.layers.\1.input_layernorm",
    r"layers\.(\d+)\.ffn_norm": r"model.layers.\1.post_attention_layernorm",
    r"layers\.(\d+)\.feed_forward": r"model.layers.\1.mlp",
    r"layers\.(\d+)\.feed_forward\.w1": r"model.layers.\1.mlp.gate_proj",
    r"layers\.(\d+)\.feed_forward\.w3": r"model.layers.\1.mlp.up_proj",
    r"layers\.(\d+)\.feed_forward\.w2": r"model.layers.\1.mlp.down_proj",
    r"norm": r"model.norm",
    r"output": r"lm_head",
}


def hf_arguments(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """What a Hugging Face decoder layer or attention receives (``hidden_states``, ``position_embeddings=(cos,
    sin)``, masks, cache flags) made into what the port's block and attention take: ``(x, freqs)``, the rotation
    as complex numbers from the first half of cos and sin (Hugging Face repeats the angles over both halves)."""
    x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    cos, sin = kwargs["position_embeddings"]
    half = cos.shape[-1] // 2
    return (x, torch.complex(cos[0, :, :half].float(), sin[0, :, :half].float())), {}


# ref's modules (regular expressions on whole names) -> the adapter of the port's module there
ADAPT = {r"model\.layers\.\d+(\.self_attn)?": hf_arguments}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class EpsOutsideNorm(RMSNorm):
    """A porting defect: eps added outside the square root."""

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)).to(x.dtype)


def rotate(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x[2i], x[2i+1]) of the last axis by the positions' angles, as complex numbers."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs[:, None, :]).flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.wq = nn.Linear(dim, heads * head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(heads * head_dim, dim, bias=False)

    def scale(self, x) -> float | None:
        return None  # sdpa's own: 1 / sqrt(head width)

    def forward(self, x, freqs):
        b, s, _ = x.shape
        q = rotate(self.wq(x).view(b, s, self.heads, self.head_dim), freqs)
        k = rotate(self.wk(x).view(b, s, self.kv_heads, self.head_dim), freqs)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.heads != self.kv_heads,
                                             scale=self.scale(x))
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class WideScaleAttention(Attention):
    """A porting defect: scores scaled by 1/sqrt(model width) instead of 1/sqrt(head width)."""

    def scale(self, x) -> float:
        return x.shape[-1] ** -0.5


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.hidden_size
        self.attention = Attention(dim, config.num_attention_heads, config.num_key_value_heads, config.head_dim)
        self.feed_forward = FeedForward(dim, config.intermediate_size)
        self.attention_norm = RMSNorm(dim, config.rms_norm_eps)
        self.ffn_norm = RMSNorm(dim, config.rms_norm_eps)

    def forward(self, x, freqs):
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # the rotary frequencies as Hugging Face's Llama keeps them: a buffer made in float32, so cast with the
        # model (to bf16 by .to(torch.bfloat16), as Hugging Face's is; kept in float32 instead, the port computes
        # another real function than its reference: docs/model.md, "Another framework's names")
        half = torch.arange(0, config.head_dim, 2, dtype=torch.int64).float() / config.head_dim
        self.register_buffer("inv_freq", 1.0 / (config.rope_parameters["rope_theta"] ** half), persistent=False)

    def forward(self, input_ids):
        h = self.tok_embeddings(input_ids)
        angles = torch.outer(torch.arange(input_ids.shape[1]).float(), self.inv_freq.float())
        freqs = torch.polar(torch.ones_like(angles), angles)
        for layer in self.layers:
            h = layer(h, freqs)
        return self.output(self.norm(h))


def _interleave(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """A Hugging Face query/key weight (each head's rotated halves apart) in the interleaved layout (pairs side by
    side): the inverse of the permutation Hugging Face's conversion applies to Meta's checkpoints."""
    out, dim = weight.shape
    return weight.view(heads, 2, out // heads // 2, dim).transpose(1, 2).reshape(out, dim)


def from_hf(hf_model, permute: bool = True) -> Transformer:
    """The port with ``hf_model``'s weights converted into its layout (``permute=False``: the query and key weights
    copied as they are, the classic conversion bug)."""
    config = hf_model.config
    port = Transformer(config)
    inv_freq = port.inv_freq  # float32, before the cast rounds it
    rules = list(RENAME.items())
    state = {}
    hf = hf_model.state_dict()
    for name in port.state_dict():
        module, _, leaf = name.rpartition(".")
        target = next(re.fullmatch(p, module).expand(r) for p, r in rules if re.fullmatch(p, module))
        value = hf[f"{target}.{leaf}"]
        if permute and module.endswith((".wq", ".wk")):
            heads = config.num_attention_heads if module.endswith(".wq") else config.num_key_value_heads
            value = _interleave(value, heads)
        state[name] = value
    port = port.to(next(hf_model.parameters()).dtype)
    port.load_state_dict(state)
    # the rotary frequencies in the dtype ref keeps its own in (float32 as a loaded checkpoint; bf16 after .to())
    port.inv_freq = inv_freq.to(hf_model.model.rotary_emb.inv_freq.dtype)
    return port.eval()


class GeluFeedForward(FeedForward):
    """A porting defect: the tanh-approximate GELU in place of SiLU."""

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x), approximate="tanh") * self.w3(x))


def _swap(port: Transformer, layer: int, name: str, new: nn.Module) -> Transformer:
    old = getattr(port.layers[layer], name)
    new.load_state_dict(old.state_dict())
    setattr(port.layers[layer], name, new.to(next(old.parameters()).dtype))
    return port


def eps_outside(port: Transformer) -> Transformer:
    norm = port.layers[0].attention_norm
    return _swap(port, 0, "attention_norm", EpsOutsideNorm(norm.weight.numel(), norm.eps))


def wide_scale(port: Transformer) -> Transformer:
    att = port.layers[1].attention
    return _swap(port, 1, "attention", WideScaleAttention(att.wq.in_features, att.heads, att.kv_heads, att.head_dim))


def gelu_mlp(port: Transformer) -> Transformer:
    ff = port.layers[1].feed_forward
    return _swap(port, 1, "feed_forward", GeluFeedForward(ff.w1.in_features, ff.w1.out_features))


# name -> (how the port is made from the Hugging Face model, the module injected (ref's name), what it is)
PAIRS = {
    "port_faithful": (lambda hf: from_hf(hf), None, "benign: a faithful port"),
    "port_eps_outside": (lambda hf: eps_outside(from_hf(hf)), "model.layers.0.input_layernorm",
                         "defect: eps outside the square root in layer 0's attention norm"),
    "port_gelu_mlp": (lambda hf: gelu_mlp(from_hf(hf)), "model.layers.1.mlp",
                      "defect: tanh GELU for SiLU in layer 1's feed-forward"),
    "port_attention_scale": (lambda hf: wide_scale(from_hf(hf)), "model.layers.1.self_attn",
                             "defect: attention scores scaled by the model width in layer 1"),
    "port_unpermuted": (lambda hf: from_hf(hf, permute=False), "model.layers.0.self_attn, model.layers.1.self_attn",
                        "defect: query and key weights converted without the rotary permutation (every layer)"),
}


def loss(out, batch: dict) -> torch.Tensor:
    """Next-token cross entropy in float32, of Hugging Face's output or the port's bare logits."""
    logits = getattr(out, "logits", out)
    ids = batch["input_ids"]
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def run(name: str, replicates: int, backward: bool) -> dict:
    import kcert
    import model_zoo

    make, injected, what = PAIRS[name]
    ref = model_zoo.build("llama")
    start = time.perf_counter()
    cert = kcert.certify_model(ref, make(ref), model_zoo.inputs("llama"), rename=RENAME, adapt=ADAPT, loss=loss,
                               backward=backward, replicates=replicates, name=name)
    counts: dict[str, int] = {}
    for row in cert.rows:
        if row.direction != "end to end":
            counts[row.verdict.value] = counts.get(row.verdict.value, 0) + 1
    first = cert.first_failure
    if injected is None:
        localized = first is None and not cert.failures
    else:  # the first failure is an injected module, and every FAIL row one of them, an ancestor, or end to end
        hit = injected.split(", ")
        localized = first is not None and first.module in hit and all(
            r.module == "" or any(h == r.module or h.startswith(r.module + ".") for h in hit) for r in cert.failures)
    return {"pair": name, "localized": localized, "what": what, "injected": injected, "verdict": cert.verdict.value,
            "first_failure": None if first is None else (first.module or "(model)"),
            "first_failure_prod": None if first is None else first.prod_module,
            "fails": [f"{r.module or '(model)'} {r.direction}" for r in cert.failures],
            "warns": [f"{r.module or '(model)'} {r.direction} ({r.deciding_gate}: {r.figure})" for r in cert.rows
                      if r.verdict.value == "WARN"],
            "module_rows": counts, "end_to_end": cert.row("", "end to end").verdict.value,
            "end_to_end_figure": cert.row("", "end to end").figure,
            "skipped": sorted({r.module for r in cert.rows if r.verdict.value == "SKIPPED"}),
            "unmatched": [f"{n} ({m} only)" for m, n in cert.unmatched], "warnings": list(cert.warnings),
            "replicates": replicates, "backward": backward, "wall_s": time.perf_counter() - start}


def markdown(results: list[dict]) -> str:
    lines = ["Seed 0, the zoo's Llama (bf16) against its port with `rename` and `adapt`; every row of the default "
             "selection and the end-to-end row (logits and LM loss), the variance gate's looks up to 4R.", "",
             "| pair | R | rows | injected (ref's name) | first failure (prod's name) | as injected | FAIL rows | "
             "module rows | end to end | weights warning | wall |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rows = ", ".join(f"{n} {v}" for v, n in sorted(r["module_rows"].items()))
        first = "none" if r["first_failure"] is None else (
            f"`{r['first_failure']}`" + (f" (`{r['first_failure_prod']}`)" if r["first_failure_prod"] else ""))
        lines.append(f"| `{r['pair']}` | {r['replicates']} | {'fwd + bwd' if r['backward'] else 'fwd'} | "
                     f"{r['injected'] or '-'} | {first} | {'yes' if r['localized'] else 'NO'} | "
                     f"{', '.join(r['fails']) or '-'} | {rows} | {r['end_to_end']} ({r['end_to_end_figure']}) | "
                     f"{'yes' if r['warnings'] else 'no'} | {r['wall_s']:.0f} s |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-R", "--replicates", type=int, default=1024)
    ap.add_argument("--backward", action="store_true", help="the backward rows too (default: forward rows)")
    ap.add_argument("--pairs", nargs="*", default=list(PAIRS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", nargs="*", default=None, help="only render these JSON results (no run)")
    ap.add_argument("--markdown", default=None, help="write the table between this file's model_port markers")
    args = ap.parse_args()
    if args.table:
        results = [r for path in args.table for r in json.load(open(path))]
    else:
        torch.set_num_threads(1)
        results = []
        for name in args.pairs:
            results.append(run(name, args.replicates, args.backward))
            r = results[-1]
            print(f"{name}: {r['verdict']}, first failure {r['first_failure']}, FAIL rows {r['fails'] or '-'}, "
                  f"module rows {r['module_rows']}, end to end {r['end_to_end']} ({r['end_to_end_figure']}), "
                  f"{r['wall_s']:.0f} s", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    table = markdown(results)
    print(table)
    if args.markdown:
        from model_study import write_markdown

        write_markdown(Path(args.markdown), table + "\n", "model_port")


if __name__ == "__main__":
    main()
