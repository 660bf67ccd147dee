"""Wrong: a guard eps inside the logarithm of the predictions, log(p + 1e-7): it shifts every term by
~1e-7 / p (probabilities here are ~2e-4), a relative change of ~1e-4 in the loss."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        terms = torch.xlogy(targets, targets) - targets * torch.log(predictions + 1e-7)
        return terms.sum() / predictions.shape[0]
