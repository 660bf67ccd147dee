"""Wrong: the padding is 0 instead of -inf (a masked load's other=0.0): a row whose values are all
negative and not a multiple of 64 long gets 0 as its max."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK = 64


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.movedim(self.dim, -1)
        n = x.shape[-1]
        padded = F.pad(x, (0, (-n) % BLOCK), value=0.0)
        return padded.reshape(*x.shape[:-1], -1, BLOCK).amax(-1).amax(-1)
