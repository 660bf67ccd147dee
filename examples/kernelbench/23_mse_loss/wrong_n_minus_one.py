"""Wrong: divides the sum of squares by n - 1 (an unbiased-variance habit): a relative change of 1/n,
a few 1e-5 here, inside a 1e-4 tolerance."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        d = predictions - targets
        return (d * d).sum() / (d.numel() - 1)
