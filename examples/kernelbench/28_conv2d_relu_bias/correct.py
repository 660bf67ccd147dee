"""Correct: the convolution as unfold + matmul (im2col), then ReLU and the bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias_shape: tuple):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.conv.kernel_size
        n, _, h, w = x.shape
        cols = F.unfold(x, k)  # (n, c*k*k, L)
        out = self.conv.weight.reshape(self.conv.out_channels, -1) @ cols + self.conv.bias.view(1, -1, 1)
        out = out.reshape(n, self.conv.out_channels, h - k[0] + 1, w - k[1] + 1)
        return torch.relu(out) + self.bias
