"""The settings of a training comparison: model size, optimiser, horizon, evaluation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ParameterError
from .language import Language


@dataclass(frozen=True)
class TrainingConfig:
    """A small pre-norm decoder trained with AdamW on the synthetic language.

    Parameters are float32 master weights; every forward casts them to the case's dtype and runs
    in it (the mixed precision of bf16 training), the loss in float32. float16 cases use a static
    loss scale. ``threads`` fixes torch's intra-op threads while training, so the same seed gives
    the same runs on any machine with the same torch build."""

    steps: int = 300
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    ffn: int = 256
    seq: int = 64
    batch: int = 16
    lr: float = 3e-3
    warmup: int = 20
    min_lr_fraction: float = 0.1  # cosine decay to this fraction of lr at the last step
    weight_decay: float = 0.1  # on matrices only; none on norms, biases, embeddings
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_sequences: int = 64
    fp16_loss_scale: float = 1024.0
    threads: int = 1
    language: Language = field(default_factory=Language)

    def __post_init__(self):
        for name in ("steps", "hidden", "layers", "heads", "ffn", "seq", "batch", "eval_every", "eval_sequences",
                     "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParameterError(f"TrainingConfig.{name} must be an integer >= 1, got {value!r}")
        if self.hidden % self.heads:
            raise ParameterError(f"TrainingConfig.hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        for name in ("lr", "fp16_loss_scale", "grad_clip"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ParameterError(f"TrainingConfig.{name} must be a number > 0, got {value!r}")
        if not 0 <= self.weight_decay < 1:
            raise ParameterError(f"TrainingConfig.weight_decay must lie in [0, 1), got {self.weight_decay!r}")
        if not 0 < self.min_lr_fraction <= 1:
            raise ParameterError(f"TrainingConfig.min_lr_fraction must lie in (0, 1], got {self.min_lr_fraction!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ParameterError(f"TrainingConfig.warmup must be an integer >= 0, got {self.warmup!r}")

    def replace(self, **changes) -> TrainingConfig:
        return dataclasses.replace(self, **changes)

    def describe(self) -> dict:
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        return out


QUICK = TrainingConfig(steps=120, hidden=64, heads=2, ffn=128, seq=32, batch=8, eval_every=40, eval_sequences=32)
"""The ``--quick`` model: a quarter of the work per step and 120 steps (CI's smoke run)."""
