"""Wrong: the products summed two lanes at a time, the odd last element forgotten (a vectorised loop
without its scalar tail): exact when K is even, as it is after any halving of the problem's K."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        k = A.shape[1]
        even = k - k % 2
        prod = A[:, :even] * B[:even, 0]
        return prod.reshape(A.shape[0], -1, 2).sum(-1).sum(-1, keepdim=True)
