"""One arm of one seed: build the model with the arm's kernels, train it, record what is compared."""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..execution import seeding
from . import language as lang
from .config import TrainingConfig
from .model import PARAMS_STREAM, Decoder, norm_sites
from ..results.training import ArmRun
from .slots import Slot, initial_norm_weights, initial_router, kernels

POSITIONS_STREAM = 14


def model_shape(slot: Slot, config: TrainingConfig) -> tuple[int, int]:
    """(hidden, heads) of the model for this slot: a RoPE case fixes the head dimension."""
    if slot.kind == "rope":
        hidden = max(config.hidden, slot.head_dim)
        heads = max(1, hidden // slot.head_dim)
        return heads * slot.head_dim, heads
    return config.hidden, config.heads


EVAL_POSITIONS_STREAM = 15


def positions(slot: Slot, config: TrainingConfig, seed: int, index: int, batch: int,
              stream: int = POSITIONS_STREAM) -> torch.Tensor:
    """Position ids (batch, seq): 0..seq-1, or for a RoPE case a window starting at an offset drawn
    per sequence from the case's position range (the same in both arms)."""
    base = torch.arange(config.seq, dtype=torch.int64).expand(batch, -1)
    if slot.kind != "rope" or slot.positions is None:
        return base
    low, high = slot.positions
    top = high - config.seq
    if top <= low:
        return base + max(low, 0)
    rng = lang.generator(seed, stream, index)
    start = torch.from_numpy(rng.integers(low, top + 1, batch)).to(torch.int64)
    return base + start[:, None]


def _lr_factor(config: TrainingConfig, step: int) -> float:
    if step < config.warmup:
        return (step + 1) / config.warmup
    span = max(config.steps - config.warmup, 1)
    progress = min((step - config.warmup) / span, 1.0)
    return config.min_lr_fraction + (1 - config.min_lr_fraction) * 0.5 * (1 + math.cos(math.pi * progress))


def build(slot: Slot, arm: str, config: TrainingConfig, seed: int) -> Decoder:
    hidden, heads = model_shape(slot, config)
    generator = seeding.generator(seed, PARAMS_STREAM, 0)
    norm_init = initial_norm_weights(slot, norm_sites(config.layers), hidden)
    return Decoder(config, kernels(slot, arm, hidden // heads), slot.case.dtype, heads, hidden, norm_init, generator,
                   experts=slot.experts or 0, router_init=initial_router(slot, hidden))


def _loss(model: Decoder, tokens: np.ndarray, pos: torch.Tensor) -> torch.Tensor:
    t = torch.from_numpy(tokens)
    logits = model(t[:, :-1], pos)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1))


def evaluate(model: Decoder, slot: Slot, config: TrainingConfig) -> float:
    tokens = lang.evaluation_set(config.language, config.eval_sequences, config.seq + 1)
    pos = positions(slot, config, config.language.seed, 0, tokens.shape[0], EVAL_POSITIONS_STREAM)
    with torch.no_grad():
        return float(_loss(model, tokens, pos))


def train_arm(slot: Slot, arm: str, config: TrainingConfig, seed: int, on_step=None
              ) -> tuple[ArmRun, dict[str, torch.Tensor]]:
    """Train one arm; returns its record and its final parameters (float32, for the distance
    between arms). ``on_step()`` is called after every step."""
    started = time.perf_counter()
    model = build(slot, arm, config, seed)
    decayed = set(model.decayed())
    groups = [
        {"params": [t for n, t in model.p.items() if n in decayed], "weight_decay": config.weight_decay},
        {"params": [t for n, t in model.p.items() if n not in decayed], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=1e-8)
    scale = config.fp16_loss_scale if slot.case.dtype == torch.float16 else 1.0
    train_loss = np.full(config.steps, np.nan)
    eval_steps, eval_loss, trajectory = [], [], []
    nonfinite = None
    params = list(model.parameters())
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = config.lr * _lr_factor(config, step)
        tokens = lang.training_batch(config.language, seed, step, config.batch, config.seq + 1)
        loss = _loss(model, tokens, positions(slot, config, seed, step, config.batch))
        value = float(loss.detach())
        if not math.isfinite(value):
            nonfinite = step
            break
        train_loss[step] = value
        optimizer.zero_grad(set_to_none=True)
        (loss * scale).backward()
        if scale != 1.0:
            for t in params:
                if t.grad is not None:
                    t.grad.div_(scale)
        norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        if not math.isfinite(float(norm)):
            nonfinite = step
            break
        optimizer.step()
        if (step + 1) % config.eval_every == 0 or step + 1 == config.steps:
            eval_steps.append(step + 1)
            eval_loss.append(evaluate(model, slot, config))
            trajectory.append(model.norm_parameters())
        if on_step is not None:
            on_step()
    if nonfinite is not None:
        eval_steps.append(nonfinite)
        eval_loss.append(math.nan)
    history = {name: np.stack([t[name] for t in trajectory]) if trajectory else np.zeros((0, values.size))
               for name, values in model.norm_parameters().items()}
    run = ArmRun(arm=arm, train_loss=train_loss, eval_steps=np.asarray(eval_steps, np.int64),
                 eval_loss=np.asarray(eval_loss, np.float64),
                 norm_params={**model.norm_parameters(), **model.downstream_scales()}, nonfinite_step=nonfinite,
                 seconds=time.perf_counter() - started, norm_trajectory=history)
    return run, {n: t.detach().clone() for n, t in model.p.items()}
