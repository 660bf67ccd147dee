"""Wrong: a blocked scan (blocks of 256) that never adds the carry of the earlier blocks: exact while the
axis fits one block, as it does once the problem's 4000 is shrunk to fit the budget (250)."""
import torch
import torch.nn as nn

BLOCK = 256


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.movedim(self.dim, -1)
        parts = [torch.cumsum(x[..., s:s + BLOCK], dim=-1) for s in range(0, x.shape[-1], BLOCK)]
        return torch.cat(parts, dim=-1).movedim(-1, self.dim)
