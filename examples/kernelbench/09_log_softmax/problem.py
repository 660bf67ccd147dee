import torch
import torch.nn as nn


class Model(nn.Module):
    """LogSoftmax of classifier logits."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim) * 10.0
    return [x]


def get_init_inputs():
    return [1]
