"""Wrong: the quadratic branch without its division by beta (the beta = 1 formula)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, beta: float = 0.5):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        d = (predictions - targets).abs()
        return torch.where(d < self.beta, 0.5 * d * d, d - 0.5 * self.beta).mean()
