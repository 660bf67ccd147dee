"""Correct: the chain computed as written (fused GEMM and row max)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, max_dim: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.max_dim = max_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.addmm(self.gemm.bias, x, self.gemm.weight.t()).amax(dim=self.max_dim, keepdim=True)
        return F.gelu(h - h.mean(dim=1, keepdim=True))
