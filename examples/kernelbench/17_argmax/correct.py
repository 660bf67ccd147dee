"""Correct: the first index where the maximum is reached."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.amax(dim=self.dim, keepdim=True)
        n = x.shape[self.dim]
        shape = [1] * x.dim()
        shape[self.dim] = n
        idx = torch.arange(n, device=x.device).view(shape).expand_as(x)
        return torch.where(x == m, idx, n).amin(dim=self.dim)
