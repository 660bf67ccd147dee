"""Compiled controls (family ``compiled``): real production kernels that nobody here wrote.

prod is ``torch.compile(ref, backend="inductor")`` of the very same code (inductor writes its own
fused C++/OpenMP kernels on the CPU, with its own loop orders, vectorised reductions and float32
intermediates), or a Hugging Face attention layer run with ``attn_implementation="sdpa"`` against
``"eager"``. These are the pairs a user has on hand on day one, and the ones where a false alarm
costs the most trust: every positive here genuinely differs from ref (the suite measures the share
of differing elements), and prod is usually the more accurate side.

Inductor computes bf16 intermediates in float32 and rounds only where a value is stored, so by
default it erases roundings the eager code makes, intended or buggy: a defect injected as an
intermediate bf16 rounding and then compiled can be bitwise the correct kernel. The negatives here
compile with ``emulate_precision_casts=True`` (inductor keeps every cast of the source), under which
the defect survives compilation and must still be detected (docs/torch-compile.md).

Cold compilation costs seconds per kernel and dtype on a CPU (the algebra gate recompiles prod for
float64 and float32 real mode); shapes are small. Needs the ``hf`` extra for the HF-module controls;
without transformers those are not registered.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util

import torch
import torch.nn.functional as F

from .. import backward as kcert_backward
from ..case import Axes, Case, Gaussian
from ..catalog import activations as A
from ..catalog import attention as att
from ..catalog import losses as L
from ..catalog import moe as M
from ..catalog import norms as N
from ..catalog import softmax as S
from . import norms as norm_controls
from .registry import negative, positive

FAMILY = "compiled"
HF = importlib.util.find_spec("transformers") is not None


def compiled(fn, *, emulate_precision_casts: bool = False):
    """``fn`` compiled by inductor (no dynamic shapes: the algebra gate's symbolic shapes and real-mode
    dtypes each get their own graph). ``emulate_precision_casts`` keeps every low-precision cast of the
    source, which inductor otherwise folds into float32 intermediates."""
    options = {"emulate_precision_casts": True} if emulate_precision_casts else None
    c = torch.compile(fn, backend="inductor", dynamic=False, options=options)

    @functools.wraps(fn)
    def kernel(**kwargs):
        return c(**kwargs)

    kernel.__wrapped__ = fn
    kernel.__name__ = f"compiled_{getattr(fn, '__name__', type(fn).__name__)}"
    return kernel


def _positive(source: str, *, hf: bool = False, **kwargs):
    if hf and not HF:
        return lambda fn: fn
    return positive(family=FAMILY, source=source, **kwargs)


def _hf():
    from ..adapters import hf

    hf.require_transformers("the compiled controls")
    return hf


# --- compiled forward kernels (catalogue references) -------------------------------------------------


@_positive("torch.compile (inductor) forward and backward of HF LlamaRMSNorm (AOTAutograd)", hf=True, quick=True)
def compiled_hf_llama_rmsnorm_gradients() -> Case:
    """Gradients of transformers' LlamaRMSNorm arithmetic (grad_x, grad_w) through eager autograd vs a
    compiled forward and backward (AOTAutograd traces the backward, inductor compiles both).

    Source: the catalogue's ``rms_norm_hf`` (the HF convention: normalised activations rounded to bf16,
    then the bf16 gain), differentiated by ``kcert.gradients``. Eager autograd rounds every
    intermediate of the backward to bf16; the compiled backward keeps float32 between its fused ops
    and reduces the gain gradient's columns in its own order. Why benign: the same derivative with
    fewer roundings.
    """
    base = N.LLAMA_RMSNORM.case("compiled_hf_llama_rmsnorm_gradients", compiled(N.rms_norm_hf), shape=(1, 64, 256))
    return kcert_backward.gradients(base)


@_positive("torch.compile (inductor) of HF LlamaRMSNorm", hf=True)
def compiled_hf_llama_rmsnorm() -> Case:
    """transformers LlamaRMSNorm eager vs the same module's forward compiled by inductor.

    Source: ``LlamaRMSNorm(512, eps=1e-5)`` of transformers (double rounding: normalised activations
    rounded to bf16, then the bf16 gain). Inductor keeps the store after normalisation only when the
    value is materialised; fused, the gain multiply happens on the float32 value: prod is the single
    rounding (TransformerEngine #1132's more accurate side). Why benign: same real function, prod
    closer to float64.
    """
    hf = _hf()
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    module = LlamaRMSNorm(N.HIDDEN, eps=N.LLAMA_EPS)
    ref = hf.module_kernel(module, inputs=("x",), params={"w": "weight"}, name="LlamaRMSNorm[eager]")
    return N.LLAMA_RMSNORM.case("compiled_hf_llama_rmsnorm", compiled(ref), ref=ref, shape=(2, 64, N.HIDDEN),
                                description="HF LlamaRMSNorm: eager vs torch.compile (inductor)")


@_positive("torch.compile (inductor) of a residual add + torch.nn.functional.layer_norm")
def compiled_add_layer_norm() -> Case:
    """A residual add followed by ``F.layer_norm`` (a post-LN block's epilogue), eager vs compiled by
    inductor, on activations with a mean offset of 4.

    Eager rounds ``x + residual`` to bf16 before ATen's fused LayerNorm; inductor fuses the add into its
    Welford reductions and normalises the float32 sum (``F.layer_norm`` alone compiles to a kernel
    bitwise equal to ATen's here). Why benign: the same real function, one rounding fewer.
    """
    def add_layer_norm(x, residual, w, b, eps=N.LAYERNORM_EPS):
        h = x + residual
        return F.layer_norm(h, (h.shape[-1],), w, b, eps)

    base = N.LAYERNORM.case("compiled_add_layer_norm", add_layer_norm, shape=(2, 64, 512), offset=4.0)
    inputs = {**base.inputs, "residual": Gaussian((2, 64, 512), shift=0.1)}
    return dataclasses.replace(base, ref=add_layer_norm, prod=compiled(add_layer_norm), inputs=inputs,
                               description="residual add + F.layer_norm: eager vs torch.compile (inductor)")


@_positive("torch.compile (inductor) of HF LlamaMLP (SwiGLU)", hf=True)
def compiled_hf_llama_mlp() -> Case:
    """transformers LlamaMLP (down(silu(gate(x)) * up(x))) eager vs compiled by inductor.

    Source: ``LlamaMLP`` (hidden 256, intermediate 512), bf16 weights with a trained-like spread.
    Inductor keeps the three GEMMs as library calls and fuses SiLU and the product into one kernel
    that works in float32 between them: eager rounds ``silu(gate)`` to bf16 before the product,
    compiled does not. Why benign: one rounding fewer, same real function.
    """
    hf = _hf()
    from transformers.models.llama.modeling_llama import LlamaConfig, LlamaMLP

    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, hidden_act="silu")
    module = LlamaMLP(cfg)
    ref = hf.module_kernel(module, inputs=("x",), name="LlamaMLP[eager]")
    return hf.module_case("compiled_hf_llama_mlp", ref, compiled(ref), inputs={"x": Gaussian((64, 256), shift=0.1)},
                          weights=hf.module_weights(module), buckets=Axes(-1),
                          description="HF LlamaMLP (SwiGLU): eager vs torch.compile (inductor)")


@_positive("torch.compile (inductor) of HF apply_rotary_pos_emb", hf=True)
def compiled_hf_rotary() -> Case:
    """transformers ``apply_rotary_pos_emb`` eager vs compiled, with the same ``LlamaRotaryEmbedding``
    cos/sin (Llama-2, head_dim 128, base 1e4, positions up to 4096).

    Inductor fuses ``q * cos + rotate_half(q) * sin`` into one float32 expression and rounds once; the
    eager code rounds each product and the sum to bf16 (the fusion Liger's RoPE kernel makes by hand).
    Why benign: fewer roundings of the same real function.
    """
    hf = _hf()
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    base = hf.rotary_case(name="compiled_hf_rotary")
    prod = dataclasses.replace(base.prod, apply=torch.compile(apply_rotary_pos_emb, backend="inductor", dynamic=False))
    return dataclasses.replace(base, prod=prod, ref=base.prod,
                               description="HF apply_rotary_pos_emb: eager vs torch.compile (inductor)")


@_positive("torch.compile (inductor) of the catalogue's eager attention", quick=True)
def compiled_attention() -> Case:
    """Eager causal GQA attention (bf16 scores scaled by head_dim^-0.5, float32 softmax rounded to bf16,
    bf16 PV) vs compiled, at head_dim 128.

    Why benign: inductor keeps the two GEMMs and fuses scale, mask and softmax into one float32 kernel,
    so the scaled scores are not rounded to bf16 before the softmax (with head_dim 64 the scale is a
    power of two and the two would be bitwise equal). Same real function, fewer roundings.
    """
    return att.ATTENTION.case("compiled_attention", compiled(att.eager_attention), batch=1, heads=4, kv_heads=2,
                              seq=128, head_dim=128)


@_positive("torch.compile (inductor) of a scaled softmax over attention logits")
def compiled_scaled_softmax() -> Case:
    """``softmax(scores * d^-0.5)`` in float32 over bf16 attention-like logits (d = 96), eager vs compiled.

    Why benign: eager rounds the scaled scores to bf16 before the float32 softmax; inductor fuses the
    scale into its online (max, sum) reduction in float32. Same real function, one rounding fewer.
    """
    def scaled_softmax(x):
        return torch.softmax(x * 96 ** -0.5, dim=-1, dtype=torch.float32).to(x.dtype)

    return S.SOFTMAX.case("compiled_scaled_softmax", compiled(scaled_softmax), ref=scaled_softmax)


@_positive("torch.compile (inductor) of the catalogue's GeGLU (tanh GELU * up)")
def compiled_geglu() -> Case:
    """GeGLU (``gelu_tanh(gate) * up``) eager vs compiled, on outlier activations.

    Why benign: inductor evaluates the tanh GELU and the product in float32 with its own vectorised
    ``tanh`` (Sleef), and rounds once; eager rounds the activation to bf16 before the product.
    """
    return A.GEGLU.case("compiled_geglu", compiled(A.geglu))


@_positive("torch.compile (inductor) of per-token cross-entropy (float32 output)")
def compiled_token_cross_entropy() -> Case:
    """Per-token cross-entropy (float32 losses from bf16 logits, ignore_index padding) eager vs compiled.

    Why benign: the same logsumexp in float32, fused by inductor with another reduction order; the
    outputs are float32, a few float32 ULPs apart.
    """
    return L.CROSS_ENTROPY.case("compiled_token_cross_entropy", compiled(L.token_losses), ref=L.token_losses,
                                buckets=Axes(-1), batch=4, seq=128, vocab=512)


@_positive("torch.compile (inductor) of HF ForCausalLMLoss (float32 mean cross-entropy)", hf=True)
def compiled_hf_mean_cross_entropy() -> Case:
    """transformers ``ForCausalLMLoss`` (logits upcast to float32, shifted labels, mean over tokens):
    one float32 scalar per replicate, eager vs compiled.

    Why benign: the same float32 arithmetic; inductor fuses the logsumexp and the mean with its own
    reduction order. A scalar output: the variance gate sees one error per replicate on each side.
    """
    from transformers.loss.loss_utils import ForCausalLMLoss

    vocab = 512

    def hf_loss(logits, labels):
        return ForCausalLMLoss(logits, labels, vocab)

    return L.CROSS_ENTROPY.case("compiled_hf_mean_cross_entropy", compiled(hf_loss), ref=hf_loss, batch=4, seq=128,
                                vocab=vocab)


@_positive("torch.compile (inductor) of the DeepSeek-V3 router (grouped top-k)")
def compiled_deepseek_router() -> Case:
    """DeepSeek-V3's MoE gate (float32 router GEMM, sigmoid scores, selection bias, grouped top-k,
    renormalised and scaled combine weights) eager vs compiled.

    Why benign: inductor fuses the sigmoid, bias and normalisation in float32 with its own reduction
    order; the selection sees the same float32 scores up to float32 rounding (a rare near-tie can flip).
    """
    ref = functools.partial(M.deepseek_router, **M.DEEPSEEK_V3)
    return M.DEEPSEEK_ROUTER.case("compiled_deepseek_router", compiled(ref), ref=ref)


# --- compiled backward ----------------------------------------------------------------------------


@_positive("torch.compile (inductor) forward and backward of SwiGLU")
def compiled_swiglu_gradients() -> Case:
    """Gradients of SwiGLU (``silu(gate) * up``) through eager autograd vs a compiled backward.

    Why benign: inductor's backward computes ``sigmoid`` once in float32 and fuses both input
    gradients; eager autograd rounds each intermediate to bf16.
    """
    base = A.SWIGLU.case("compiled_swiglu_gradients", compiled(A.swiglu), tokens=64, hidden=256)
    return kcert_backward.gradients(base)


# --- HF attention implementations -----------------------------------------------------------------


@_positive("transformers Qwen2Attention, eager vs sdpa", hf=True)
def hf_qwen2_attention_eager_vs_sdpa() -> Case:
    """transformers Qwen2Attention (q/k/v biases) with the eager attention (ref) vs sdpa (prod).

    Why benign: the same projections and rotary embedding; eager rounds scores and probabilities to
    bf16, PyTorch's CPU sdpa keeps its softmax in float32.
    """
    hf = _hf()
    from transformers.models.qwen2 import modeling_qwen2 as q

    cfg = q.Qwen2Config(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, intermediate_size=512,
                        max_position_embeddings=4096)
    return hf.attention_case(cfg, name="hf_qwen2_attention_eager_vs_sdpa", attention_cls=q.Qwen2Attention,
                             rotary_cls=q.Qwen2RotaryEmbedding)


@_positive("transformers MistralAttention, eager vs sdpa, padded batch", hf=True)
def hf_mistral_attention_eager_vs_sdpa() -> Case:
    """transformers MistralAttention on a right-padded batch of 2, eager (ref) vs sdpa (prod).

    Why benign: as for Qwen2; the padding mask is built by ``create_causal_mask`` per implementation
    (an additive float mask for eager, a boolean one for sdpa).
    """
    hf = _hf()
    from transformers.models.mistral import modeling_mistral as m

    cfg = m.MistralConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                          intermediate_size=512, max_position_embeddings=4096, sliding_window=None)
    return hf.attention_case(cfg, name="hf_mistral_attention_eager_vs_sdpa", attention_cls=m.MistralAttention,
                             rotary_cls=m.MistralRotaryEmbedding, batch=2, seq=64, padding="right")


@_positive("transformers GemmaAttention, eager vs sdpa", hf=True)
def hf_gemma_attention_eager_vs_sdpa() -> Case:
    """transformers GemmaAttention (head_dim 256, multi-query), eager (ref) vs sdpa (prod).

    Why benign: as for Qwen2, with Gemma's large head dimension (a longer dot product per score).
    """
    hf = _hf()
    from transformers.models.gemma import modeling_gemma as g

    cfg = g.GemmaConfig(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                        intermediate_size=512, max_position_embeddings=4096)
    return hf.attention_case(cfg, name="hf_gemma_attention_eager_vs_sdpa", attention_cls=g.GemmaAttention,
                             rotary_cls=g.GemmaRotaryEmbedding, seq=64)


# --- defects that survive compilation ---------------------------------------------------------------


@negative(family=FAMILY, source="transformers PR #29402 (Gemma (1 + w) in bf16), compiled with emulate_precision_casts")
def compiled_gemma_one_plus_w_bf16() -> Case:
    """The pre-fix Gemma RMSNorm ((1 + w) and the product in bf16) compiled by inductor with
    ``emulate_precision_casts=True``, against the eager fixed kernel.

    The defect is a per-channel gain error of up to one bf16 unit roundoff (norm control
    ``gemma_one_plus_w_bf16``); inductor's default would compute ``1 + w`` in float32 and erase it.
    With the casts emulated the bf16 rounding of ``1 + w`` stays, and the coherent per-channel bias must
    be found through the compiled kernel.
    """
    return N.GEMMA_RMSNORM.case("compiled_gemma_one_plus_w_bf16",
                                compiled(norm_controls.gemma_rms_norm_bf16_gain, emulate_precision_casts=True))


@negative(family=FAMILY, source="TransformerEngine #1132 (HF double rounding), compiled with emulate_precision_casts")
def compiled_hf_double_rounding() -> Case:
    """HF's double-rounding RMSNorm (round the normalised activations, then the bf16 gain) compiled
    with ``emulate_precision_casts=True``, against TransformerEngine's single rounding (eager).

    The coherent pull towards zero on channels whose bf16 gain is just under 1 (norm control
    ``hf_double_rounding_te1132``) must survive compilation when the intermediate cast is kept.
    """
    return N.RMSNORM.case("compiled_hf_double_rounding", compiled(N.rms_norm_hf, emulate_precision_casts=True),
                          gains_kind="llama_narrow")
