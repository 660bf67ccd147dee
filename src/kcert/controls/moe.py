"""MoE routing controls: public routing defects (negatives) and correct rewrites or stressed probes
of correct routers (positives). References come from :mod:`kcert.catalog.moe`; only the
production side is written here."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..case import Axes, Case
from ..catalog import moe as cat
from .registry import negative, positive

FAMILY = "moe"


# --- production kernels (defective or correct), written here; references live in the catalogue ---------


def _v3_select_with_biased_weights(x, w_gate, e_bias, *, top_k, n_group, topk_group, scaling, **_):
    """vLLM grouped_topk before PR #12002: the bias is added to the scores and the combine weights
    are then gathered from the biased tensor."""
    scores = torch.sigmoid(cat.router_logits_fp32(x, w_gate))
    scores = scores + e_bias.to(torch.float32)  # overwrites the affinity scores
    idx = cat.grouped_topk_indices(scores, top_k, n_group, topk_group)
    weights = scores.gather(1, idx)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return cat.dense_combine(idx, weights * scaling, scores.shape[-1])


def _router_without_renorm(x, w_gate, e_bias, *, top_k, n_group, topk_group, scaling, **_):
    """torchtitan's DeepSeek-V3 router before the fix of #1448: sigmoid scores, biased selection,
    unbiased gather, route scale, but no division by the sum of the selected scores."""
    scores = torch.sigmoid(cat.router_logits_fp32(x, w_gate))
    idx = cat.grouped_topk_indices(scores + e_bias.to(torch.float32), top_k, n_group, topk_group)
    return cat.dense_combine(idx, scores.gather(1, idx) * scaling, scores.shape[-1])


def _raw_logit_weights(router_logits, *, top_k, **_):
    """sglang fused_topk_softmax_torch_raw_logits with renormalize=False (before PR #35160): top-k on
    the raw logits, softmax applied only in the renormalize branch, so the gathered logits are
    returned as combine weights."""
    values, idx = torch.topk(router_logits.to(torch.float32), top_k, dim=-1)
    return cat.dense_combine(idx, values.to(router_logits.dtype), router_logits.shape[-1])


def _bf16_gate_router(x, w_gate, *, top_k, **_):
    """vLLM DeepSeek-V2 gate before PR #14027: the gate is a bf16 linear layer, router logits are
    rounded to bf16, then softmax in float32 and top-k."""
    logits = F.linear(x, w_gate)  # bf16 output: float32 accumulation rounded once to bf16
    scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, idx = torch.topk(scores, top_k, dim=-1)
    return cat.dense_combine(idx, weights, scores.shape[-1])


def _topk_then_softmax(router_logits, *, top_k, **_):
    """Megatron / GraniteMoE order: top-k on the logits, softmax over the k selected logits only."""
    values, idx = torch.topk(router_logits, top_k, dim=-1)
    weights = torch.softmax(values, dim=-1, dtype=torch.float32)
    return cat.dense_combine(idx, weights.to(router_logits.dtype), router_logits.shape[-1])


def _v3_official_style(x, w_gate, e_bias, *, top_k, n_group, topk_group, scaling, **_):
    """DeepSeek-V3 gate in the layout of DeepSeek's inference code: a boolean 'dropped group' mask
    made by scattering False into ones, in-place -inf fill of the dropped experts, and a fused
    epilogue that folds the route scale into the normaliser (w * (scale / sum w))."""
    scores = torch.sigmoid(cat.router_logits_fp32(x, w_gate))
    original = scores
    choice = scores + e_bias.to(torch.float32)
    tokens, n_experts = choice.shape
    grouped = choice.view(tokens, n_group, -1)
    best2 = grouped.topk(2, dim=-1)[0].sum(dim=-1)
    kept = best2.topk(topk_group, dim=-1)[1]
    dropped = torch.ones(tokens, n_group, dtype=torch.bool, device=choice.device).scatter_(1, kept, False)
    choice = grouped.masked_fill(dropped.unsqueeze(-1), float("-inf")).flatten(1)
    idx = torch.topk(choice, top_k, dim=-1)[1]
    weights = original.gather(1, idx)
    weights = weights * (scaling / weights.sum(dim=-1, keepdim=True))
    return cat.dense_combine(idx, weights, n_experts)


def _fused_topk_softmax(router_logits, *, top_k, **_):
    """A fused softmax + top-k + renormalise kernel (vLLM topk_softmax semantics): per row, max,
    exp(l - max), row sum, probabilities as e times the reciprocal of the sum, top-k on those
    probabilities, renormalisation by the reciprocal of the selected sum, cast to the model dtype."""
    e = torch.exp(router_logits.to(torch.float32) - router_logits.amax(dim=-1, keepdim=True).to(torch.float32))
    probs = e * (1.0 / e.sum(dim=-1, keepdim=True))
    weights, idx = torch.topk(probs, top_k, dim=-1)
    weights = weights * (1.0 / weights.sum(dim=-1, keepdim=True))
    return cat.dense_combine(idx, weights.to(router_logits.dtype), router_logits.shape[-1])


def _sort_based_router(x, w_gate, *, top_k, **_):
    """Top-k by a stable descending sort of the float32 softmax scores (the first k of the sorted
    order), as kernels without a top-k primitive do; same float32 scores as the reference."""
    scores = cat.router_scores(cat.router_logits_fp32(x, w_gate), "softmax")
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :top_k]
    return cat.dense_combine(order, scores.gather(1, order), scores.shape[-1])


def _dense_masked_layer(x, w_gate, w1, w3, w2, *, top_k, **_):
    """The dense-masked formulation of the same MoE layer, in the model dtype: every expert on every
    token, stacked (tokens, experts, hidden), multiplied by the dense (tokens, experts) combine
    weights (zero off the selection), summed over the expert axis."""
    dense = cat.softmax_topk_router(cat.router_logits_model_dtype(x, w_gate), top_k=top_k, norm_topk_prob=True)
    outs = torch.stack([cat.swiglu_expert(x, w1[e], w3[e], w2[e]) for e in range(w_gate.shape[0])], dim=1)
    return (outs * dense.unsqueeze(-1)).sum(dim=1)


def _fused_topk_reciprocal(router_logits, *, top_k, **_):
    """vLLM fused_topk semantics on float32 logits: the same float32 softmax scores and top-k as
    the reference, renormalisation as a multiply by the reciprocal of the selected sum."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, idx = torch.topk(probs, top_k, dim=-1)
    weights = weights * (1.0 / weights.sum(dim=-1, keepdim=True))
    return cat.dense_combine(idx, weights.to(router_logits.dtype), router_logits.shape[-1])


# --- negatives -----------------------------------------------------------------------------------------


@negative(FAMILY, "vllm PR #12002 (issue #11971): DeepSeek-V3 e_score_correction_bias leaked into the combine weights",
          replicates=256, expect="FAIL", quick=True)
def selection_bias_in_combine_weights():
    """DeepSeek-V3 routing with the selection bias leaking into the combine weights.

    Source: vllm-project/vllm PR #12002 "Fix deepseekv3 gate bias error" (issue #11971). vLLM's
    grouped_topk added e_score_correction_bias to the sigmoid scores and gathered the combine
    weights from that biased tensor.
    Math: DeepSeek-V3 selects S = topk_{group-limited}(s + b) but weighs with the unbiased scores,
    w_i = c * s_i / sum_{j in S} s_j; the defect returns w_i = c * (s_i + b_i) / sum_{j in S}(s_j + b_j).
    The difference w'_i - w_i = c (b_i - (s_i / sum_S s) sum_S b) / sum_S (s + b) follows the sign of
    the expert's own bias b_i against the selected ones: a coherent per-expert bias (and a
    different real function).
    Faithful: same mechanism (the gather reads the biased scores), DeepSeek-V3 routing structure
    (sigmoid, 8 groups, 4 kept, top-8, renormalised, scale 2.5) scaled to 64 experts; float32
    router GEMM as in the HF reference; a bias of the order of the score spread, the regime in
    which it changes selections at all. 256 replicates: all three gates see it by orders of
    magnitude (relative real-mode discrepancy 0.33, K ~ 1e6).
    """
    cfg = cat.DEEPSEEK_V3
    return cat.DEEPSEEK_ROUTER.case("selection_bias_in_combine_weights",
                                    functools.partial(_v3_select_with_biased_weights, **cfg), **cfg)


@negative(FAMILY, "torchtitan #1448 (issue): DeepSeek-V3 router lacks norm_topk_prob (top-k weights not renormalised)",
          replicates=256, expect="FAIL", quick=True)
def topk_not_renormalised():
    """DeepSeek-V3 / Moonlight router whose top-k sigmoid weights are not renormalised.

    Source: pytorch/torchtitan issue #1448 "[DSV3] Lack of norm_topk_prob" (see also issue #1418):
    fine-tuning Moonlight-16B-A3B, whose config sets norm_topk_prob=True, torchtitan's router
    returned c * s_i for the selected experts without dividing by their sum (grad norm blew up).
    Math: reference w_i = c * s_i / sum_{j in S} s_j; defect w_i = c * s_i. The 6 selected sigmoid
    scores sum to ~4.6 here, so every weight is off by that factor: a gain error with the sign of
    the weight, i.e. a bias of every selected expert (real-mode relative discrepancy 4.6).
    Faithful: Moonlight's routing (64 experts, top-6, one group, sigmoid, selection bias,
    scale 2.446), float32 router GEMM, the renormalisation simply missing as in torchtitan.
    256 replicates: z in the hundreds, K ~ 1e7.
    """
    cfg = cat.MOONLIGHT
    return cat.DEEPSEEK_ROUTER.case("topk_not_renormalised", functools.partial(_router_without_renorm, **cfg),
                                    ref=functools.partial(cat.deepseek_router, **cfg), **cfg)


@negative(FAMILY, "sglang PR #35160: raw router logits returned as top-k weights with renormalize=False",
          replicates=256, expect="FAIL")
def raw_logits_as_combine_weights():
    """Softmax router returning the raw top-k router logits as combine weights.

    Source: sgl-project/sglang PR #35160 "[MoE] Return softmax probabilities from raw-logits topk
    when renormalize=False": fused_topk_softmax_torch_raw_logits applied the softmax only in the
    renormalize branch, so models with norm_topk_prob=False (Qwen2-MoE) got the gathered raw
    logits as combine scale.
    Math: reference w_i = softmax(l)_i for i in topk(l) (no renormalisation); defect w_i = l_i.
    Signed, unbounded weights instead of probabilities: a different real function, a per-expert
    bias and an unbounded error.
    Faithful: Qwen2-MoE routing (64 experts, top-8, norm_topk_prob=False) on bf16 router logits
    as the gate emits them (the kernel's gating_output input); selection on the raw logits (same
    experts as the reference), weights taken from them as in the defective branch. 256
    replicates: weights off by O(1) (K ~ 1e4).
    """
    cfg = cat.QWEN2_MOE
    return cat.SOFTMAX_TOPK_ROUTER.case("raw_logits_as_combine_weights", functools.partial(_raw_logit_weights, **cfg),
                                        ref=functools.partial(cat.softmax_topk_router, **cfg),
                                        tokens=512, n_experts=cfg["n_experts"])


@negative(FAMILY, "vllm PR #14027: DeepSeek-V2/V3 router logits computed in BF16 instead of FP32", expect="FAIL")
def router_logits_bf16_flips_ties():
    """DeepSeek-V2 router whose logits are rounded to bf16 before softmax and top-k.

    Source: vllm-project/vllm PR #14027 "Fix Precision Mismatch in MoE Router of DeepSeek V2/V3
    Models (BF16 -> FP32)": vLLM's gate was a bf16 linear layer while the DeepSeek reference casts
    hidden states and gate weight to float32 and keeps float32 logits.
    Math: reference S = topk(softmax(l)), l = x W^T in float32; defect l' = bf16(x W^T), a relative
    perturbation up to 2**-8 per logit (up to ~4e-3 at |l| ~ 1). Wherever the k-th and (k+1)-th
    logits are closer than that, the selection flips (a weight of a few percent moves to another
    expert); elsewhere each weight w carries an error ~ w |l - l'|, ~1e-3 relative, i.e. ~10**4
    float32 ULPs, against the float32 reference's few ULPs.
    Faithful: DeepSeek-V2-Lite routing (64 experts, top-6, softmax, not renormalised), 256 tokens
    of 512-wide hidden states per replicate, trained-like gate rows (logits ~ N(0, 1)): with 64
    experts the gap at the top-k boundary is typically ~0.1, so near ties within the bf16 error
    arise naturally, as in production; no tie is planted. Measured at seed 0: 4.9 of 256 tokens
    per replicate (1.9%) are routed to a different expert set than the reference.
    """
    cfg = cat.DEEPSEEK_V2_LITE
    return cat.DEEPSEEK_ROUTER.case("router_logits_bf16_flips_ties", functools.partial(_bf16_gate_router, **cfg),
                                    ref=functools.partial(cat.deepseek_router, **cfg), **cfg)


# --- positives -----------------------------------------------------------------------------------------


@positive(FAMILY, "benign rewrite: HF Mixtral softmax->topk->renormalise vs Megatron/GraniteMoE topk->softmax",
          expect="PASS", quick=True)
def softmax_topk_renorm_vs_topk_softmax():
    """Renormalised softmax top-k vs softmax over the top-k logits (mathematically equal).

    Source: HF transformers Mixtral/Qwen3-MoE routing (softmax over all experts, top-k, divide by
    the selected sum) vs Megatron-LM / GraniteMoE routing (top-k on the logits, softmax over the k).
    Why benign: softmax is monotone, so both select the same experts, and
    e^{l_i} / sum_all e^{l_j} renormalised over S equals e^{l_i} / sum_S e^{l_j}. On bf16 logits the
    order and the exact ties of the logits are preserved by the float32 (and float64) softmax,
    so the selections agree exactly; only float32 rounding of the weights differs, below the bf16
    rounding of the returned weights.
    Faithful: Qwen3-MoE-like routing (64 experts, top-8, renormalised) on bf16 router logits of
    512 tokens, the reference's exact-tie rate (~10% of tokens at the boundary) included.
    """
    cfg = dict(cat.QWEN2_MOE, norm_topk_prob=True)
    return cat.SOFTMAX_TOPK_ROUTER.case("softmax_topk_renorm_vs_topk_softmax",
                                        functools.partial(_topk_then_softmax, **cfg),
                                        ref=functools.partial(cat.softmax_topk_router, **cfg),
                                        tokens=512, n_experts=cfg["n_experts"])


@positive(FAMILY, "benign rewrite: DeepSeek-V3 grouped top-k as in HF transformers vs as in DeepSeek's inference code",
          expect="PASS")
def grouped_sigmoid_topk_two_ways():
    """DeepSeek-V3 sigmoid grouped top-k written two correct ways.

    Source: the catalogue's DeepSeek-V3 gate in HF transformers' structure (group mask by scatter
    into zeros, dropped experts filled with -inf as in DeepSeek's reference, divide by the selected
    sum + 1e-20, then scale) vs the layout of DeepSeek's own inference code (dropped-group boolean mask by scattering False into ones, in-place -inf fill,
    route scale folded into the normaliser: w * (c / sum w)).
    Why benign: both rank groups by the sum of their two best biased scores, keep 4 of 8, take
    the top-8 biased scores of the kept groups and weigh with the unbiased scores; the selection
    tensors are bitwise equal (same float32 scores + bias, same -inf fill), so the selections
    agree; c * s_i / S and s_i * (c / S) are the same real number, one rounding apart.
    Faithful: DeepSeek-V3 routing scaled to 64 experts, float32 router, bias of the order of the
    score spread.
    """
    cfg = cat.DEEPSEEK_V3
    return cat.DEEPSEEK_ROUTER.case("grouped_sigmoid_topk_two_ways", functools.partial(_v3_official_style, **cfg),
                                    **cfg)


@positive(FAMILY, "real kernel: vLLM fused topk_softmax semantics (exp, reciprocal, top-k, renormalise) vs HF Mixtral routing",
          expect="PASS")
def fused_topk_softmax_vs_hf():
    """A fused softmax + top-k + renormalise router kernel vs the HF Mixtral/Qwen3-MoE routing.

    Source: vLLM's topk_softmax routing kernel (one pass per row: max, exp(l - max), sum, multiply
    by the reciprocal, top-k on the probabilities, renormalise by the reciprocal of the selected
    sum) vs HF transformers MixtralSparseMoeBlock routing (torch.softmax in float32, torch.topk,
    divide by the selected sum, cast to the model dtype).
    Why benign: the same real function; both select on their own float32 probabilities, and on
    bf16 router logits two distinct logits differ by at least 2**-8 relatively, far beyond any
    float32 rounding of exp, so both orders (and the exact ties) agree with the logits' order and
    with the float64 oracle's; the weights differ by a few float32 ULPs, below the bf16 rounding
    of the returned weights.
    Faithful: Qwen3-MoE-like routing (64 experts, top-8, renormalised) on bf16 router logits of
    512 tokens, exact bf16 ties at the boundary included (~10% of tokens).
    """
    cfg = dict(cat.QWEN2_MOE, norm_topk_prob=True)
    return cat.SOFTMAX_TOPK_ROUTER.case("fused_topk_softmax_vs_hf", functools.partial(_fused_topk_softmax, **cfg),
                                        ref=functools.partial(cat.softmax_topk_router, **cfg),
                                        tokens=512, n_experts=cfg["n_experts"])


@positive(FAMILY, "benign rewrite: torch.topk vs stable sort-based top-k on float32 router scores",
          expect="PASS")
def topk_vs_sort_topk():
    """torch.topk vs a sort-based top-k on the same float32 softmax scores.

    Source: DeepSeek-V2 float32 router (torch.topk on the scores) vs a top-k taken as the first k
    of a stable descending sort, as kernels without a top-k primitive implement it.
    Why benign: both return the k largest scores; they can differ only on an exact float32 tie at
    the k-th place (torch.topk's CPU tie-break is nth_element's, the sort's is the lower index).
    With float32 scores from a float32 router GEMM such ties are rare: 2 in 4096 replicates x 256
    tokens at seed 0 (replicates 3392 and 3989, both resolved alike). With bf16 logits they occur
    for ~10% of tokens, the two tie-breaks route those tokens differently, and this rewrite would
    not be benign.
    Faithful: DeepSeek-V2-Lite routing (64 experts, top-6, softmax, not renormalised), 256 tokens
    of 512-wide hidden states, float32 router GEMM.
    """
    cfg = cat.DEEPSEEK_V2_LITE
    return cat.DEEPSEEK_ROUTER.case("topk_vs_sort_topk", functools.partial(_sort_based_router, **cfg),
                                    ref=functools.partial(cat.deepseek_router, **cfg), **cfg)


@positive(FAMILY, "benign rewrite: HF Mixtral routed MoE block (per-expert index_add_) vs dense-masked formulation",
          replicates=512, expect="PASS")
def routed_layer_vs_dense_masked():
    """Routed Mixtral MoE layer (HF loop) vs the dense-masked formulation of the same layer.

    Source: HF transformers MixtralSparseMoeBlock (for each expert: torch.where over the routing,
    expert on the gathered tokens, output times the bf16 combine weight, index_add_ into a bf16
    buffer) vs the dense-masked formulation (every expert on every token, outputs times the dense
    (tokens, experts) combine weights, zero off the selection, summed over experts in bf16).
    Why benign: sum_{i in S(t)} w_ti E_i(x_t) = sum_i wdense_ti E_i(x_t) with wdense zero off S(t):
    the same bf16 router and selection, each scaled expert output rounded to bf16 as in the
    reference, the zero terms exact, and a sum of two bf16 values rounded once either way. Only
    the rows an expert GEMM sees differ (all tokens vs the routed ones), which changes float64
    real-mode results at the 1e-16 level and nothing in bf16.
    Faithful: Mixtral routing (8 experts, top-2, bf16 router kept in the oracle by semantic
    rounding), SwiGLU experts, 128 tokens x 256 hidden, buckets = each token's top-1 expert
    (kcert.Labels). 512 replicates: the expert-labelled summary of a (128, 256) output and the
    8 dense experts dominate the cost here.
    """
    return cat.MOE_LAYER.case("routed_layer_vs_dense_masked",
                              functools.partial(_dense_masked_layer, top_k=cat.MIXTRAL["top_k"]))


@positive(FAMILY, "stressed probe: correct float32 top-k router on logits near-tied at the top-k boundary",
          expect="PASS")
def near_tied_router_float32():
    """A correct float32 top-k router under logits tied to within float32 resolution at the boundary.

    Source: float32 router logits fed to a top-k kernel (DeepSeek/vLLM after PR #14027 keep
    router logits in float32); vLLM fused_topk semantics (float32 softmax, top-k, renormalise by
    the reciprocal of the selected sum) vs the HF reference (divide by the sum).
    Why it must not FAIL: every token's k-th and (k+1)-th logits are within a few float32 ULPs,
    so float32 scores order the pair differently from the float64 oracle for many tokens: ref
    itself "flips" against its oracle. A correct kernel selects on the same float32 scores and
    flips identically: E_prod ~ E_ref, K ~ 1, not K = inf. Only a kernel selecting on other
    scores would turn those flips into a blow-up (see kcert.catalog.moe).
    Faithful: 512 tokens x 64 experts, top-8, renormalised; float32 logits (case dtype float32);
    the stress concentrates near ties that occur ~1e-6 per token in production. Measured at seed
    0: ref's selection differs from the oracle's for 3.9 of 512 tokens per replicate, prod's from
    ref's for none; K ~ 1 (1.0000 to 4 digits) in 1019 of 1024 replicates, 0 in the others.
    """
    cfg = dict(cat.QWEN2_MOE, norm_topk_prob=True)
    return Case(
        name="near_tied_router_float32",
        ref=functools.partial(cat.softmax_topk_router, **cfg),
        prod=functools.partial(_fused_topk_reciprocal, **cfg),
        inputs={"router_logits": cat.boundary_tied_logits(512, cfg["n_experts"], cfg["top_k"], gap=1e-6)},
        buckets=Axes(-1),
        dtype=torch.float32,
        description="correct float32 top-k router, logits near-tied at the top-k boundary",
    )
