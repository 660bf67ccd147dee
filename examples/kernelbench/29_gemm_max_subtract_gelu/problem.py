import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, max over the features (kept), subtract the mean over that same axis, GELU. The max leaves one
    feature, so subtracting its mean gives 0 for every input: a degenerate problem (the output is zeros)."""

    def __init__(self, in_features: int, out_features: int, max_dim: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.max_dim = max_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = torch.max(x, dim=self.max_dim, keepdim=True).values
        x = x - x.mean(dim=1, keepdim=True)
        return torch.nn.functional.gelu(x)


batch_size = 128
in_features = 512
out_features = 1024
max_dim = 1


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, max_dim]
