"""Training-step controls (family ``step``, L2): loss aggregation, gradient accumulation and
reduction across ranks, certified with :func:`kcert.certify_step` (docs/training-graph.md).

Each control builds a :class:`kcert.Step`: ref is the step on the whole batch in one process, prod
the step as a framework runs it (micro-batches, ranks on gloo), with one aggregation defect from a
public report, or the correct aggregation. The models are small and built from configs with random
weights (:mod:`kcert.controls.step_models`: transformers' Llama and Mixtral, a small prefix-mixing
language model with context parallelism and Megatron-style tensor and sequence parallelism). Every step's code is written
here from the report's mechanism, none is copied.

A negative must FAIL and its diagnosis name the configuration dependence; a positive must PASS at
every configuration of its sweep, in bf16 compute where the accumulation order changes roundings.
The figures in the docstrings were measured when the control was written (seed 0, 256 replicates);
docs/training-graph.md holds the current ones (``python benchmarks/training_graph.py``).
"""

from __future__ import annotations

import importlib.util

import torch

from ..step import Step, StepConfig, TokenBatch
from . import step_models as M
from .registry import negative, positive

FAMILY = "step"
HF = importlib.util.find_spec("transformers") is not None
# a negative's defect is far above rounding and stops its run at the first look; a positive gets the
# command's default, 1024 (its variance gate may look further, up to 4x): a PASS needs the tail-shape
# difference excluded (docs/method.md, Gate 3). Declared 256 before that rule; then two of the three
# positives' gradients stopped at 1024 with the separate-shapes bound at 6.5 and 2.4 (WARN); at 1024
# declared they PASS at 2048 (1.86 and 1.49), the third at 1024.
NEGATIVE_REPLICATES, POSITIVE_REPLICATES = 128, 1024
# variable lengths (4 to 16 tokens), right padding, prompts of up to 3 ignored labels
BATCH = TokenBatch(sequences=8, length=16, vocab=M.VOCAB, prompt=3)
FULL_ROWS = TokenBatch(sequences=12, length=8, vocab=M.VOCAB, min_length=8)  # equal tokens per row
ACCUMULATION = (StepConfig(accumulation=2), StepConfig(accumulation=4, window=3))
DATA_PARALLEL = (StepConfig(world=2), StepConfig(accumulation=2, world=2))


def _register(kind: str, source: str, hf: bool = False, **kwargs):
    """Register a control of the family (one that needs transformers only when it is installed)."""
    if hf and not HF:
        return lambda fn: fn
    if kind == "negative":
        return negative(family=FAMILY, source=source, replicates=NEGATIVE_REPLICATES, expect="FAIL", **kwargs)
    return positive(family=FAMILY, source=source, replicates=POSITIVE_REPLICATES, expect="PASS", **kwargs)


def _accumulate(ctx, part) -> torch.Tensor:
    """``part(micro_batch)``, a micro-batch's contribution to the loss, backward for each micro-batch
    (gradients accumulate in ``param.grad``); the sum of the contributions."""
    total = torch.zeros(())
    for mb in ctx.micro_batches:
        loss = part(mb)
        loss.backward()
        total = total + loss.detach()
    return total


def _micro_batch_means(model, ctx, divisor: int):
    """Each micro-batch's own token-mean loss (the model's loss without ``num_items_in_batch``),
    divided by ``divisor``."""
    return _accumulate(ctx, lambda mb: M.hf_loss(model, mb) / divisor)


def _reduce_grads(model, ctx, op: str = "sum", names=None) -> None:
    """All-reduce the gradients (of ``names``, default all) in one flat buffer, as frameworks bucket them."""
    grads = [p.grad for n, p in model.named_parameters() if p.grad is not None and (names is None or n in names)]
    if not grads:
        return
    flat = ctx.all_reduce(torch.cat([g.reshape(-1) for g in grads]), op)
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))


def _global_items(ctx) -> torch.Tensor:
    items = torch.tensor(float(sum(ctx.valid_tokens(mb) for mb in ctx.micro_batches)))
    return ctx.all_reduce(items)


# --- gradient accumulation (transformers' Llama) --------------------------------------------------------


def _hf_trainer_before_34191(model, ctx):
    return _micro_batch_means(model, ctx, ctx.accumulation_steps)


@_register("negative", "transformers PR #34191 (gradient accumulation fix, October 2024)", hf=True)
def hf_token_mean_per_micro_batch() -> Step:
    """Gradient accumulation averaging each micro-batch's token mean: the transformers Trainer before PR #34191.

    Source: huggingface/transformers PR #34191 and the "gradient accumulation" write-up of October
    2024 (huggingface/blog PR #2414): the Trainer divided each micro-batch's loss, a mean over that
    micro-batch's valid tokens, by ``gradient_accumulation_steps``, so the accumulated gradient is
    ``(1/k) sum_i (1/N_i) G_i`` where the full-batch step is ``(1/N) sum_i G_i`` (``G_i`` the
    summed-token gradient of micro-batch ``i``, ``N_i`` its valid tokens). The two agree only when
    every micro-batch holds the same number of tokens; with variable lengths and prompt masking a
    token of a short micro-batch weighs more.

    Faithful: a one-layer transformers Llama (random weights, bf16 autocast); prod's step is the
    pre-fix Trainer's: ``model(**micro_batch).loss / gradient_accumulation_steps``, ``backward`` per
    micro-batch; ref is the model's own loss on the whole batch. Batches of 8 rows of 4 to 16 tokens
    with up to 3 prompt tokens ignored. Measured: FAIL at k = 2 and at k = 4 with a window of 3; the
    diagnosis finds loss and every gradient equal to "the mean over the micro-batches of each
    micro-batch's own token mean" at the rounding of ref.
    """
    return Step(name="hf_token_mean_per_micro_batch", model=M.hf_llama, loss=M.hf_loss,
                prod=_hf_trainer_before_34191, batch=BATCH, configs=ACCUMULATION, dtype=torch.bfloat16)


def _hf_trainer_num_items(model, ctx):
    items = _global_items(ctx)  # the window's valid tokens, over every rank (transformers #34242)
    total = _accumulate(ctx, lambda mb: M.hf_loss(model, mb, num_items_in_batch=items))  # sums over num_items
    _reduce_grads(model, ctx, "sum")  # each rank holds its share of one global token sum
    return ctx.all_reduce(total)


@_register("positive", "transformers PR #34191 (num_items_in_batch), extended over ranks as transformers #34242 asks",
           hf=True)
def hf_token_weighted_accumulation() -> Step:
    """Token-weighted accumulation and data parallelism: every token weighs 1 / (the batch's tokens).

    Source: huggingface/transformers PR #34191 (``num_items_in_batch``: the loss of a micro-batch is
    its summed token loss over the valid tokens of the whole accumulation window), with the count
    all-reduced over the data-parallel ranks and the gradients summed, as transformers #34242 asks
    for ("Add DDP token averaging for equivalent non-parallel training").

    Why benign: ``sum_r sum_i G_ri / N`` is the full-batch gradient in real arithmetic; what changes
    is the order of the additions (per micro-batch bf16 products accumulated into float32 gradients,
    then summed across ranks), which rounds differently from one whole-batch product. Swept over
    accumulation 4 with a partial window of 3, 2 ranks, and 2 ranks x 2 micro-batches, in bf16
    autocast. Measured: PASS at every configuration.
    """
    return Step(name="hf_token_weighted_accumulation", model=M.hf_llama, loss=M.hf_loss, prod=_hf_trainer_num_items,
                batch=BATCH, configs=(StepConfig(accumulation=4, window=3),) + DATA_PARALLEL, dtype=torch.bfloat16)


def _swift_configured_window(model, ctx):
    return _micro_batch_means(model, ctx, ctx.accumulation_steps)


@_register("negative", "ms-swift PR #10084 (normalize partial gradient accumulation windows)", hf=True)
def swift_partial_window_divided_by_configured_steps() -> Step:
    """The last, partial accumulation window divided by the configured number of micro-batches.

    Source: modelscope/ms-swift PR #10084 ("fix(trainer): normalize partial gradient accumulation
    windows"): when the last window of an epoch holds ``m`` micro-batches, fewer than
    ``gradient_accumulation_steps = k``, the trainer still divided each micro-batch's mean loss by
    ``k``; "with a configured window of four and an actual window of two, this produces half the
    full-batch reference gradient". The fix divides by the current window's size.

    Faithful: a transformers Llama, bf16 autocast; rows of equal length without prompt masking, so
    every micro-batch holds the same number of tokens and a full window is correct: prod =
    ``(1/k) sum_{i<m} L_i = (m/k) x`` ref exactly. Swept over k = 4 with windows of 4 (full), 2 and 3.
    Measured: PASS at the full window; FAIL at windows 2 and 3, with loss and gradients ref's x 0.5 and
    x 0.75, matched to "micro-batches in the window / accumulation steps".
    """
    return Step(name="swift_partial_window_divided_by_configured_steps", model=M.hf_llama, loss=M.hf_loss,
                prod=_swift_configured_window, batch=FULL_ROWS, dtype=torch.bfloat16,
                configs=(StepConfig(accumulation=4), StepConfig(accumulation=4, window=2),
                         StepConfig(accumulation=4, window=3)))


def _global_tokens_ddp_average(model, ctx):
    items = _global_items(ctx)  # normalized by the global token count ...
    total = _accumulate(ctx, lambda mb: M.hf_loss(model, mb, num_items_in_batch=items))
    _reduce_grads(model, ctx, "avg")  # ... and then averaged over the ranks, as DDP/FSDP do
    return ctx.all_reduce(total)


@_register("negative", "verl-project/verl-SpeCo PR #29 (stop scaling gradients down by world size)", hf=True)
def dp_all_reduce_average_where_sum() -> Step:
    """Gradients averaged over the ranks where the loss was already normalized by the global token count.

    Source: verl-project/verl-SpeCo PR #29: the loss was all-reduced and divided by the global token
    count, then FSDP's gradient reduction averaged over the ranks on top of it, "so the synchronized
    gradient ends up divided by the participating world size: a W-rank run silently trains with an
    effective learning rate of lr / W" (the same mechanism as fairseq #494's undoing of DDP's mean).

    Faithful: a transformers Llama, bf16 autocast, ``num_items_in_batch`` = the global token count
    (all-reduced), gradients all-reduced with the mean (gloo: a sum divided by the world size); the
    logged loss is summed correctly. Swept over 2 ranks, with and without 2 micro-batches. Measured:
    FAIL; the gradient is ref's x 0.5 = 1 / world size in every replicate, the loss agrees.
    """
    return Step(name="dp_all_reduce_average_where_sum", model=M.hf_llama, loss=M.hf_loss,
                prod=_global_tokens_ddp_average, batch=BATCH, configs=DATA_PARALLEL, dtype=torch.bfloat16)


# --- data and context parallel loss (prefix-mixing model) -------------------------------------------------


def _token_sums_over(model, ctx, items) -> torch.Tensor:
    return _accumulate(ctx, lambda mb: M.token_loss_sum(M.logits_of(model, mb, ctx), mb["shift_labels"]) / items)


def _token_weighted(model, ctx):
    total = _token_sums_over(model, ctx, _global_items(ctx))
    _reduce_grads(model, ctx, "sum")
    return ctx.all_reduce(total)


def _rank_means(model, ctx):
    total = _token_sums_over(model, ctx, sum(ctx.valid_tokens(mb) for mb in ctx.micro_batches))  # own tokens
    _reduce_grads(model, ctx, "avg")
    return ctx.all_reduce(total, "avg")


SPLITS = (StepConfig(world=2), StepConfig(world=2, split="context"))


@_register("negative", "transformers #34242; PrimeIntellect-ai/prime-rl PR #1957 (DP and CP token weighting)")
def dp_mean_of_rank_means() -> Step:
    """Data and context parallel loss as the mean over ranks of each rank's own token mean.

    Source: huggingface/transformers #34242 ("token averaging in DDP seems to have the same issue" as
    gradient accumulation) and PrimeIntellect-ai/prime-rl PR #1957: each rank divided its summed
    token loss by its own count of valid tokens and the gradients were then averaged over ranks,
    "when ranks have different numbers of unmasked tokens, tokens on ranks with fewer unmasked tokens
    get disproportionately higher gradient weight", also across context-parallel ranks where "prompt
    tokens (masked) tend to land on early CP ranks".

    Faithful: a small language model whose positions see their causal prefix (a rank of a context
    split adds the earlier ranks' sums, an all-gather), bf16 autocast; prod normalizes by the rank's own tokens
    and all-reduces the mean. Data split (ranks hold different rows of variable length) and context
    split (rank 1 holds the later positions, where right padding lives). Measured: FAIL at both; the
    diagnosis finds "the mean over the 2 ranks of each rank's own mean" at the rounding of ref.
    """
    return Step(name="dp_mean_of_rank_means", model=M.prefix_lm, loss=M.token_mean_loss, prod=_rank_means,
                batch=BATCH, configs=SPLITS, dtype=torch.bfloat16)


@_register("positive", "transformers #34242 / prime-rl PR #1957 (the fix: a global token count, gradients summed)")
def data_context_parallel_token_weighted() -> Step:
    """Data and context parallel loss normalized by the global token count, gradients summed.

    Source: the fix of PrimeIntellect-ai/prime-rl PR #1957 and of transformers #34242: all-reduce the
    valid-token count over the ranks (and micro-batches), divide every summed token loss by it, and
    sum the gradients, so each token weighs 1 / N wherever it lands.

    Why benign: the full-batch gradient in real arithmetic; the ranks' partial products and their
    sum round differently from one whole-batch product (bf16 autocast). Swept over 2 ranks split by
    rows, 2 ranks split by positions with and without 2 micro-batches, and 2 micro-batches on one
    rank. Measured: PASS at every configuration.
    """
    return Step(name="data_context_parallel_token_weighted", model=M.prefix_lm, loss=M.token_mean_loss,
                prod=_token_weighted, batch=BATCH, dtype=torch.bfloat16,
                configs=SPLITS + (StepConfig(accumulation=2, world=2, split="context"), StepConfig(accumulation=2)))


# --- tensor and sequence parallelism (Megatron-style) ----------------------------------------------------


def _megatron_step(model, ctx, *, bias_on_every_rank=False, reduce_norms=True, global_norm=True):
    items = sum(ctx.valid_tokens(mb) for mb in ctx.micro_batches)  # every rank holds the whole batch

    def part(mb):
        logits, (a, b) = M.tensor_parallel_logits(model, mb["input_ids"], ctx.rank, ctx.world, bias_on_every_rank)
        return M.token_loss_sum(logits, mb["shift_labels"][:, a:b]) / items

    total = _accumulate(ctx, part)
    skipped = () if reduce_norms else M.SEQUENCE_PARALLEL
    _reduce_grads(model, ctx, "sum", [n for n in M.PARTIAL_ON_RANK if n not in skipped])
    if global_norm:  # the sharded gradients' squares summed over the ranks, the replicated ones counted once
        square = ctx.all_reduce(M.local_grad_square(model, ctx.rank, ctx.world, replicated=False))
        square = square + sum(p.grad.pow(2).sum() for n, p in model.named_parameters() if n not in M.TENSOR_SHARDS)
    else:  # clip_grad_norm_ over this rank's own parameters: its shards and the replicated ones
        square = M.local_grad_square(model, ctx.rank, ctx.world, replicated=True)
    return {"loss": ctx.all_reduce(total), "grad_norm": square.sqrt()}


TENSOR = (StepConfig(world=2, split="tensor"), StepConfig(accumulation=2, world=2, split="tensor"))


def _tensor_step(name: str, prod, configs=TENSOR, grad_norm: bool = True) -> Step:
    return Step(name=name, model=M.prefix_lm, loss=M.token_mean_loss, prod=prod, batch=BATCH, dtype=torch.bfloat16,
                configs=configs, shards=M.TENSOR_SHARDS, grad_norm=grad_norm)


def _megatron(model, ctx):
    return _megatron_step(model, ctx)


@_register("positive", "Megatron-LM sequence parallelism (arXiv 2205.05198 4.2.2; all-reduce of the sequence-parallel "
           "gradients, NVIDIA/TransformerEngine #435)")
def megatron_sequence_parallel() -> Step:
    """Megatron-style tensor and sequence parallelism with the sequence-parallel gradients all-reduced.

    Source: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
    (arXiv 2205.05198, section 4.2.2): the norm runs on each rank's share of the sequence, an
    all-gather feeds the column-parallel linear layer, the row-parallel one ends in a reduce-scatter;
    parameters of the sequence-parallel region (norm weights, the row-parallel bias) see one share
    of the positions on each rank, and Megatron-LM all-reduces their gradients across the
    tensor-parallel group after the backward pass (NVIDIA/TransformerEngine #435 confirms the
    all-reduce is the framework's job). The global gradient norm sums the squares of every rank's
    shards and counts the replicated gradients once (torch FSDP's ``clip_grad_norm_``, pytorch #72548).

    Why benign: the same real function as the unsplit model; the gathered and scattered sums and the
    all-reduced gradients round differently (bf16 autocast). Swept over 2 ranks with and without 2
    micro-batches; certifies loss, gradients and grad norm. Measured: PASS at every configuration.
    """
    return _tensor_step("megatron_sequence_parallel", _megatron)


def _bias_on_every_rank(model, ctx):
    return _megatron_step(model, ctx, bias_on_every_rank=True)


@_register("negative", "huggingface/text-generation-inference #1036; PaddlePaddle PR #35186 (row-parallel bias added "
           "before the all-reduce)")
def tp_row_parallel_bias_on_every_rank() -> Step:
    """A row-parallel linear layer whose bias is added on every rank before the reduction.

    Source: huggingface/text-generation-inference #1036 ("bias of TensorParallelRowLinear is
    multi-added by tp-degree"), PaddlePaddle PR #35186 ("bias should be added after allreduce"), the
    same bug in nano-vllm #99: each rank's partial product ``x_r W_r^T`` gets the bias before the sum
    over ranks, so the layer outputs ``x W^T + n b``.

    Faithful: the Megatron-style model of the positive control, with ``fc2``'s bias added to every
    rank's partial sum before the reduce-scatter. Swept over 1 rank (where the layer is not split and
    the step is correct), 2 and 4 ranks. Measured: PASS at 1 rank, FAIL at 2 and 4, the deviation
    growing with the world size.
    """
    return _tensor_step("tp_row_parallel_bias_on_every_rank", _bias_on_every_rank, grad_norm=False,
                        configs=(StepConfig(world=1, split="tensor"), StepConfig(world=2, split="tensor"),
                                 StepConfig(world=4, split="tensor")))


def _norms_not_reduced(model, ctx):
    return _megatron_step(model, ctx, reduce_norms=False)


@_register("negative", "NVIDIA/TransformerEngine #435; NVIDIA/Megatron-LM #1446 (sequence-parallel norm gradients not "
           "all-reduced)")
def sp_norm_grad_not_all_reduced() -> Step:
    """Sequence-parallel norm-weight gradients left without their all-reduce across the ranks.

    Source: NVIDIA/TransformerEngine #435 ("Need all-reduce for norm weight gradients with sequence
    parallel": the module leaves it to the framework) and NVIDIA/Megatron-LM #1446 (a final
    layernorm's gradient "different on different TP ranks before optimizer.step()" with TP and SP):
    under sequence parallelism each rank's norm sees only its share of the positions, so its weight
    gradient is that share's contribution until it is all-reduced.

    Faithful: the Megatron-style model of the positive control; every other replicated gradient is
    all-reduced, the two norm weights' are not. Measured: FAIL at 2 ranks, with and without 2
    micro-batches; the norm weights' gradients are "rank 0's share alone" (rank 0's position share),
    the ranks hold different gradients, every other gradient agrees.
    """
    return _tensor_step("sp_norm_grad_not_all_reduced", _norms_not_reduced, grad_norm=False)


def _local_grad_norm(model, ctx):
    return _megatron_step(model, ctx, global_norm=False)


@_register("negative", "pytorch/torchtitan #766; areal-project/AReaL #312 (grad norm of the local shard)")
def tp_grad_norm_from_rank_shard() -> Step:
    """A global gradient norm (for clipping) computed from one rank's shard of the gradients.

    Source: pytorch/torchtitan #766 ("fsdp grad norm need to be aggregated manually": the norm varied
    across ranks) and areal-project/AReaL #312 ("the gradient norm is computed locally w.r.t. the
    sharded parameters, rather than globally"): ``clip_grad_norm_`` over a rank's own parameters sees
    its shards only, so clipping depends on the parallel degree.

    Faithful: the Megatron-style model of the positive control, gradients correctly reduced; the
    returned grad norm sums the squares of this rank's chunks of the sharded parameters and of the
    replicated gradients, without the all-reduce. Measured: FAIL on the grad norm at 2 ranks, with and
    without 2 micro-batches, matched to "the norm of rank 0's own shards alone"; loss and gradients agree.
    """
    return _tensor_step("tp_grad_norm_from_rank_shard", _local_grad_norm)


# --- MoE auxiliary loss (transformers' Mixtral) ------------------------------------------------------------

AUX = 0.1  # the config's router_aux_loss_coef


def _moe_loss(model, batch):
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_router_logits=True)
    return M.token_loss_sum(out.logits, batch["shift_labels"]) / M.labelled(batch) + AUX * out.aux_loss


def _moe_aux_per_micro_batch(model, ctx):
    items = _global_items(ctx)

    def part(mb):
        out = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], output_router_logits=True)
        return M.token_loss_sum(out.logits, mb["shift_labels"]) / items + AUX * out.aux_loss / ctx.accumulation_steps

    return _accumulate(ctx, part)


@_register("negative", "arXiv 2501.11873 (micro-batch vs global-batch load balancing); pytorch/torchtitan PR #4772",
           hf=True)
def moe_aux_loss_per_micro_batch() -> Step:
    """An MoE load-balancing loss computed per micro-batch and averaged, where the step's is global.

    Source: Qiu et al., "Demons in the Detail: On Implementing Load Balancing Loss for Training
    Specialized Mixture-of-Expert Models" (arXiv 2501.11873): frameworks compute the balancing loss
    ``E sum_e f_e P_e`` over each micro-batch's tokens, so the expert frequencies ``f_e`` are the
    micro-batch's, not the global batch's; pytorch/torchtitan PR #4772 adds the global-batch loss
    with micro-batching. The average of per-micro-batch products is not the product of averages.

    Faithful: a one-layer transformers Mixtral (4 experts, top 2, ``router_aux_loss_coef`` 0.1, its
    own ``aux_loss``), float32 compute so that routing ties do not flip between schedules; the
    cross-entropy is token-weighted correctly, only the auxiliary loss is per micro-batch. Swept over
    k = 1, 2, 4. Measured: PASS at k = 1; FAIL at k = 2 and 4 on the loss and the router's gradient;
    the step is not a token mean (no aggregation hypothesis applies) and the deviation grows with k.
    """
    return Step(name="moe_aux_loss_per_micro_batch", model=M.hf_mixtral, loss=_moe_loss, prod=_moe_aux_per_micro_batch,
                batch=BATCH, dtype=torch.float32,
                configs=(StepConfig(), StepConfig(accumulation=2), StepConfig(accumulation=4)))
