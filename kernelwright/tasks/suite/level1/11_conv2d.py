import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 32 if FULL else 2
in_channels = 64 if FULL else 8
out_channels = 128 if FULL else 16
height = 128 if FULL else 20
width = 128 if FULL else 18
kernel_size = 3


class Model(nn.Module):
    """2-D convolution, 3x3 kernel, stride 1, zero padding that keeps the spatial size."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
