"""Correct: x - max - log(sum(exp(x - max)))."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x - x.amax(dim=self.dim, keepdim=True)
        return z - torch.log(torch.exp(z).sum(dim=self.dim, keepdim=True))
