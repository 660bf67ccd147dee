import torch
import torch.nn as nn


class Model(nn.Module):
    """Smooth L1 (Huber-style) loss with beta = 0.5."""

    def __init__(self, beta: float = 0.5):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.smooth_l1_loss(predictions, targets, beta=self.beta)


batch_size = 128
input_shape = (4096,)


def get_inputs():
    return [torch.randn(batch_size, *input_shape), torch.randn(batch_size, *input_shape)]


def get_init_inputs():
    return [0.5]
