"""Wrong: the LayerNorm's bias (beta) is dropped from the fused epilogue. It is initialised to zero, so
every check on the module as built passes; any trained bias is lost."""
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        mean = h.mean(dim=-1, keepdim=True)
        var = (h - mean).pow(2).mean(dim=-1, keepdim=True)
        return (h - mean) * torch.rsqrt(var + self.norm.eps) * self.norm.weight
