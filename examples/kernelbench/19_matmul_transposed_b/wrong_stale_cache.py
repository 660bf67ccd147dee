"""Wrong: caches the contiguous transpose of B by shape, to skip the copy on later calls: every call
after the first multiplies by the first call's B."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._bt = {}

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        key = (tuple(B.shape), B.dtype, B.device)
        if key not in self._bt:
            self._bt[key] = B.t().contiguous()
        return A @ self._bt[key]
