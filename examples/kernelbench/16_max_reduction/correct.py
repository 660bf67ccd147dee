"""Correct: the row padded to a multiple of 64 with -inf, blocks reduced, then the block maxima."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK = 64


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.movedim(self.dim, -1)
        n = x.shape[-1]
        padded = F.pad(x, (0, (-n) % BLOCK), value=float("-inf"))
        return padded.reshape(*x.shape[:-1], -1, BLOCK).amax(-1).amax(-1)
