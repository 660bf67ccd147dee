"""Correct: min then max."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(x, torch.full_like(x, -1.0)), torch.full_like(x, 1.0))
