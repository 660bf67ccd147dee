"""Correct: sum of targets * (log targets - log predictions), divided by the batch size."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        terms = torch.xlogy(targets, targets) - targets * torch.log(predictions)
        return terms.sum() / predictions.shape[0]
