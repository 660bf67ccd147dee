"""Wrong: the accumulator is overwritten (acc = for acc +=): exact while K fits one block of 128, as it
does once the problem is shrunk to fit the budget (N = 128)."""
import torch
import torch.nn as nn

BLOCK_K = 128


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
        for k in range(0, A.shape[1], BLOCK_K):
            acc = A[:, k:k + BLOCK_K] @ B[k:k + BLOCK_K]
        return acc
