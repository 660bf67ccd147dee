"""Correct: broadcast multiply-and-sum in chunks of 32 along k (another summation order)."""
import torch
import torch.nn as nn

CHUNK = 32


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        out = None
        for s in range(0, A.shape[2], CHUNK):
            part = torch.matmul(A[:, :, s:s + CHUNK], B[:, s:s + CHUNK, :])
            out = part if out is None else out + part
        return out
