"""Tiny Hugging Face language models with random weights, and model pairs for ``kcert.certify_model``.

No download: each model is built from a transformers config (2 layers, hidden 256, vocabulary 512,
bf16), its weights drawn from a seeded generator with kcert's trained-like probes (norm gains spread
around 1, or around 0 for Gemma's ``1 + w``; linear weights ``N(0, 1/fan_in)`` with 1 % of entries
10x larger, token embeddings at std 0.02), so a defect that only shows on non-trivial gains (Gemma's ``1 + w`` in bf16) is not
hidden by an all-ones or all-zeros initialisation.

A pair is (ref, prod): prod is a deepcopy of ref patched at one known qualified module (a defect
reproducing a public defect class) or changed benignly (another attention implementation, a compiled
submodule, an algebraically equal rewrite). Parameters stay identical. Each pair has a half,
"tuning" or "validation", fixed by its name alone as the control suite fixes its controls'
(docs/controls.md, "Tuning discipline").

    python benchmarks/model_zoo.py            # the end-to-end table: max |logit difference| per pair
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import kcert
from kcert.catalog.norms import gains
from kcert.catalog.probes import trained_weights

DTYPE = torch.bfloat16
BATCH, SEQ, VOCAB = 2, 64, 512
ARCHS = ("llama", "qwen2", "gemma", "mistral", "mixtral")

_COMMON = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
               tie_word_embeddings=False)


def use_vocab(size: int) -> None:
    """Build the zoo's models and token probes with a vocabulary of ``size`` tokens from now on (the study's is
    512: docs/model.md, "Study", says what that choice does to a norm's rounding bias)."""
    global VOCAB
    VOCAB = size
    _COMMON["vocab_size"] = size


def config(arch: str, attn: str = "eager"):
    """The transformers config of ``arch`` (one of ``ARCHS``), with the attention implementation ``attn``."""
    import transformers as tf

    if arch == "llama":
        cfg = tf.LlamaConfig(**_COMMON, rms_norm_eps=1e-6)
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(**_COMMON, rms_norm_eps=1e-6, use_sliding_window=False)
    elif arch == "gemma":
        # Gemma: head_dim explicit, tanh GELU, tied embeddings, (1 + w) norms
        cfg = tf.GemmaConfig(**{**_COMMON, "tie_word_embeddings": True}, head_dim=64,
                             hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6)
    elif arch == "mistral":
        # head_dim 32 set explicitly, unlike hidden / heads = 64 (as Mistral-NeMo: 128 against 5120 / 32)
        cfg = tf.MistralConfig(**_COMMON, head_dim=32, sliding_window=None, rms_norm_eps=1e-6)
    elif arch == "mixtral":
        cfg = tf.MixtralConfig(**{**_COMMON, "intermediate_size": 256}, num_local_experts=4,
                               num_experts_per_tok=2, sliding_window=None, rms_norm_eps=1e-6)
    else:
        raise ValueError(f"model_zoo.config: unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    cfg.use_cache = False  # a recorded cache would be mutated by every replay of a module
    cfg._attn_implementation = attn
    return cfg


def _model_class(arch: str):
    import transformers as tf

    return {"llama": tf.LlamaForCausalLM, "qwen2": tf.Qwen2ForCausalLM, "gemma": tf.GemmaForCausalLM,
            "mistral": tf.MistralForCausalLM, "mixtral": tf.MixtralForCausalLM}[arch]


def _is_norm(name: str) -> bool:
    return name.endswith("norm.weight")


def build(arch: str, seed: int = 0, attn: str = "eager") -> nn.Module:
    """``arch``'s causal LM with trained-like weights drawn from ``seed``, parameters in bf16, eval mode.
    Buffers (RoPE's ``inv_freq``) stay float32 as a checkpoint loaded by transformers keeps them."""
    torch.manual_seed(seed)
    model = _model_class(arch)(config(arch, attn))
    g = torch.Generator().manual_seed(seed)
    cpu = torch.device("cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if _is_norm(name):
                probe = gains(p.shape[0], "gemma" if arch == "gemma" else "llama")
            else:  # embeddings at HF's initializer range 0.02 (real token embeddings are as small)
                std = 0.02 if name.endswith("embed_tokens.weight") else p.shape[-1] ** -0.5
                probe = trained_weights(tuple(p.shape), std=std, large_fraction=0.01,
                                        large_scale=10.0)
            p.copy_(probe.sample(g, cpu, torch.float32).reshape(p.shape))
            p.data = p.data.to(DTYPE)
    return model.eval()


def inputs(arch: str) -> dict[str, kcert.Probe]:
    """The probe of the model's inputs: token ids, batch 2 x 64 (a full causal batch, no padding, so no
    attention_mask is needed: the model builds its causal mask itself)."""
    return {"input_ids": kcert.Integers((BATCH, SEQ), 0, VOCAB)}


def lm_loss(out, batch: dict) -> torch.Tensor:
    """Next-token cross entropy of the logits against the input ids, in float32."""
    logits = out.logits if hasattr(out, "logits") else out[0]
    ids = batch["input_ids"]
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def submodule(model: nn.Module, name: str) -> nn.Module:
    return model.get_submodule(name)


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent), leaf, new)


# --- defects ---------------------------------------------------------------------------------------


class GemmaNormGainBf16(nn.Module):
    """Gemma's RMSNorm with ``1 + w`` formed in bf16 before the float32 product (HF forms it in float32)."""

    def __init__(self, ref: nn.Module):
        super().__init__()
        self.weight, self.eps = ref.weight, ref.eps

    def forward(self, x):
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight).float()).type_as(x)  # the defect: 1 + w rounded to bf16


class RMSNormEpsOutsideSqrt(nn.Module):
    """Llama's RMSNorm with eps added to the RMS instead of the mean square: ``x / (sqrt(ms) + eps)``."""

    def __init__(self, ref: nn.Module):
        super().__init__()
        self.weight, self.variance_epsilon = ref.weight, ref.variance_epsilon

    def forward(self, x):
        dtype = x.dtype
        xf = x.float()
        xf = xf / (torch.sqrt(xf.pow(2).mean(-1, keepdim=True)) + self.variance_epsilon)
        return self.weight * xf.to(dtype)


class RMSNormNoEps(nn.Module):
    """An RMSNorm that drops eps (the dropped-term class); compiled by the pair that uses it."""

    def __init__(self, ref: nn.Module):
        super().__init__()
        self.weight = ref.weight

    def forward(self, x):
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True))
        return self.weight * xf.to(dtype)


class _NormWrongGrad(torch.autograd.Function):
    """HF's RMSNorm forward, exactly; a backward that treats the RMS as a constant (drops the
    ``- x r^3 mean(g w x)`` term): right forward, wrong input gradient."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        normed = (xf * r).to(x.dtype)
        ctx.save_for_backward(r, normed, weight)
        ctx.dtype = x.dtype
        return weight * normed

    @staticmethod
    def backward(ctx, grad):
        r, normed, weight = ctx.saved_tensors
        grad_x = (grad.float() * weight.float() * r).to(ctx.dtype)  # the defect: d r / d x dropped
        grad_w = (grad * normed).reshape(-1, normed.shape[-1]).sum(0).to(weight.dtype)
        return grad_x, grad_w, None


class RMSNormWrongBackward(nn.Module):
    def __init__(self, ref: nn.Module):
        super().__init__()
        self.weight, self.variance_epsilon = ref.weight, ref.variance_epsilon

    def forward(self, x):
        return _NormWrongGrad.apply(x, self.weight, self.variance_epsilon)


def bf16_softmax(scores: torch.Tensor) -> torch.Tensor:
    """``llama_softmax_bf16``'s softmax: the exponentials and their row sum rounded to bf16, a bf16 division. torch
    sums a bf16 tensor in float32 and rounds the sum once, so the denominator is not accumulated in bf16: this is
    not #27341's defect (:func:`online_bf16_softmax` is; docs/model.md, "Study")."""
    e = torch.exp(scores - scores.amax(-1, keepdim=True))  # bf16
    return e / e.sum(-1, keepdim=True)


def online_bf16_softmax(scores: torch.Tensor) -> torch.Tensor:
    """``llama_online_softmax_bf16``'s softmax: a GPU kernel's online softmax with its running max and denominator
    held and rounded in bf16 (kcert's catalogue, as the control ``softmax_denominator_bf16``: four lanes per row)."""
    from kcert.catalog.softmax import online_softmax

    return online_softmax(scores, acc_dtype=torch.bfloat16, lanes=4)


def _attention_with(softmax: Callable) -> Callable:
    """Eager attention (HF's, which computes the softmax in float32 and rounds its result once) with ``softmax``."""
    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        from transformers.models.llama.modeling_llama import repeat_kv

        k = repeat_kv(key, module.num_key_value_groups)
        v = repeat_kv(value, module.num_key_value_groups)
        scores = torch.matmul(query, k.transpose(2, 3)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = softmax(scores)
        return torch.matmul(weights, v).transpose(1, 2).contiguous(), weights
    return attention


def _router_not_renormalised(router: nn.Module) -> Callable:
    def forward(hidden_states):
        hidden_states = hidden_states.reshape(-1, router.hidden_dim)
        logits = F.linear(hidden_states, router.weight)
        probs = torch.softmax(logits.float(), dim=-1)
        top, idx = torch.topk(probs, router.top_k, dim=-1)  # the defect: top-k weights not renormalised
        return logits, top, idx
    return forward


def _use_attention_function(model: nn.Module, name: str, key: str, fn) -> None:
    """Give the attention module ``name`` its own config whose attention implementation is ``fn``."""
    from transformers import AttentionInterface

    AttentionInterface.register(key, fn)
    attn = model.get_submodule(name)
    attn.config = copy.copy(attn.config)
    attn.config._attn_implementation = key


def gemma_gain_bf16(m):
    _replace(m, "model.layers.0.input_layernorm", GemmaNormGainBf16(m.get_submodule("model.layers.0.input_layernorm")))


def llama_eps_outside_sqrt(m):
    name = "model.layers.0.input_layernorm"
    _replace(m, name, RMSNormEpsOutsideSqrt(m.get_submodule(name)))


def mistral_scale_from_hidden(m):
    attn = m.get_submodule("model.layers.1.self_attn")
    attn.scaling = (m.config.hidden_size // m.config.num_attention_heads) ** -0.5  # 64^-0.5, not head_dim 32^-0.5


def qwen2_inv_freq_bf16(m):
    rot = m.get_submodule("model.rotary_emb")
    rot.inv_freq = rot.inv_freq.to(torch.bfloat16).float()


def gemma_exact_gelu(m):
    _replace(m, "model.layers.1.mlp.act_fn", nn.GELU())  # erf GELU where Gemma was trained with tanh


def mistral_compiled_norm_no_eps(m):
    name = "model.layers.0.post_attention_layernorm"
    norm = RMSNormNoEps(m.get_submodule(name))
    norm.compile()  # in place: the qualified parameter names stay
    _replace(m, name, norm)


def qwen2_norm_wrong_backward(m):
    name = "model.layers.0.post_attention_layernorm"
    _replace(m, name, RMSNormWrongBackward(m.get_submodule(name)))


def mixtral_topk_not_renormalised(m):
    router = m.get_submodule("model.layers.1.mlp.gate")
    router.forward = _router_not_renormalised(router)


def llama_softmax_bf16(m):
    _use_attention_function(m, "model.layers.0.self_attn", "kcert_zoo_bf16_softmax", _attention_with(bf16_softmax))


def llama_online_softmax_bf16(m):
    _use_attention_function(m, "model.layers.0.self_attn", "kcert_zoo_online_bf16_softmax",
                            _attention_with(online_bf16_softmax))


# --- benign changes --------------------------------------------------------------------------------


def sdpa(m):
    m.config._attn_implementation = "sdpa"


def compile_layer_parts(m):
    """torch.compile (inductor) of layer 0's MLP and both of its norms, in place."""
    for name in ("model.layers.0.mlp", "model.layers.0.input_layernorm", "model.layers.0.post_attention_layernorm"):
        m.get_submodule(name).compile()


class FusedSwiGLU(nn.Module):
    """A fused-kernel MLP (as Liger's SwiGLU): ``silu(gate) * up`` in float32 with SiLU written as
    ``0.5 g (1 + tanh(g / 2))``, rounded to bf16 once; HF rounds SiLU's output and the product each to bf16.
    Algebraically HF's MLP, and closer to the real function."""

    def __init__(self, ref: nn.Module):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = ref.gate_proj, ref.up_proj, ref.down_proj

    def forward(self, x):
        g, u = self.gate_proj(x).float(), self.up_proj(x).float()
        return self.down_proj((0.5 * g * (1.0 + torch.tanh(0.5 * g)) * u).to(x.dtype))


def fused_swiglu(m):
    for i in range(m.config.num_hidden_layers):
        name = f"model.layers.{i}.mlp"
        _replace(m, name, FusedSwiGLU(m.get_submodule(name)))


class FusedRMSNorm(nn.Module):
    """A fused-kernel RMSNorm: ``w * x / sqrt(sum(x^2) / n + eps)`` in float32, rounded to bf16 once (HF
    rounds the normalised x to bf16, then multiplies by w in bf16). Algebraically HF's."""

    def __init__(self, ref: nn.Module):
        super().__init__()
        self.weight, self.variance_epsilon = ref.weight, ref.variance_epsilon

    def forward(self, x):
        xf = x.float()
        ms = xf.pow(2).sum(-1, keepdim=True) * (1.0 / x.shape[-1])
        return (self.weight.float() * xf / torch.sqrt(ms + self.variance_epsilon)).to(x.dtype)


def fused_norms(m):
    for name, mod in list(m.named_modules()):
        if name and type(mod).__name__.endswith("RMSNorm"):
            _replace(m, name, FusedRMSNorm(mod))


# --- the pairs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """A model pair of the study: ``patch`` turns a deepcopy of ref into prod. ``module`` is the qualified
    name of the module where the defect is injected (None for a benign pair); ``backward_only``: prod's
    forward equals ref's bit for bit, only its gradient is wrong."""

    name: str
    arch: str
    kind: str  # "defect" | "benign"
    patch: Callable[[nn.Module], None]
    module: str | None
    source: str
    what: str
    backward_only: bool = False

    @property
    def half(self) -> str:
        """"tuning" or "validation", by the first byte of the name's SHA-256 (as ``Control.half``)."""
        return "tuning" if hashlib.sha256(self.name.encode()).digest()[0] % 2 == 0 else "validation"


PAIRS: tuple[Pair, ...] = (
    Pair("gemma_norm_gain_bf16", "gemma", "defect", gemma_gain_bf16, "model.layers.0.input_layernorm",
         "transformers PR #29402", "Gemma's (1 + w) formed in bf16 in layer 0's input norm"),
    Pair("llama_eps_outside_sqrt", "llama", "defect", llama_eps_outside_sqrt,
         "model.layers.0.input_layernorm", "gpt-neox #1342", "eps added to the RMS, not the mean square"),
    Pair("mistral_scale_from_hidden", "mistral", "defect", mistral_scale_from_hidden, "model.layers.1.self_attn",
         "Mistral-NeMo head_dim != hidden / heads", "attention scale from hidden / heads (64) not head_dim (32)"),
    Pair("qwen2_inv_freq_bf16", "qwen2", "defect", qwen2_inv_freq_bf16, "model.rotary_emb",
         "sglang-jax #1472, gpt-neox #1003", "RoPE inv_freq rounded to bf16"),
    Pair("gemma_exact_gelu", "gemma", "defect", gemma_exact_gelu, "model.layers.1.mlp.act_fn",
         "transformers PR #29402", "erf GELU in layer 1's MLP where Gemma uses the tanh approximation"),
    Pair("mistral_compiled_norm_no_eps", "mistral", "defect", mistral_compiled_norm_no_eps,
         "model.layers.0.post_attention_layernorm", "dropped-term class (docs/controls.md)",
         "a torch.compile'd RMSNorm that drops eps"),
    Pair("qwen2_norm_wrong_backward", "qwen2", "defect", qwen2_norm_wrong_backward,
         "model.layers.0.post_attention_layernorm", "Liger-Kernel #370 class (wrong custom backward)",
         "autograd.Function RMSNorm: forward exact, backward drops d rms / d x", backward_only=True),
    Pair("mixtral_topk_not_renormalised", "mixtral", "defect", mixtral_topk_not_renormalised,
         "model.layers.1.mlp.gate", "torchtitan #1448", "router's top-k weights not renormalised"),
    Pair("llama_softmax_bf16", "llama", "defect", llama_softmax_bf16, "model.layers.0.self_attn",
         "transformers #27341", "layer 0's attention softmax with a bf16 denominator (its exponentials and row "
         "sum rounded to bf16; torch sums bf16 in float32, so the sum is not accumulated in bf16: docs/model.md)"),
    Pair("llama_online_softmax_bf16", "llama", "defect", llama_online_softmax_bf16, "model.layers.0.self_attn",
         "transformers #27341 (the control softmax_denominator_bf16)",
         "layer 0's attention softmax online with bf16 running max and denominator"),
    *(Pair(f"{a}_eager_vs_sdpa", a, "benign", sdpa, None, "transformers attention implementations",
           "eager attention against sdpa") for a in ARCHS),
    *(Pair(f"{a}_compiled_layer0", a, "benign", compile_layer_parts, None, "torch.compile (inductor)",
           "layer 0's MLP and norms compiled") for a in ARCHS),
    Pair("qwen2_fused_swiglu", "qwen2", "benign", fused_swiglu, None, "fused-kernel MLP, algebraically equal",
         "every MLP: silu(g) * u in float32 (SiLU via tanh), one rounding"),
    Pair("llama_fused_rmsnorm", "llama", "benign", fused_norms, None, "fused-kernel RMSNorm, algebraically equal",
         "every RMSNorm: w * x / sqrt(sum(x^2) / n + eps) in float32, one rounding"),
)


def pair(name: str) -> Pair:
    for p in PAIRS:
        if p.name == name:
            return p
    raise KeyError(f"model_zoo: no pair {name!r}; known: {', '.join(p.name for p in PAIRS)}")


def models(p: Pair, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(ref, prod) of pair ``p``: ref built from ``seed``, prod a deepcopy of it patched."""
    ref = build(p.arch, seed)
    prod = copy.deepcopy(ref)
    p.patch(prod)
    return ref, prod.eval()


def draw_batch(arch: str, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v.sample(g, torch.device("cpu"), DTYPE) for k, v in inputs(arch).items()}


def module_outputs(model: nn.Module, name: str, batch: dict, *, inputs_of: dict | None = None):
    """``name``'s (args, kwargs, output) in one forward of ``model`` on ``batch``; with ``inputs_of``
    (another model's record) the module is called on those recorded args instead."""
    mod = model.get_submodule(name)
    if inputs_of is not None:
        with torch.no_grad():
            return inputs_of["args"], inputs_of["kwargs"], mod(*inputs_of["args"], **inputs_of["kwargs"])
    rec: dict = {}

    def hook(_m, args, kwargs, out):
        rec.update(args=args, kwargs=kwargs, out=out)

    h = mod.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        h.remove()
    return rec["args"], rec["kwargs"], rec["out"]


def _max_diff(a, b) -> float:
    """Largest |a - b| over every floating tensor of two outputs of the same structure."""
    if isinstance(a, torch.Tensor):
        if not a.is_floating_point():
            return 0.0 if torch.equal(a, b) else math.inf
        return float((a.double() - b.double()).abs().max())
    return max((_max_diff(x, y) for x, y in zip(a, b)), default=0.0)


def module_difference(p: Pair, ref: nn.Module, prod: nn.Module, batch: dict) -> dict[str, float]:
    """At the injected module, on ref's recorded inputs: max |prod - ref| of the output, and (for every
    defect) of the input gradient against one seeded upstream gradient."""
    args, kwargs, out_ref = module_outputs(ref, p.module, batch)
    _, _, out_prod = module_outputs(prod, p.module, batch, inputs_of={"args": args, "kwargs": kwargs})
    res = {"forward": _max_diff(out_ref, out_prod), "backward": math.nan}
    # the first floating input, positional or keyword (HF layers call attention with hidden_states=...)
    named = [(i, a) for i, a in enumerate(args)] + list(kwargs.items())
    key, x = next(((k, a) for k, a in named if isinstance(a, torch.Tensor) and a.is_floating_point()), (None, None))
    if x is not None:
        grads = []
        for model in (ref, prod):
            xi = x.detach().clone().requires_grad_(True)
            a2, k2 = list(args), dict(kwargs)
            if isinstance(key, int):
                a2[key] = xi
            else:
                k2[key] = xi
            out = model.get_submodule(p.module)(*a2, **k2)
            t = out[0] if isinstance(out, (tuple, list)) else out
            if not t.requires_grad:  # an output that does not depend on the input's values (RoPE's cos/sin)
                return res
            g = torch.randn(t.shape, generator=torch.Generator().manual_seed(1)).to(t.dtype)
            (gx,) = torch.autograd.grad(t, xi, g, allow_unused=True)
            grads.append(gx if gx is not None else torch.zeros_like(xi))
        res["backward"] = _max_diff(grads[0], grads[1])
    return res


def logit_difference(ref: nn.Module, prod: nn.Module, batch: dict) -> float:
    with torch.no_grad():
        return _max_diff(ref(**batch).logits, prod(**batch).logits)


def main() -> None:
    torch.set_num_threads(1)
    print("| pair | kind | half | module | max abs logit diff | module fwd diff | module bwd diff |")
    print("|---|---|---|---|---|---|---|")
    for p in PAIRS:
        ref, prod = models(p)
        batch = draw_batch(p.arch)
        e2e = logit_difference(ref, prod, batch)
        mod = module_difference(p, ref, prod, batch) if p.module else {"forward": math.nan, "backward": math.nan}
        print(f"| {p.name} | {p.kind} | {p.half} | {p.module or '-'} | {e2e:.4g} | {mod['forward']:.3g} | "
              f"{mod['backward']:.3g} |", flush=True)


if __name__ == "__main__":
    main()
