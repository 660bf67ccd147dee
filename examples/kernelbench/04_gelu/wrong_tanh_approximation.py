"""Wrong: the tanh approximation of GELU where the problem asks for the exact (erf) one; it differs by
up to ~5e-4 near |x| = 2 and by less than 1e-4 on [0, 1)."""
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
