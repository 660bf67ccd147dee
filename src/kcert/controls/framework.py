"""Framework controls (family ``framework``): real Hugging Face ``transformers`` modules, built
offline from tiny configs with random init, certified against the catalogue or against each other.

They certify the adapters (:mod:`kcert.adapters.hf`) as much as the modules: a mapping of weights
onto the wrong parameter, a frequency buffer frozen in float32, or a mask that real mode cannot
follow shows up here. Every control is a positive: the pair is expected not to FAIL.

Needs the ``hf`` extra (``pip install "kcert[hf]"``). Without transformers this module registers
nothing (:data:`AVAILABLE` is False) and the suite runs without the family.

The figures in each docstring were measured when the control was written (seed 0, transformers
5.24.0, torch 2.13.0 CPU, one thread); tests/test_controls_framework.py checks the verdicts, not every
figure; docs/controls.md holds the current ones.
"""

from __future__ import annotations

import importlib.util

from ..case import Case
from .registry import positive

FAMILY = "framework"
AVAILABLE = importlib.util.find_spec("transformers") is not None


def _positive(source: str, **kwargs):
    """Register a positive framework control when transformers is installed; otherwise leave the
    function unregistered (it still raises ExtraMissing, naming the extra, if called)."""
    if AVAILABLE:
        return positive(family=FAMILY, source=source, **kwargs)
    return lambda fn: fn


def _hf():
    from ..adapters import hf

    hf.require_transformers("the framework controls")
    return hf


@_positive("transformers LlamaRMSNorm (tested 5.24.0)", quick=True, expect="PASS")
def hf_llama_rmsnorm_vs_catalogue() -> Case:
    """HF LlamaRMSNorm (bf16, eps 1e-5) vs the catalogue's HF-convention RMSNorm.

    Source: ``transformers.models.llama.modeling_llama.LlamaRMSNorm`` (transformers 5.24.0), built as
    ``LlamaRMSNorm(512, eps=1e-5)``; its gain is the case weight ``w`` (the catalogue's trained-like
    Llama gains) through ``kcert.adapters.hf.rmsnorm_case``.

    Why benign: the module normalises in float32, rounds to the input dtype, then multiplies by the
    bf16 gain, exactly ``kcert.catalog.norms.rms_norm_hf``. The pair is bitwise equal on every draw;
    the control certifies that the adapter hands the module the case's weights and inputs (a wrong
    mapping would FAIL). Measured (R = 1024): PASS on all gates; algebra proved symbolically at a
    small shape and identical in float64 real mode; no significant bucket; K = 0 on every replicate.
    """
    hf = _hf()
    return hf.rmsnorm_case(name="hf_llama_rmsnorm_vs_catalogue")


@_positive("transformers GemmaRMSNorm (tested 5.24.0)", quick=True, expect="PASS")
def hf_gemma_rmsnorm_vs_catalogue() -> Case:
    """HF GemmaRMSNorm (bf16, eps 1e-6, gain applied as 1 + w) vs the catalogue's Gemma RMSNorm.

    Source: ``transformers.models.gemma.modeling_gemma.GemmaRMSNorm`` (transformers 5.24.0), the
    version after transformers PR #29402: ``(normalize(x.float()) * (1 + w.float())).type_as(x)``.

    Why benign: the catalogue's ``gemma_rms_norm`` is that arithmetic (float32 normalisation, ``1 + w``
    in float32, one rounding). Zero-centred trained-like gains (the catalogue's Gemma contract),
    for which the pre-fix bf16 ``1 + w`` is the negative ``gemma_one_plus_w_bf16``. Measured
    (R = 1024): PASS on all gates, bitwise equal outputs (K = 0), algebra proved at a small shape.
    """
    hf = _hf()
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    from ..catalog import norms

    return hf.rmsnorm_case(GemmaRMSNorm(norms.HIDDEN, eps=norms.GEMMA_EPS), name="hf_gemma_rmsnorm_vs_catalogue")


@_positive("transformers LlamaRotaryEmbedding + apply_rotary_pos_emb (tested 5.24.0)", expect="PASS")
def hf_rotary_llama2_vs_catalogue() -> Case:
    """HF Llama rotary embedding + apply_rotary_pos_emb vs the catalogue's NeoX RoPE (Llama 2 frequencies).

    Source: ``LlamaRotaryEmbedding`` and ``apply_rotary_pos_emb`` of transformers 5.24.0, config
    head_dim 128, rope_theta 1e4, 4096 positions; q (1, 2, 64, 128), k (1, 1, 64, 128), positions
    drawn uniformly in [0, 4096).

    Why benign: both compute ``inv_freq = 1 / base^(2i/d)`` in float32, angles and cos/sin in float32,
    cos/sin rounded to bf16, and the half rotation in bf16. The adapter rebuilds ``inv_freq`` from the
    config inside every call (bitwise the init-time buffer), so real mode evaluates exact frequencies;
    with the init-time float32 buffer the algebra gate sees a relative discrepancy of 8.9e-5 that does
    not shrink (the buffer's float32 rounding times the position), a real-mode artefact the adapter
    avoids. Measured (R = 1024): PASS on all gates; algebra proved symbolically at a small shape;
    variance U = 1.02 and 0.79 (q and k).
    """
    hf = _hf()
    return hf.rotary_case(name="hf_rotary_llama2_vs_catalogue")


@_positive("transformers LlamaRotaryEmbedding, rope_type llama3 (tested 5.24.0)", expect="PASS")
def hf_rotary_llama31_vs_catalogue() -> Case:
    """HF Llama 3.1 rotary embedding (llama3 band-wise scaling) vs the catalogue's Llama 3.1 NeoX RoPE.

    Source: ``LlamaRotaryEmbedding`` with ``rope_scaling={"rope_type": "llama3", "factor": 8,
    "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}``,
    rope_theta 5e5, 131072 positions (transformers 5.24.0, ``_compute_llama3_parameters``).

    Why benign: HF's llama3 initialiser and the catalogue's ``llama3_frequencies`` scale the same
    float32 frequencies by wavelength band; the rotation is the same. Positions up to 131072 stress
    the angle (phase errors grow with position). Measured (R = 1024): PASS on all gates; algebra
    proved symbolically at a small shape; variance U = 1.27 and 0.68.
    """
    hf = _hf()
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                         max_position_embeddings=131072, rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    return hf.rotary_case(config, name="hf_rotary_llama31_vs_catalogue")


@_positive("transformers LlamaAttention, eager vs sdpa (tested 5.24.0)")
def hf_attention_eager_vs_sdpa() -> Case:
    """HF LlamaAttention with the eager attention (ref) vs the sdpa attention (prod), same weights.

    Source: ``LlamaAttention`` of transformers 5.24.0 (hidden 256, 4 query heads on 2 kv heads,
    head_dim 64, seq 128), ``config._attn_implementation`` "eager" vs "sdpa" (PyTorch 2.13's CPU
    ``scaled_dot_product_attention``); cos/sin from ``LlamaRotaryEmbedding`` and the mask from
    ``create_causal_mask``, per implementation, as the model builds them. Trained-like projection
    weights N(0, 1/256) with 1% of entries 10x larger; hidden states N(0.1, 1).

    Why benign: both compute ``softmax(q k^T / sqrt(d) + causal mask) v`` with the same projections and
    rotary embedding; eager rounds the scores and the probabilities to bf16, sdpa keeps its softmax
    in float32 (fewer roundings). The migration every HF user makes when switching
    ``attn_implementation``. Measured (R = 1024): algebra PASS (float64 discrepancy 7.6e-16,
    shrinks like rounding), bias PASS (no significant channel), variance PASS: sdpa is closer to the
    float64 oracle than eager in 84 % of replicates and its error tail at T = 6.25e5 is below eager's
    (A_T ~ 0.7, U ~ 1). The per-replicate ratio K of the report (U = 7.7 on it) used to WARN here:
    dividing by eager's error of the same replicate, which is small in some replicates, made a heavy
    tail out of two similar error laws (docs/method.md, Gate 3).
    """
    hf = _hf()
    return hf.attention_case(name="hf_attention_eager_vs_sdpa")


@_positive("transformers MixtralSparseMoeBlock (tested 5.24.0)", expect="PASS")
def hf_mixtral_moe_vs_catalogue() -> Case:
    """HF Mixtral sparse MoE block (experts "eager") vs the catalogue's routed Mixtral layer.

    Source: ``MixtralSparseMoeBlock`` of transformers 5.24.0 (8 experts, top-2, hidden 256, ffn 64;
    fused expert weights ``gate_up_proj = cat(w1, w3)``), mapped from the catalogue's weight contract
    by ``kcert.adapters.hf.mixtral_parameters``; 128 tokens N(0.1, 1); buckets: top-1 expert.

    Why benign: the same bf16 router GEMM, float32 softmax, top-2 and renormalisation, the same
    SwiGLU experts and an index_add_ into a bf16 buffer in expert order. One difference: transformers
    5 multiplies each expert output by the float32 combine weight and rounds the product once,
    while the catalogue (the 4.x code) rounds the combine weight to bf16 first: prod has one rounding
    fewer. Measured (R = 1024, 61 s): PASS on all gates (algebra discrepancy 2.2e-16 in float64,
    no significant expert, variance U = 1.02).
    """
    hf = _hf()
    return hf.moe_case(name="hf_mixtral_moe_vs_catalogue")


@_positive("transformers MixtralExperts, eager vs batched_mm (tested 5.24.0)", expect="PASS")
def hf_mixtral_experts_eager_vs_batched_mm() -> Case:
    """HF Mixtral MoE block with the "eager" experts (ref) vs the "batched_mm" experts implementation (prod).

    Source: transformers 5.24.0 ``integrations/moe.py`` ``batched_mm_experts_forward`` selected by
    ``config._experts_implementation = "batched_mm"``, against the block's own eager loop, same
    weights (catalogue contract, 8 experts, top-2).

    Why benign: the same routing and experts; eager rounds each weighted expert output to bf16 and
    index_adds into a bf16 buffer, batched_mm sums the top-k float32 products and rounds once (its
    comment: more stable). Measured (R = 1024, 65 s): PASS on all gates (algebra discrepancy 2.2e-16
    in float64, no significant expert, variance U = 1.02).
    """
    hf = _hf()
    return hf.moe_case(name="hf_mixtral_experts_eager_vs_batched_mm", ref="eager", prod_impl="batched_mm")
