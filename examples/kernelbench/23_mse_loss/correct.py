"""Correct: per-row sums of squares, then their mean over rows divided by the row length."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        d = predictions - targets
        return (d * d).sum(dim=-1).mean() / d.shape[-1]
