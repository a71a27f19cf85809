import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 32 if FULL else 2
in_channels = 32 if FULL else 3
out_channels = 64 if FULL else 6
height = 128 if FULL else 15
width = 128 if FULL else 15
scale = 1.75


class Model(nn.Module):
    """3x3 convolution, Softplus, multiplication by a constant, plus a learned per-channel bias."""

    def __init__(self, in_channels: int, out_channels: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.scale = scale
        self.channel_bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(self.conv(x)) * self.scale + self.channel_bias


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, scale]
