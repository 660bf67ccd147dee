"""Reference losses: token cross-entropy (ignore_index, z-loss, logit softcap) and the
gradient-accumulation loss over micro-batches with unequal token counts.

Written the way the reference frameworks compute them:

- ``cross_entropy``: transformers' ``ForCausalLMLoss``: logits upcast to float32, optional
  Gemma-2 style final-logit softcap ``cap * tanh(z / cap)``, ``F.cross_entropy`` with
  ``ignore_index`` and mean over the non-ignored tokens; optional z-loss (PaLM)
  ``z_loss * mean(logsumexp(z)**2)`` over the same tokens. Output: a float32 scalar.
- ``grad_accum_loss``: the loss of one optimizer step accumulated over ``M`` micro-batches,
  as transformers computes it since the fix of #34191: every micro-batch sums its token
  losses and divides by the number of non-ignored tokens of the *whole* step
  (``num_items_in_batch``), and the micro-batch losses are added: the token mean over the step,
  whatever the micro-batch token counts. Output: a float32 scalar.

Buckets: a scalar loss is one bucket (``Axes()``). The replicate (one step's batch) is the
statistical unit.

Probes: ``labels`` are a fixed step batch (``Fixed``): causal-LM rows with right padding set to
``ignore_index``, lengths unequal across micro-batches as packing-free SFT batches have; the
logits are redrawn per replicate with a confidence that grows with the token's position (an LM's
loss falls with context length), so the mean loss of a micro-batch depends on its token count,
as in production. Outlier logits (beyond a softcap, up to ~60) are part of the contract.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..case import Axes, Custom, Fixed
from . import Operator

IGNORE_INDEX = -100


def _softcap(z: torch.Tensor, softcap: float | None) -> torch.Tensor:
    return z if softcap is None else softcap * torch.tanh(z / softcap)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = IGNORE_INDEX,
                  z_loss: float = 0.0, softcap: float | None = None, label_smoothing: float = 0.0) -> torch.Tensor:
    """Token-mean cross-entropy over non-ignored tokens (float32), optional softcap, z-loss and label
    smoothing (``F.cross_entropy``'s: the target distribution ``(1 - eps) one_hot + eps / V``).
    ``logits``: (..., V); ``labels``: (...) integer ids, ``ignore_index`` for padding."""
    z = _softcap(logits.float(), softcap)
    z = z.reshape(-1, z.shape[-1])
    y = labels.reshape(-1)
    loss = F.cross_entropy(z, y, ignore_index=ignore_index, reduction="mean", label_smoothing=label_smoothing)
    if z_loss:
        valid = y != ignore_index
        lse = torch.logsumexp(z, dim=-1)
        loss = loss + z_loss * (lse.square() * valid).sum() / valid.sum()
    return loss


def token_losses(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = IGNORE_INDEX,
                 z_loss: float = 0.0, softcap: float | None = None) -> torch.Tensor:
    """Per-token loss (float32), ``reduction="none"``: cross-entropy plus ``z_loss * lse**2``,
    0 at ignored tokens; shape of ``labels``. Summing it over tokens and dividing by the number of
    non-ignored tokens gives :func:`cross_entropy`."""
    z = _softcap(logits.float(), softcap)
    z = z.reshape(-1, z.shape[-1])
    y = labels.reshape(-1)
    out = F.cross_entropy(z, y, ignore_index=ignore_index, reduction="none")
    if z_loss:
        out = out + z_loss * torch.logsumexp(z, dim=-1).square() * (y != ignore_index)
    return out.reshape(labels.shape)


def grad_accum_loss(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Loss of one optimizer step over ``M`` micro-batches: ``logits`` (M, B, S, V), ``labels``
    (M, B, S). Each micro-batch's summed token loss is divided by the step's token count
    (``num_items_in_batch``) and the micro-batch losses are added."""
    num_items = (labels != ignore_index).sum()
    total = None
    for m in range(logits.shape[0]):
        z = logits[m].float()
        part = F.cross_entropy(z.reshape(-1, z.shape[-1]), labels[m].reshape(-1), ignore_index=ignore_index,
                               reduction="sum") / num_items
        total = part if total is None else total + part
    return total


# --- probe contracts ----------------------------------------------------------------------------------


def padded_labels(micro_batches: int, batch: int, seq: int, vocab: int, lengths: list[int] | None = None,
                  seed: int = 1234, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """A fixed step batch of causal-LM labels (M, B, S): random token ids, each row right-padded
    with ``ignore_index`` after its length. Default lengths: drawn once between seq/8 and seq, so
    micro-batches carry unequal token counts (the trigger of transformers #34191)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, vocab, (micro_batches, batch, seq), generator=g)
    if lengths is None:
        lengths = torch.randint(max(1, seq // 8), seq + 1, (micro_batches * batch,), generator=g).tolist()
    pos = torch.arange(seq)
    for i, n in enumerate(lengths):
        labels[i // batch, i % batch, pos >= n] = ignore_index
    return labels


def lm_logits(labels: torch.Tensor, vocab: int, std: float = 2.0, confidence: float = 3.0,
              context: float = 32.0, outlier_fraction: float = 0.001, outlier_scale: float = 30.0) -> Custom:
    """Logits of a language model scoring ``labels``: N(0, std**2) per entry, the target's logit
    raised by ``confidence * (1 - exp(-position / context))`` (the loss falls with context), and a
    fraction ``outlier_fraction`` of entries scaled by ``outlier_scale`` (outlier logits, beyond
    a softcap). Shape ``labels.shape + (vocab,)``; float32."""
    shape = tuple(labels.shape) + (vocab,)
    seq = labels.shape[-1]
    boost = confidence * (1.0 - torch.exp(-torch.arange(seq, dtype=torch.float32) / context))
    target = labels.clamp_min(0).unsqueeze(-1)
    valid = (labels >= 0).unsqueeze(-1)

    def draw(g: torch.Generator, device) -> torch.Tensor:
        z = torch.randn(shape, generator=g, device=device) * std
        out = torch.rand(shape, generator=g, device=device) < outlier_fraction
        z = torch.where(out, z * outlier_scale / std, z)
        lift = torch.zeros(shape, device=device).scatter(-1, target.to(device),
                                                          boost.to(device).expand(labels.shape).unsqueeze(-1))
        return z + lift * valid.to(device)

    return Custom(draw, f"LM logits N(0, {std}^2), target +{confidence}(1 - e^(-pos/{context:g})), "
                        f"{outlier_fraction:g} outliers x{outlier_scale:g}", shape)


def _ce_inputs(batch: int = 4, seq: int = 128, vocab: int = 512, micro_batches: int = 1, std: float = 2.0,
               confidence: float = 3.0, lengths=None, **_):
    labels = padded_labels(micro_batches, batch, seq, vocab, lengths)
    if micro_batches == 1:
        labels = labels[0]
    return {"logits": lm_logits(labels, vocab, std=std, confidence=confidence), "labels": Fixed(labels)}


_TRIGGERS = ("ignore_index padding: rows of unequal length",
             "unequal token counts across micro-batches (gradient accumulation)",
             "loss falling with position (per-micro-batch means depend on the token count)",
             "outlier logits x30 (beyond a softcap of 30, past exp overflow without max-subtraction)")

CROSS_ENTROPY = Operator(
    name="cross_entropy", family="loss", reference=cross_entropy, inputs=_ce_inputs, buckets=Axes(),
    triggers=_TRIGGERS, description="token-mean cross-entropy with ignore_index (float32 scalar)",
)
GRAD_ACCUM_LOSS = Operator(
    name="grad_accum_loss", family="loss", reference=grad_accum_loss,
    inputs=lambda **p: _ce_inputs(**{"micro_batches": 4, "batch": 2, **p}), buckets=Axes(),
    triggers=_TRIGGERS,
    description="token-mean loss of one optimizer step over micro-batches (num_items_in_batch)",
)

OPERATORS = (CROSS_ENTROPY, GRAD_ACCUM_LOSS)
