"""Correct: the products summed two lanes at a time, the odd element added at the end."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        k = A.shape[1]
        even = k - k % 2
        prod = A[:, :even] * B[:even, 0]
        out = prod.reshape(A.shape[0], -1, 2).sum(-1).sum(-1, keepdim=True)
        if k % 2:
            out = out + A[:, even:] * B[even:, 0]
        return out
