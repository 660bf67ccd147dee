"""MoE routing reference operators: router scores, (grouped) top-k, combine weights, a small MoE layer.

References are written the way the reference frameworks write them (HF transformers' Mixtral,
Qwen2-MoE, DeepSeek-V2/V3 routers; DeepSeek's own inference code), in working precision with the
float32 internals those references use. Settings (top-k, groups, scoring, renormalisation,
scaling) are keyword-only and closed over with :func:`functools.partial`; tensors are keyword
arguments named like the probes.

Outputs. A router returns its combine weights *scattered to a dense (tokens, experts) tensor*
(zero for experts not selected), so that a defect localises in the expert's column: bucket with
``Axes(-1)``. A routed MoE layer returns hidden states (tokens, hidden): bucket by expert with
:func:`top1_expert_labels` (a ``kcert.Labels``).

Top-k makes these operators discontinuous, and the variance gate compares prod and ref against
the float64 oracle element-wise. Two rules keep a correct kernel from failing for the wrong reason:

* *shared selection scores*. Where ref's working-precision scores and the float64 oracle's order
  two near-tied experts differently (a "tie flip"), ref and the oracle route the token to
  different experts and E_ref is of the order of a combine weight. A correct prod that selects on
  the same scores flips identically, so E_prod ~ E_ref and K ~ 1, never a blow-up. A prod that
  computes its selection scores with another rounding (another GEMM accumulation order, another
  softmax on float32 logits) flips *other* near-ties than ref does (about once per 10**6 tokens
  for float32 scores): then E_prod is a combine weight while E_ref is a rounding error, and K is
  huge though both choices are equally valid. The certifiable contract of a top-k kernel is
  therefore "same selection scores (or an order-preserving map of exact bf16 logits), same
  tie-break, then the continuous part". A rewrite of the score computation itself can be
  certified on the continuous scores (:func:`router_probs`), with one caveat: its float32 output
  carries errors of a few float32 ULPs in both ref and prod, K is then a ratio of two
  independent maxima, and the default variance thresholds (calibrated on outputs rounded to the
  working dtype) read its extrapolated tail as WARN (U ~ 2.7-6 measured here for a split-K or
  epilogue-fused router on 256-512 tokens x 64 experts).
* *semantic rounding of bf16 router logits*. HF Mixtral/Qwen-MoE compute the router GEMM in bf16:
  the model routes on bf16 logits. In real mode that GEMM becomes float64 and the oracle would
  route tokens differently from the model it defines (0.23% of tokens for the Mixtral layer
  contract here: 8 experts, top-2, a flip in ~1 replicate in 4); :func:`router_logits_model_dtype`
  keeps the bf16 rounding inside the oracle with :func:`kcert.semantic_round` (docs/method.md, "Gate 2").

Router logits given directly as a bf16 probe (vLLM's ``gating_output``) are exact values shared by
ref, prod and the oracle: a softmax or sigmoid preserves their order and their exact ties in any
precision, so every precision selects the same experts (torch.topk breaks exact ties the same way
for bfloat16, float32 and float64 inputs on CPU).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from ..case import Axes, Custom, Gaussian, Labels
from ..rounding import semantic_round
from . import Operator
from .probes import shifted, trained_weights

__all__ = [
    "router_logits_fp32", "router_logits_model_dtype", "router_scores", "router_probs",
    "grouped_topk_indices", "dense_combine", "deepseek_router", "softmax_topk_router",
    "mixtral_routing", "swiglu_expert", "mixtral_moe_layer", "top1_expert_labels", "boundary_tied_logits", "router_logit_probe",
    "DEEPSEEK_V3", "MOONLIGHT", "DEEPSEEK_V2_LITE", "QWEN2_MOE", "MIXTRAL",
    "DEEPSEEK_ROUTER", "SOFTMAX_TOPK_ROUTER", "ROUTER_PROBS", "MOE_LAYER",
]


# --- model configurations (scaled to CPU-sized shapes; the routing structure is the model's) ----------

# DeepSeek-V3: 256 experts in 8 groups, 4 groups kept, top-8, sigmoid, e_score_correction_bias,
# renormalised, routed_scaling_factor 2.5. Scaled here to 64 experts in 8 groups of 8.
DEEPSEEK_V3 = dict(n_experts=64, top_k=8, n_group=8, topk_group=4, score_func="sigmoid",
                   norm_topk_prob=True, scaling=2.5, selection_bias=True)
# Moonlight-16B-A3B (DeepSeek-V3 architecture): 64 experts, top-6, one group, sigmoid, bias,
# norm_topk_prob=True, routed_scaling_factor 2.446.
MOONLIGHT = dict(n_experts=64, top_k=6, n_group=1, topk_group=1, score_func="sigmoid",
                 norm_topk_prob=True, scaling=2.446, selection_bias=True)
# DeepSeek-V2-Lite: 64 experts, top-6, softmax, no group limit, not renormalised, scale 1.
DEEPSEEK_V2_LITE = dict(n_experts=64, top_k=6, n_group=1, topk_group=1, score_func="softmax",
                        norm_topk_prob=False, scaling=1.0, selection_bias=False)
# Qwen2-57B-A14B (Qwen2-MoE): 64 experts, top-8, softmax, norm_topk_prob=False.
QWEN2_MOE = dict(n_experts=64, top_k=8, norm_topk_prob=False)
# Mixtral 8x7B: 8 experts, top-2, softmax then top-k then renormalise.
MIXTRAL = dict(n_experts=8, top_k=2, norm_topk_prob=True)


# --- router scores -----------------------------------------------------------------------------------


def router_logits_fp32(x: torch.Tensor, w_gate: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2/V3 (HF) router GEMM: hidden states and gate weight cast to float32, float32 logits."""
    return F.linear(x.to(torch.float32), w_gate.to(torch.float32))


def router_logits_model_dtype(x: torch.Tensor, w_gate: torch.Tensor) -> torch.Tensor:
    """Mixtral/Qwen-MoE (HF) router GEMM: an ``nn.Linear`` in the model dtype, bf16 logits. The bf16
    rounding is part of the model's routing definition and is kept by the oracle (semantic_round)."""
    return semantic_round(F.linear(x, w_gate), x.dtype)


def router_scores(logits: torch.Tensor, score_func: str) -> torch.Tensor:
    """Affinity scores in float32: softmax over experts or element-wise sigmoid."""
    if score_func == "softmax":
        return torch.softmax(logits, dim=-1, dtype=torch.float32)
    if score_func == "sigmoid":
        return torch.sigmoid(logits.to(torch.float32))
    raise ValueError(f"score_func must be 'softmax' or 'sigmoid', got {score_func!r}")


def router_probs(x: torch.Tensor, w_gate: torch.Tensor) -> torch.Tensor:
    """Router GEMM + softmax in float32 (DeepSeek-V2 / Qwen gate with a float32 router): the
    continuous part of routing, (tokens, experts) probabilities. A fused router kernel that
    reorders the GEMM accumulation is certified here, before any top-k."""
    return router_scores(router_logits_fp32(x, w_gate), "softmax")


# --- selection -------------------------------------------------------------------------------------


def grouped_topk_indices(choice: torch.Tensor, top_k: int, n_group: int, topk_group: int) -> torch.Tensor:
    """Node-limited top-k (DeepSeek-V3): rank groups of experts by the sum of their two best
    selection scores, keep ``topk_group`` groups, take the top-k experts among the kept groups.
    With ``n_group == 1`` this is a plain top-k. Experts of dropped groups get -inf, so negative
    selection scores in kept groups still win over them."""
    tokens, n_experts = choice.shape
    if n_group == 1:
        return torch.topk(choice, top_k, dim=-1).indices
    per_group = choice.reshape(tokens, n_group, n_experts // n_group)
    group_rank = per_group.topk(2, dim=-1).values.sum(dim=-1)  # (tokens, n_group)
    kept = group_rank.topk(topk_group, dim=-1).indices
    keep = torch.zeros(tokens, n_group, dtype=torch.bool, device=choice.device).scatter(1, kept, True)
    keep = keep.unsqueeze(-1).expand(tokens, n_group, n_experts // n_group).reshape(tokens, n_experts)
    masked = choice.masked_fill(~keep, float("-inf"))
    return torch.topk(masked, top_k, dim=-1).indices


def dense_combine(indices: torch.Tensor, weights: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Scatter per-token top-k combine weights to a dense (tokens, experts) tensor (0 elsewhere)."""
    out = torch.zeros(indices.shape[0], n_experts, dtype=weights.dtype, device=weights.device)
    return out.scatter(1, indices, weights)


def deepseek_router(x: torch.Tensor, w_gate: torch.Tensor, e_bias: torch.Tensor | None = None, *, top_k: int,
                    n_group: int = 1, topk_group: int = 1, score_func: str = "sigmoid",
                    norm_topk_prob: bool = True, scaling: float = 1.0, **_config) -> torch.Tensor:
    """DeepSeek-V2/V3 MoE gate (HF transformers): float32 router GEMM, softmax or sigmoid scores,
    selection on scores + e_score_correction_bias (the bias is used for selection ONLY), grouped
    top-k, combine weights gathered from the unbiased scores, optional renormalisation, routed
    scaling factor. Returns the dense float32 (tokens, experts) combine weights."""
    scores = router_scores(router_logits_fp32(x, w_gate), score_func)
    choice = scores if e_bias is None else scores + e_bias.to(torch.float32)
    idx = grouped_topk_indices(choice, top_k, n_group, topk_group)
    weights = scores.gather(1, idx)
    if top_k > 1 and norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    weights = weights * scaling
    return dense_combine(idx, weights, scores.shape[-1])


def softmax_topk_router(router_logits: torch.Tensor, *, top_k: int, norm_topk_prob: bool, **_config) -> torch.Tensor:
    """HF Mixtral / Qwen2-MoE / Qwen3-MoE routing on the router logits (vLLM's gating_output):
    softmax over all experts in float32, top-k, optional renormalisation, combine weights cast
    to the model dtype. Returns the dense (tokens, experts) combine weights in the model dtype."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, idx = torch.topk(probs, top_k, dim=-1)
    if norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return dense_combine(idx, weights.to(router_logits.dtype), router_logits.shape[-1])


# --- a small routed MoE layer (Mixtral) ------------------------------------------------------------------


def mixtral_routing(x: torch.Tensor, w_gate: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """HF Mixtral routing: bf16 router logits (kept by the oracle), softmax in float32, top-k,
    renormalise, weights cast to the model dtype. Returns (weights (T, k), expert ids (T, k))."""
    logits = router_logits_model_dtype(x, w_gate)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, idx = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(x.dtype), idx


def swiglu_expert(h: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One SwiGLU expert in the model dtype: w2(silu(w1 h) * w3 h)."""
    return F.linear(F.silu(F.linear(h, w1)) * F.linear(h, w3), w2)


def mixtral_moe_layer(x: torch.Tensor, w_gate: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
                      *, top_k: int, **_config) -> torch.Tensor:
    """HF Mixtral sparse MoE block: bf16 router, softmax/top-k/renormalise in float32, weights cast
    to bf16; each expert runs on the tokens routed to it, its output scaled by the combine weight
    in bf16 and accumulated into a bf16 buffer with index_add_ (expert order).
    Weights: w_gate (E, H), w1/w3 (E, F, H), w2 (E, H, F)."""
    weights, idx = mixtral_routing(x, w_gate, top_k)
    out = torch.zeros_like(x)
    for e in range(w_gate.shape[0]):
        token, slot = torch.where(idx == e)
        if token.numel() == 0:
            continue
        y = swiglu_expert(x[token], w1[e], w3[e], w2[e]) * weights[token, slot, None]
        out.index_add_(0, token, y.to(x.dtype))
    return out


def top1_expert_labels(top_k: int = 2):
    """``Labels`` function for a routed output (tokens, hidden): each token's bucket is the expert
    the reference router ranks first (computed from the probes, in working precision)."""

    def labels(inputs, weights, ref_output):
        _, idx = mixtral_routing(inputs["x"], weights["w_gate"], top_k)
        return idx[:, :1]

    return labels


# --- probes --------------------------------------------------------------------------------------------


def router_logit_probe(tokens: int, n_experts: int, std: float = 1.0) -> Gaussian:
    """Router logits as a model emits them (vLLM's gating_output): N(0, std**2), rounded to the case
    dtype. Softmax is shift-invariant, so no symmetry-breaking shift is needed; with bf16 logits
    and 64 experts the k-th and (k+1)-th logits are exactly tied for ~10% of tokens."""
    return Gaussian((tokens, n_experts), std=std)


def boundary_tied_logits(tokens: int, n_experts: int, top_k: int, gap: float, std: float = 1.0) -> Custom:
    """Stressed router logits: N(0, std**2) rows whose (k+1)-th largest entry is moved to within
    ``gap`` (uniform) below the k-th largest, so every token has a near tie exactly at the top-k
    boundary. With float32 logits and ``gap`` a few float32 ULPs, float32 and float64 scores order
    the pair differently for a large share of tokens (the tie flips production sees ~1e-6 of the
    time, concentrated). ``probes.near_tied_logits`` ties the two *largest* entries instead, which
    changes a selection only for top-1 routing."""

    def draw(g: torch.Generator, device) -> torch.Tensor:
        x = torch.randn(tokens, n_experts, generator=g, device=device, dtype=torch.float64) * std
        top = torch.topk(x, top_k + 1, dim=-1)
        kth = top.values[:, top_k - 1:top_k]
        below = kth - torch.rand(tokens, 1, generator=g, device=device, dtype=torch.float64) * gap
        return x.scatter(1, top.indices[:, top_k:top_k + 1], below).to(torch.float32)

    return Custom(draw, f"N(0, {std}^2) router logits, (k+1)-th within {gap:g} of the k-th (k={top_k})",
                  (tokens, n_experts))


def _router_inputs(tokens: int = 256, hidden: int = 512, **_):
    return {"x": shifted((tokens, hidden))}


def _router_weights(n_experts: int = 64, hidden: int = 512, selection_bias: bool = False, gate_std: float = 0.03,
                    bias_std: float = 0.1, **_):
    """Trained-like gate rows (std such that logits are O(1): sqrt(hidden) * gate_std * ~1.4 ~ 1)
    with a share of large entries; e_score_correction_bias of the order of the score spread, the
    regime where it changes selections (its purpose)."""
    w = {"w_gate": trained_weights((n_experts, hidden), std=gate_std, large_fraction=0.01, large_scale=10.0)}
    if selection_bias:
        w["e_bias"] = Gaussian((n_experts,), std=bias_std)
    return w


def _logit_inputs(tokens: int = 512, n_experts: int = 64, logit_std: float = 1.0, **_):
    return {"router_logits": router_logit_probe(tokens, n_experts, logit_std)}


def _layer_inputs(tokens: int = 128, hidden: int = 256, **_):
    return {"x": shifted((tokens, hidden))}


def _layer_weights(n_experts: int = 8, hidden: int = 256, ffn: int = 64, **_):
    return {
        "w_gate": trained_weights((n_experts, hidden), std=0.06, large_fraction=0.01, large_scale=10.0),
        "w1": trained_weights((n_experts, ffn, hidden), std=1.0 / math.sqrt(hidden)),
        "w3": trained_weights((n_experts, ffn, hidden), std=1.0 / math.sqrt(hidden)),
        "w2": trained_weights((n_experts, hidden, ffn), std=1.0 / math.sqrt(ffn)),
    }


# --- operators -----------------------------------------------------------------------------------------

DEEPSEEK_ROUTER = Operator(
    name="deepseek_router",
    family="moe",
    reference=functools.partial(deepseek_router, **DEEPSEEK_V3),
    inputs=_router_inputs,
    weights=_router_weights,
    buckets=Axes(-1),
    triggers=("selection bias leaking into combine weights", "missing top-k renormalisation",
              "router logits rounded before top-k (near ties at the boundary)", "group-limited routing"),
    description="DeepSeek-V2/V3 MoE gate (float32 router, grouped top-k, selection bias), dense combine weights",
)

SOFTMAX_TOPK_ROUTER = Operator(
    name="softmax_topk_router",
    family="moe",
    reference=functools.partial(softmax_topk_router, **QWEN2_MOE),
    inputs=_logit_inputs,
    buckets=Axes(-1),
    triggers=("weights taken from logits instead of probabilities", "renormalisation", "exact bf16 ties"),
    description="Mixtral/Qwen-MoE routing on bf16 router logits: softmax, top-k, (renormalise), dense weights",
)

ROUTER_PROBS = Operator(
    name="router_probs",
    family="moe",
    reference=router_probs,
    inputs=_router_inputs,
    weights=_router_weights,
    buckets=Axes(-1),
    triggers=("router GEMM accumulation order", "softmax normalisation"),
    description="float32 router GEMM + softmax: (tokens, experts) probabilities",
)

MOE_LAYER = Operator(
    name="mixtral_moe_layer",
    family="moe",
    reference=functools.partial(mixtral_moe_layer, top_k=MIXTRAL["top_k"]),
    inputs=_layer_inputs,
    weights=_layer_weights,
    buckets=Labels(top1_expert_labels(MIXTRAL["top_k"]), count=MIXTRAL["n_experts"], name="top-1 expert"),
    triggers=("combine accumulation precision and order", "routing"),
    description="HF Mixtral sparse MoE block (8 experts, top-2), routed hidden output",
)

OPERATORS = (DEEPSEEK_ROUTER, SOFTMAX_TOPK_ROUTER, ROUTER_PROBS, MOE_LAYER)
