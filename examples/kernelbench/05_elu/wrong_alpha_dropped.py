"""Wrong: the negative branch without alpha (ELU with alpha = 1). Inputs in [0, 1) never reach it."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 0.5):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, torch.expm1(torch.clamp_max(x, 0.0)))
