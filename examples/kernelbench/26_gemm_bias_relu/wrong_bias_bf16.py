"""Wrong: the bias added in bfloat16 (an epilogue that loads the bias in the activation dtype): every
output channel is shifted by its bias' rounding error, up to 2^-9 of the bias."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.linear.weight.t()
        return (y + self.linear.bias.bfloat16().float()).clamp_min(0.0)
