import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 64 if FULL else 2
in_channels = 32 if FULL else 4
out_channels = 64 if FULL else 8
height = 128 if FULL else 18
width = 128 if FULL else 18
kernel_size = 3
clamp_min = -0.25
clamp_max = 1.5


class Model(nn.Module):
    """3x3 convolution (no padding), then Mish, then clamping to [clamp_min, clamp_max]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, clamp_min: float, clamp_max: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(F.mish(self.conv(x)), self.clamp_min, self.clamp_max)


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, clamp_min, clamp_max]
