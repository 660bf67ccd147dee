"""Correct: the two branches, the quadratic one divided by beta."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, beta: float = 0.5):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        d = (predictions - targets).abs()
        return torch.where(d < self.beta, 0.5 * d * d / self.beta, d - 0.5 * self.beta).mean()
