import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 32 if FULL else 2
in_channels = 32 if FULL else 4
out_channels = 64 if FULL else 8
groups = 8 if FULL else 4
height = 128 if FULL else 16
width = 128 if FULL else 16


class Model(nn.Module):
    """3x3 convolution, GroupNorm, tanh, then 2x2 max pooling."""

    def __init__(self, in_channels: int, out_channels: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(out_channels))
            self.norm.bias.copy_(0.1 * torch.randn(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.tanh(self.norm(self.conv(x))), kernel_size=2)


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
