"""Correct: logsumexp with the row max subtracted, minus the target's logit, averaged."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        m = predictions.amax(dim=1, keepdim=True)
        lse = m.squeeze(1) + torch.log(torch.exp(predictions - m).sum(dim=1))
        picked = predictions.gather(1, targets.unsqueeze(1)).squeeze(1)
        return (lse - picked).mean()
