"""Wrong: the chain with the tanh approximation of GELU where the problem's GELU is the exact one."""
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
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
        mean = h.mean(dim=-1, keepdim=True)
        var = (h - mean).pow(2).mean(dim=-1, keepdim=True)
        return (h - mean) * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
