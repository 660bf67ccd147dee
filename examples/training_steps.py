"""Training steps to certify with ``kcert step examples/training_steps.py`` (docs/training-graph.md).

A small language model (embedding, one MLP block, head) and two data-parallel steps with gradient
accumulation: ``token_weighted`` divides every micro-batch's summed token loss by the valid tokens of
the whole batch (all-reduced over the ranks) and sums the gradients; ``mean_of_means`` averages each
micro-batch's token mean and the ranks' gradients, the aggregation of the Hugging Face Trainer before
transformers PR #34191 and of DDP with rank-local means.
"""

import torch

import kcert

VOCAB, HIDDEN = 64, 16


def model():
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, HIDDEN), torch.nn.Linear(HIDDEN, 32), torch.nn.SiLU(),
                               torch.nn.Linear(32, VOCAB))


def token_loss_sum(model, batch):
    logits = model(batch["input_ids"]).float().flatten(0, 1)
    return torch.nn.functional.cross_entropy(logits, batch["shift_labels"].flatten(), reduction="sum")


def loss(model, batch):
    """ref: the token mean over the whole batch."""
    return token_loss_sum(model, batch) / (batch["shift_labels"] != -100).sum()


def token_weighted(model, ctx):
    tokens = ctx.all_reduce(torch.tensor(float(sum(ctx.valid_tokens(mb) for mb in ctx.micro_batches))))
    total = torch.zeros(())
    for mb in ctx.micro_batches:
        part = token_loss_sum(model, mb) / tokens
        part.backward()
        total = total + part.detach()
    for p in model.parameters():
        ctx.all_reduce(p.grad)
    return ctx.all_reduce(total)


def mean_of_means(model, ctx):
    total = torch.zeros(())
    for mb in ctx.micro_batches:
        part = loss(model, mb) / ctx.accumulation_steps
        part.backward()
        total = total + part.detach()
    for p in model.parameters():
        ctx.all_reduce(p.grad, "avg")
    return ctx.all_reduce(total, "avg")


BATCH = kcert.TokenBatch(sequences=8, length=16, vocab=VOCAB, prompt=3)
CONFIGS = [kcert.StepConfig(accumulation=2), kcert.StepConfig(world=2)]

steps = [
    kcert.Step(name="token_weighted", model=model, loss=loss, prod=token_weighted, batch=BATCH, configs=CONFIGS),
    kcert.Step(name="mean_of_means", model=model, loss=loss, prod=mean_of_means, batch=BATCH, configs=CONFIGS),
]
