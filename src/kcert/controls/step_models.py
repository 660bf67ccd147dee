"""Models, losses and parallel layers of the training-step controls (family ``step``).

Written here from the mechanisms the public sources describe (none is copied):

- :class:`PrefixLM`: a small language model (embedding, a causal prefix-mean mixing layer, a pre-norm
  MLP block with a residual, final norm, head). The prefix mean makes every position depend on the
  tokens before it, as attention does (a position-wise model would compute the same numbers for
  every occurrence of a token, so its rounding differences would repeat exactly from replicate to
  replicate and read as coherent biases); under a context split a rank adds the sums of the earlier
  ranks' positions (an all-gather), which is its only communication in the forward pass.
- Megatron-style tensor and sequence parallelism of its MLP block (:func:`tensor_parallel_logits`):
  the norm runs on each rank's contiguous share of the positions, an all-gather feeds a
  column-parallel first linear layer (rows of ``fc1`` split among the ranks), a row-parallel second
  one (columns of ``fc2``) produces partial sums that a reduce-scatter adds and returns to the
  positions' owners, where ``fc2``'s bias is added once (Megatron's ``RowParallelLinear`` with
  sequence parallelism). Parameters used on one share of the positions only (the norms, ``fc2``'s
  bias, embedding, head) get partial gradients on each rank, which the step all-reduces (Megatron's
  all-reduce of the sequence-parallel gradients; Korthikanti et al. 2022, arXiv 2205.05198, 4.2.2).
- Tiny Hugging Face models (:func:`hf_llama`, :func:`hf_mixtral`) built from configs, random weights.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

VOCAB, HIDDEN, FFN = 64, 16, 32
EPS = 1e-6


# --- losses -----------------------------------------------------------------------------------------


def token_loss_sum(logits: torch.Tensor, shift_labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """The summed cross-entropy over the labelled positions (float32, as Hugging Face upcasts)."""
    return F.cross_entropy(logits.float().flatten(0, -2), shift_labels.flatten(), ignore_index=ignore_index,
                           reduction="sum")


def labelled(batch: dict, ignore_index: int = -100) -> torch.Tensor:
    return (batch["shift_labels"] != ignore_index).sum()


# --- a model whose positions never mix ---------------------------------------------------------------


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return rms_norm(x, self.weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * weight


class PrefixLM(torch.nn.Module):
    """embedding -> x + mix(prefix mean of x) -> x + fc2(silu(fc1(norm1(x)))) -> norm2 -> head."""

    def __init__(self, vocab: int = VOCAB, hidden: int = HIDDEN, ffn: int = FFN):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.mix = torch.nn.Linear(hidden, hidden, bias=False)
        self.norm1 = RMSNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, ffn)
        self.fc2 = torch.nn.Linear(ffn, hidden)
        self.norm2 = RMSNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def mixed(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
              context: tuple[int, int] | None = None) -> torch.Tensor:
        """The embedded tokens plus the mixing of their causal prefix mean. ``context``: (rank, world)
        when the positions are this rank's contiguous share of the sequence (context parallel)."""
        x = self.embed(input_ids)
        sums = x.cumsum(1)
        if context is not None and context[1] > 1:
            rank, world = context
            totals = GatherPositions.apply(x.sum(1, keepdim=True), rank, world)  # every rank's total
            sums = sums + totals[:, :rank].sum(1, keepdim=True)
        if position_ids is None:
            position_ids = torch.arange(x.shape[1], device=x.device).expand(x.shape[:2])
        return x + self.mix(sums / (position_ids + 1).unsqueeze(-1))

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                context: tuple[int, int] | None = None) -> torch.Tensor:
        x = self.mixed(input_ids, position_ids, context)
        x = x + self.fc2(F.silu(self.fc1(self.norm1(x))))
        return self.head(self.norm2(x))


def prefix_lm() -> PrefixLM:
    return PrefixLM()


def token_mean_loss(model, batch) -> torch.Tensor:
    """ref's loss: the token mean over the whole batch."""
    return token_loss_sum(model(batch["input_ids"]), batch["shift_labels"]) / labelled(batch)


def logits_of(model: PrefixLM, micro_batch: dict, ctx) -> torch.Tensor:
    """The model on a rank's micro-batch: the whole rows (data split) or its share of the positions."""
    if ctx.split == "context":
        return model(micro_batch["input_ids"], micro_batch["position_ids"], (ctx.rank, ctx.world))
    return model(micro_batch["input_ids"])


# --- Megatron-style collectives (differentiable, gloo) --------------------------------------------------


def _chunks(length: int, world: int) -> list[tuple[int, int]]:
    bounds = torch.tensor_split(torch.arange(length), world)
    return [(int(b[0]), int(b[-1]) + 1) for b in bounds]


class GatherPositions(torch.autograd.Function):
    """Forward: all-gather the ranks' position shares (dim 1). Backward: sum the gradient over the
    ranks and keep this rank's share (a reduce-scatter)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, rank: int, world: int):
        ctx.rank, ctx.world = rank, world
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        total = grad.contiguous().clone()
        dist.all_reduce(total)
        a, b = _chunks(total.shape[1], ctx.world)[ctx.rank]
        return total[:, a:b], None, None


class ScatterSum(torch.autograd.Function):
    """Forward: sum the ranks' partial results and keep this rank's position share (a reduce-scatter).
    Backward: all-gather the shares' gradients."""

    @staticmethod
    def forward(ctx, partial: torch.Tensor, rank: int, world: int):
        ctx.rank, ctx.world = rank, world
        total = partial.contiguous().clone()
        dist.all_reduce(total)
        a, b = _chunks(total.shape[1], world)[rank]
        return total[:, a:b].contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        parts = [torch.empty_like(grad) for _ in range(ctx.world)]
        dist.all_gather(parts, grad.contiguous())
        return torch.cat(parts, dim=1), None, None


def tensor_parallel_logits(model: PrefixLM, input_ids: torch.Tensor, rank: int, world: int,
                           bias_on_every_rank: bool = False) -> tuple[torch.Tensor, tuple[int, int]]:
    """This rank's logits for its share of the positions, and that share (module docstring): the
    mixing layer runs on the whole sequence on every rank, the MLP block is tensor and sequence
    parallel. ``bias_on_every_rank``: add ``fc2``'s bias to every rank's partial sum before the reduction."""
    a, b = _chunks(input_ids.shape[1], world)[rank]
    x = model.mixed(input_ids)[:, a:b]
    h = GatherPositions.apply(model.norm1(x), rank, world)
    w1 = model.fc1.weight.tensor_split(world, 0)[rank]
    b1 = model.fc1.bias.tensor_split(world, 0)[rank]
    w2 = model.fc2.weight.tensor_split(world, 1)[rank]
    partial = F.linear(F.silu(F.linear(h, w1, b1)), w2)
    if bias_on_every_rank:
        partial = partial + model.fc2.bias
    z = ScatterSum.apply(partial, rank, world)
    if not bias_on_every_rank:
        z = z + model.fc2.bias
    return model.head(model.norm2(x + z)), (a, b)


TENSOR_SHARDS = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1}
SEQUENCE_PARALLEL = ("norm1.weight", "norm2.weight")  # the norms of the sequence-parallel region
# replicated parameters used on one share of the positions: their gradients are partial on each rank
PARTIAL_ON_RANK = ("embed.weight", "mix.weight", "norm1.weight", "fc2.bias", "norm2.weight", "head.weight")


def local_grad_square(model: PrefixLM, rank: int, world: int, replicated: bool = True) -> torch.Tensor:
    """Sum of squares of the gradients this rank owns: its chunk of every sharded parameter and, with
    ``replicated``, every replicated parameter's whole gradient."""
    total = torch.zeros((), dtype=model.head.weight.grad.dtype)
    for name, p in model.named_parameters():
        if name in TENSOR_SHARDS:
            total = total + p.grad.tensor_split(world, TENSOR_SHARDS[name])[rank].pow(2).sum()
        elif replicated:
            total = total + p.grad.pow(2).sum()
    return total


# --- Hugging Face models from configs ------------------------------------------------------------------


def hf_llama():
    """A one-layer Llama (transformers' LlamaForCausalLM) with random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config)


def hf_mixtral():
    """A one-layer Mixtral (transformers' MixtralForCausalLM): 4 experts, top 2, random weights; the
    experts run as transformers' eager loop (its default ``grouped_mm`` kernel refuses float64, so
    real mode, the oracle, could not run it)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                           num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.1,
                           tie_word_embeddings=False, experts_implementation="eager")  # grouped_mm has no float64
    return MixtralForCausalLM(config)


def hf_loss(model, batch, **kwargs) -> torch.Tensor:
    """The model's own loss (Hugging Face's ForCausalLMLoss: a token mean, or a sum over
    ``num_items_in_batch`` when given)."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"],
                 **kwargs).loss
