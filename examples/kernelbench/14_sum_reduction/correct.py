"""Correct: a chunked sum (chunks of 64 along the axis) with its remainder."""
import torch
import torch.nn as nn

CHUNK = 64


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[self.dim]
        total = None
        for start in range(0, n, CHUNK):
            part = x.narrow(self.dim, start, min(CHUNK, n - start)).sum(dim=self.dim, keepdim=True)
            total = part if total is None else total + part
        return total
