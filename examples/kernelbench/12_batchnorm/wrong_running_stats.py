"""Wrong: normalises with the running statistics (evaluation mode) while the module is training."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.bn.running_mean.view(1, -1, 1, 1)
        var = self.bn.running_var.view(1, -1, 1, 1)
        y = (x - mean) / torch.sqrt(var + self.bn.eps)
        return y * self.bn.weight.view(1, -1, 1, 1) + self.bn.bias.view(1, -1, 1, 1)
