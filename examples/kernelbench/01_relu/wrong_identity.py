"""Wrong (a fake): returns its input. The problem draws x from torch.rand, in [0, 1), where ReLU is the
identity, so every check on the problem's own inputs passes it."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()
