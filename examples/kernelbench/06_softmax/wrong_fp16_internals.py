"""Wrong: the exponentials and their sum computed in float16 (a half-precision kernel behind a float32
interface): relative errors of ~1e-3 on every output."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = (x - x.amax(dim=1, keepdim=True)).half()
        e = torch.exp(h)
        return (e / e.sum(dim=1, keepdim=True, dtype=torch.float32).half()).float()
