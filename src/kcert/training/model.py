"""The training model: a small pre-norm decoder whose kernels come from one arm of a case.

Layers: token embedding; per layer ``h += attn(norm(h))``, ``h += mlp(norm(h))``; a final norm and
an output head (untied). Attention is causal multi-head with RoPE on q and k; the MLP is gated
(SwiGLU by default) unless the case's activation is unary. Parameters are float32 master weights,
cast to the working dtype at every use, so autograd runs the backward of the working-dtype
kernels (the case's prod included) and accumulates the gradients in float32.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .config import TrainingConfig
from .slots import Kernels

PARAMS_STREAM = 13


def norm_sites(layers: int) -> int:
    """Norms in the model: two per layer and the final one."""
    return 2 * layers + 1


def site_name(site: int, layers: int) -> str:
    if site == 2 * layers:
        return "final"
    return f"layer{site // 2}.{'attn' if site % 2 == 0 else 'mlp'}"


class Decoder(torch.nn.Module):
    def __init__(self, config: TrainingConfig, kernels: Kernels, dtype: torch.dtype, heads: int, hidden: int,
                 norm_init: list[dict[str, np.ndarray]], generator: torch.Generator, experts: int = 0,
                 router_init: dict[str, np.ndarray] | None = None):
        super().__init__()
        self.config, self.kernels, self.dtype = config, kernels, dtype
        self.hidden, self.heads = hidden, heads
        self.expert_ffn = max(8, config.ffn // 8)
        e_bias = (router_init or {}).get("e_bias")
        # DeepSeek's selection bias is set by load balancing, not by gradients: a fixed buffer here
        self.register_buffer("e_bias", None if e_bias is None else torch.as_tensor(e_bias, dtype=torch.float32))
        self.head_dim = hidden // heads
        v, f, layers = config.language.vocab, config.ffn, config.layers
        p = torch.nn.ParameterDict()

        def normal(*shape, std):
            return torch.nn.Parameter(torch.randn(*shape, generator=generator) * std)

        p["embed"] = normal(v, hidden, std=1.0)
        out_std = 1.0 / math.sqrt(hidden) / math.sqrt(2 * layers)  # residual branches scaled by depth (GPT-2)
        for layer in range(layers):
            for name in ("q", "k", "v"):
                p[f"layer{layer}_{name}"] = normal(hidden, hidden, std=1.0 / math.sqrt(hidden))
            p[f"layer{layer}_o"] = normal(hidden, hidden, std=out_std)
            if kernels.router is not None:  # a mixture of small SwiGLU experts
                fe = self.expert_ffn
                p[f"layer{layer}_router"] = normal(experts, hidden, std=1.0 / math.sqrt(hidden))
                if router_init and "w_gate" in router_init:
                    p[f"layer{layer}_router"].data.copy_(torch.as_tensor(router_init["w_gate"], dtype=torch.float32))
                p[f"layer{layer}_experts_gate"] = normal(experts, fe, hidden, std=1.0 / math.sqrt(hidden))
                p[f"layer{layer}_experts_up"] = normal(experts, fe, hidden, std=1.0 / math.sqrt(hidden))
                p[f"layer{layer}_experts_down"] = normal(experts, hidden, fe,
                                                         std=1.0 / math.sqrt(fe) / math.sqrt(2 * layers))
                continue
            if kernels.gated:
                p[f"layer{layer}_gate"] = normal(f, hidden, std=1.0 / math.sqrt(hidden))
            p[f"layer{layer}_up"] = normal(f, hidden, std=1.0 / math.sqrt(hidden))
            p[f"layer{layer}_down"] = normal(hidden, f, std=1.0 / math.sqrt(f) / math.sqrt(2 * layers))
        p["head"] = normal(v, hidden, std=1.0 / math.sqrt(hidden))
        if kernels.linear_bias:
            for name in [n for n in p if n != "embed"]:
                p[f"{name}_bias"] = torch.nn.Parameter(torch.zeros(p[name].shape[0]))
        for site, values in enumerate(norm_init):
            for key, array in values.items():
                p[f"norm{site}_{key}"] = torch.nn.Parameter(torch.as_tensor(array, dtype=torch.float32).clone())
        self.p = p

    # --- parameter groups -----------------------------------------------------------------------
    def decayed(self) -> list[str]:
        return [n for n, t in self.p.items() if t.dim() >= 2 and n != "embed"]

    def norm_parameters(self) -> dict[str, np.ndarray]:
        return {n: t.detach().double().numpy().copy() for n, t in self.p.items() if n.startswith("norm")}

    def consumers(self, site: int) -> list[str]:
        """The matrices that read norm site ``site``'s output (their column c multiplies channel c)."""
        layers = self.config.layers
        if site == 2 * layers:
            return ["head"]
        layer = site // 2
        if site % 2 == 0:
            return [f"layer{layer}_{n}" for n in ("q", "k", "v")]
        if self.kernels.router is not None:
            return [f"layer{layer}_{n}" for n in ("router", "experts_gate", "experts_up")]
        return [f"layer{layer}_{n}" for n in (("gate", "up") if self.kernels.gated else ("up",))]

    def downstream_scales(self) -> dict[str, np.ndarray]:
        """Per norm site, the RMS of column c over the matrices that read it: the other half of a
        channel's effective scale (gain x column), which the gain can trade with."""
        out = {}
        for site in range(2 * self.config.layers + 1):
            columns = torch.cat([self.p[n].detach().reshape(-1, self.hidden) for n in self.consumers(site)], dim=0)
            out[f"norm{site}_downstream"] = columns.double().pow(2).mean(dim=0).sqrt().numpy().copy()
        return out

    # --- forward ---------------------------------------------------------------------------------
    def _w(self, name: str) -> torch.Tensor:
        return self.p[name].to(self.dtype)

    def _cast(self, y: torch.Tensor) -> torch.Tensor:
        return y if y.dtype == self.dtype else y.to(self.dtype)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        bias = self._w(f"{name}_bias") if self.kernels.linear_bias else None
        lead = x.shape[:-1]
        y = self.kernels.linear(x.reshape(-1, x.shape[-1]), self._w(name), bias)
        return self._cast(y).reshape(*lead, -1)

    def _norm(self, x: torch.Tensor, site: int) -> torch.Tensor:
        bias = self._w(f"norm{site}_b") if self.kernels.norm_bias else None
        return self._cast(self.kernels.norm(x, self._w(f"norm{site}_w"), bias))

    def _attention(self, x: torch.Tensor, layer: int, positions: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape

        def heads(name):
            return self._linear(x, f"layer{layer}_{name}").view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q, k = self.kernels.rope(heads("q"), heads("k"), positions)
        # eager attention as transformers writes it (softmax in float32, probabilities rounded to the
        # working dtype): on CPU 3-4x faster than scaled_dot_product_attention's bf16 backward here
        scores = self._cast(q) @ self._cast(k).transpose(-1, -2) * self.head_dim ** -0.5
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1, dtype=torch.float32)
        out = probs.to(self.dtype) @ heads("v")
        return self._linear(out.transpose(1, 2).reshape(b, s, self.hidden), f"layer{layer}_o")

    def _moe(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """Every token goes to the experts the router gives a non-zero weight, weighted by it."""
        flat = x.reshape(-1, self.hidden)
        e_bias = None if self.e_bias is None else self.e_bias.to(self.dtype)
        weights = self._cast(self.kernels.router(flat, self._w(f"layer{layer}_router"), e_bias))
        gate, up, down = (self._w(f"layer{layer}_experts_{n}") for n in ("gate", "up", "down"))
        out = torch.zeros_like(flat)
        for e in range(weights.shape[1]):
            tokens = torch.nonzero(weights[:, e]).squeeze(1)
            if tokens.numel() == 0:
                continue
            xe = flat.index_select(0, tokens)
            h = self.kernels.activation(xe @ gate[e].T, xe @ up[e].T) @ down[e].T
            out = out.index_add(0, tokens, h * weights.index_select(0, tokens)[:, e:e + 1])
        return out.reshape(x.shape)

    def _mlp(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        if self.kernels.router is not None:
            return self._moe(x, layer)
        up = self._linear(x, f"layer{layer}_up")
        lead = up.shape[:-1]
        if self.kernels.gated:
            gate = self._linear(x, f"layer{layer}_gate")
            h = self.kernels.activation(gate.reshape(-1, gate.shape[-1]), up.reshape(-1, up.shape[-1]))
        else:
            h = self.kernels.activation(up.reshape(-1, up.shape[-1]))
        return self._linear(self._cast(h).reshape(*lead, -1), f"layer{layer}_down")

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = F.embedding(tokens, self._w("embed"))
        for layer in range(self.config.layers):
            h = h + self._attention(self._norm(h, 2 * layer), layer, positions)
            h = h + self._mlp(self._norm(h, 2 * layer + 1), layer)
        h = self._norm(h, 2 * self.config.layers)
        return self._linear(h, "head").float()
