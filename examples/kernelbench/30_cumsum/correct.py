"""Correct: a blocked scan (blocks of 256): each block's prefix sums plus the carry of the blocks before."""
import torch
import torch.nn as nn

BLOCK = 256


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.movedim(self.dim, -1)
        parts, carry = [], None
        for s in range(0, x.shape[-1], BLOCK):
            block = torch.cumsum(x[..., s:s + BLOCK], dim=-1)
            if carry is not None:
                block = block + carry
            carry = block[..., -1:]
            parts.append(block)
        return torch.cat(parts, dim=-1).movedim(-1, self.dim)
