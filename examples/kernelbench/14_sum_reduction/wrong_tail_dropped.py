"""Wrong: a chunked sum that drops the remainder (n % 64 trailing elements): exact when the axis is a
multiple of 64, as the problem's 256 is."""
import torch
import torch.nn as nn

CHUNK = 64


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[self.dim]
        total = torch.zeros_like(x.narrow(self.dim, 0, 1))
        for start in range(0, n - n % CHUNK, CHUNK):
            total = total + x.narrow(self.dim, start, CHUNK).sum(dim=self.dim, keepdim=True)
        return total
