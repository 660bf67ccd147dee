"""Reference operators with hand-written backward passes, and the blocks whose backward goes wrong.

Backward kernels are certified with :func:`kcert.gradients`: ref is differentiated by autograd,
prod may carry its own backward. This module holds what the backward controls need:

- :class:`RMSNormFunction` / :func:`rms_norm_manual`: RMSNorm with a hand-written float32 backward,
  out of place (the math of Liger-Kernel's RMSNorm backward: ``dx = rstd (g - xhat mean(g xhat))``
  with ``g = dy w``, ``dw = sum_rows dy xhat``, float32 throughout, one rounding per gradient).
  The forward is the catalogue's :func:`~kcert.catalog.norms.rms_norm` arithmetic (one rounding).
- :class:`SwiGLUFunction` / :func:`swiglu_manual`: the catalogue's SwiGLU forward
  (``silu(gate) * up`` in the working dtype) with a hand-written float32 backward.
- :func:`post_norm_residual_block`: Gemma-2's sandwich: ``h + post_norm(mix(pre_norm(h)))``, the
  residual added *after* a norm (Gemma-2 applies ``post_attention_layernorm`` /
  ``post_feedforward_layernorm`` to a sub-layer's output before the residual sum), with the
  sub-layer reduced to one linear map. The norm is a parameter, so the same block runs the
  catalogue's autograd RMSNorm or a hand-written one.
- :func:`linear_cross_entropy`: the LM head and its loss as the reference frameworks compute them:
  ``F.linear`` (float32 accumulation, one rounding to the working dtype), then the catalogue's
  token-mean cross-entropy in float32; its backward is autograd's: one GEMM per gradient over all
  tokens, float32 accumulation, one rounding.
- :func:`fused_linear_cross_entropy`: the chunked fused kernel (Liger-Kernel's
  ``LigerFusedLinearCrossEntropyFunction`` scheme): tokens are processed in chunks, the gradients
  are computed during the forward pass chunk by chunk and the weight gradient is accumulated
  across chunks in ``accum_dtype``; the backward only scales them by the upstream gradient.

Buckets: see :mod:`kcert.backward` (input gradients per feature channel, weight gradients per
parameter channel, i.e. per element of a gain and per output row of a linear weight).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..case import Axes, Fixed, Gaussian
from . import Operator
from . import norms as N
from .losses import IGNORE_INDEX, cross_entropy, padded_labels
from .probes import trained_weights

# --- RMSNorm with a hand-written backward ----------------------------------------------------------


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor):
    """Float32 gradients of ``y = x rstd w`` (``rstd = 1/sqrt(mean(x^2) + eps)`` per row):
    ``dx = rstd (g - xhat mean(g xhat))`` with ``g = dy w`` and ``xhat = x rstd``, and
    ``dw = sum over rows of dy xhat``. Returns unrounded float32 ``(dx, dw)``."""
    xhat = x.float() * rstd
    g = dy.float() * w.float()
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = (dy.float() * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


class RMSNormFunction(torch.autograd.Function):
    """RMSNorm ``round(x rstd w)`` with a hand-written float32 backward, written out of place."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, eps: float):
        x32 = x.float()
        rstd = torch.rsqrt(N.mean_square(x32) + eps)
        ctx.save_for_backward(x, w, rstd)
        return (x32 * rstd * w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, w, rstd = ctx.saved_tensors
        dx, dw = rms_norm_backward(dy, x, w, rstd)
        return dx.to(x.dtype), dw.to(w.dtype), None


def rms_norm_manual(x: torch.Tensor, w: torch.Tensor, eps: float = N.LLAMA_EPS) -> torch.Tensor:
    """The catalogue's RMSNorm forward with :class:`RMSNormFunction`'s hand-written backward."""
    return RMSNormFunction.apply(x, w, eps)


# --- SwiGLU with a hand-written backward -----------------------------------------------------------


class SwiGLUFunction(torch.autograd.Function):
    """``silu(gate) * up`` in the working dtype (the catalogue's forward) with a float32 backward:
    ``d up = dy silu(gate)``, ``d gate = dy up sigmoid(gate) (1 + gate (1 - sigmoid(gate)))``,
    each rounded once."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor):
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        gate, up = ctx.saved_tensors
        a, b, g = gate.float(), up.float(), dy.float()
        sig = torch.sigmoid(a)
        d_up = g * a * sig
        d_gate = g * b * sig * (1.0 + a * (1.0 - sig))
        return d_gate.to(gate.dtype), d_up.to(up.dtype)


def swiglu_manual(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The catalogue's SwiGLU forward with :class:`SwiGLUFunction`'s hand-written backward."""
    return SwiGLUFunction.apply(gate, up)


# --- Gemma-2's post-norm residual block ------------------------------------------------------------


def post_norm_residual_block(x, w_pre, w_mix, w_post, *, norm=N.rms_norm, eps: float = N.GEMMA_EPS):
    """``x + norm(linear(norm(x, w_pre), w_mix), w_post)``: a Gemma-2 sub-layer (pre-norm, the
    sub-layer, post-norm) and its residual sum, the sub-layer reduced to one linear map. In the
    backward pass the residual sum hands one gradient tensor to both the residual path and the
    post-norm's backward."""
    h = norm(x, w_pre, eps=eps)
    return x + norm(F.linear(h, w_mix), w_post, eps=eps)


def _block_inputs(*, shape=(1, 64, 256), shift=N.SHIFT, **_):
    return {"x": Gaussian(tuple(shape), shift=shift)}


def _block_weights(*, shape=(1, 64, 256), **_):
    hidden = tuple(shape)[-1]
    return {
        "w_pre": N.gains(hidden, "llama"),
        # a sub-layer's output projection: trained-like, scaled so its output is O(1)
        "w_mix": trained_weights((hidden, hidden), std=1.0 / math.sqrt(hidden)),
        "w_post": N.gains(hidden, "llama"),
    }


# --- LM head + cross-entropy, plain and fused ------------------------------------------------------


def linear_cross_entropy(x: torch.Tensor, w: torch.Tensor, labels: torch.Tensor, *,
                         ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """``cross_entropy(F.linear(x, w), labels)``: logits in the working dtype (float32 accumulation,
    one rounding), token-mean cross-entropy over the non-ignored tokens in float32."""
    return cross_entropy(F.linear(x, w), labels, ignore_index=ignore_index)


def liger_chunk_size(tokens: int, hidden: int, vocab: int) -> int:
    """Liger-Kernel's token chunk: ``ceil(V / H)`` chunks (a chunk's logits take about the memory of
    the hidden states), the chunk size rounded up to a power of two."""
    chunks = math.ceil(vocab / hidden)
    return 1 << max(0, math.ceil(math.log2(math.ceil(tokens / chunks))))


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, labels, chunk_size, accum_dtype, ignore_index):
        hidden = x.shape[-1]
        x2 = x.reshape(-1, hidden)
        y = labels.reshape(-1)
        tokens = x2.shape[0]
        count = (y != ignore_index).sum()
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        grad_x = torch.empty_like(x2)
        grad_w = torch.zeros(w.shape, dtype=accum_dtype, device=w.device)
        for start in range(0, tokens, chunk_size):
            xc, yc = x2[start:start + chunk_size], y[start:start + chunk_size]
            logits = F.linear(xc, w)  # working dtype, one rounding (as the reference)
            z = logits.float()
            loss = loss + F.cross_entropy(z, yc, ignore_index=ignore_index, reduction="sum")
            # d(token-mean loss)/d logits in float32, written back in the logits' dtype (the CE
            # kernel overwrites the logits with their gradient)
            valid = yc != ignore_index
            onehot = F.one_hot(yc.clamp_min(0), z.shape[-1]).to(z.dtype)
            gz = ((torch.softmax(z, -1) - onehot) * valid.unsqueeze(-1) / count).to(logits.dtype)
            grad_x[start:start + chunk_size] = gz @ w
            if accum_dtype == torch.float32:
                grad_w += gz.t().float() @ xc.float()  # low-precision operands, float32 accumulator
            else:
                grad_w += gz.t() @ xc  # the chunk's GEMM, added into the low-precision accumulator
        ctx.save_for_backward(grad_x.reshape(x.shape), grad_w.to(w.dtype))
        return loss / count

    @staticmethod
    def backward(ctx, grad_output):
        grad_x, grad_w = ctx.saved_tensors
        if bool(grad_output != 1):  # loss.backward() passes 1: nothing to scale
            grad_x = (grad_x.float() * grad_output).to(grad_x.dtype)
            grad_w = (grad_w.float() * grad_output).to(grad_w.dtype)
        return grad_x, grad_w, None, None, None, None


def fused_linear_cross_entropy(x: torch.Tensor, w: torch.Tensor, labels: torch.Tensor, *,
                               chunk_size: int | None = None, accum_dtype: torch.dtype = torch.float32,
                               ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Chunked fused LM head + token-mean cross-entropy (the Liger-Kernel scheme): per token chunk,
    logits in the working dtype, their float32 softmax gradient rounded to the working dtype, the
    chunk's input gradient ``gz @ w`` and its weight-gradient contribution ``gz^T x`` accumulated in
    ``accum_dtype`` (float32: one rounding at the end). ``chunk_size``: default Liger's."""
    if chunk_size is None:
        chunk_size = liger_chunk_size(x.reshape(-1, x.shape[-1]).shape[0], x.shape[-1], w.shape[0])
    return _FusedLinearCrossEntropy.apply(x, w, labels, chunk_size, accum_dtype, ignore_index)


LM_TOKENS = (2, 256)  # (batch, sequence): 512 tokens
LM_HIDDEN = 16  # shrunk to keep the control cheap on CPU: the defect depends on the chunk count, not on H
# V / H = 128: Liger's heuristic cuts 512 tokens into 128 chunks of 4. Production: small models with
# large vocabularies, e.g. Qwen2.5-0.5B (151936 / 896) or Gemma-3 1B (262144 / 1152), give 128 chunks
# at 8192 tokens; Llama-3 8B (128256 / 4096) gives 32
LM_VOCAB = 2048


def _lm_inputs(*, batch=LM_TOKENS[0], seq=LM_TOKENS[1], hidden=LM_HIDDEN, vocab=LM_VOCAB, shift=N.SHIFT, **_):
    labels = padded_labels(1, batch, seq, vocab)[0]
    return {"x": Gaussian((batch, seq, hidden), shift=shift), "labels": Fixed(labels)}


def _lm_weights(*, hidden=LM_HIDDEN, vocab=LM_VOCAB, logit_std: float = 2.5, **_):
    # a trained LM head gives logits of std ~2-3 on unit-scale final hidden states
    return {"w": trained_weights((vocab, hidden), std=logit_std / math.sqrt(hidden), large_fraction=0.0)}


POST_NORM_BLOCK = Operator(
    name="post_norm_residual_block",
    family="backward",
    reference=post_norm_residual_block,
    inputs=_block_inputs,
    weights=_block_weights,
    buckets=Axes(-1),
    triggers=("a norm whose output feeds the residual sum directly (post-norm): one gradient tensor, two consumers",),
    description="Gemma-2 sandwich block x + post_norm(linear(pre_norm(x))) with the catalogue's RMSNorm",
)

LINEAR_CROSS_ENTROPY = Operator(
    name="linear_cross_entropy",
    family="backward",
    reference=linear_cross_entropy,
    inputs=_lm_inputs,
    weights=_lm_weights,
    buckets=Axes(),
    triggers=("V / H large enough that the fused kernel cuts the tokens into many chunks",
              "padded rows (ignore_index) of unequal length"),
    description="LM head F.linear + token-mean cross-entropy (float32 scalar)",
)

OPERATORS = (POST_NORM_BLOCK, LINEAR_CROSS_ENTROPY)
