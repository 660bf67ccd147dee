"""Wrong: statistics per channel (an InstanceNorm) instead of per group of channels."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        g = x.reshape(n, c, -1)
        mean = g.mean(dim=-1, keepdim=True)
        var = (g - mean).pow(2).mean(dim=-1, keepdim=True)
        y = ((g - mean) / torch.sqrt(var + self.gn.eps)).reshape(x.shape)
        shape = (1, c) + (1,) * (x.dim() - 2)
        return y * self.gn.weight.view(shape) + self.gn.bias.view(shape)
