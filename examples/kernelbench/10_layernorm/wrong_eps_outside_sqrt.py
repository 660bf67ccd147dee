"""Wrong: eps added to the standard deviation instead of the variance, (x - mean) / (std + eps): a
relative change of ~1e-5 at unit variance, far inside a 1e-4 tolerance."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.ln = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        std = ((x - mean) ** 2).mean(dim=-1, keepdim=True).sqrt()
        return (x - mean) / (std + self.ln.eps) * self.ln.weight + self.ln.bias
