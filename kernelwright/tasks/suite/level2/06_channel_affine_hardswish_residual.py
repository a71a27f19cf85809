import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 32 if FULL else 2
channels = 128 if FULL else 16
height = 128 if FULL else 12
width = 128 if FULL else 12


class Model(nn.Module):
    """Per-channel scale and shift, HardSwish, then adds the input back (broadcast over H and W)."""

    def __init__(self, channels: int):
        super().__init__()
        self.gain = nn.Parameter(1.0 + 0.5 * torch.randn(channels, 1, 1))
        self.shift = nn.Parameter(0.5 * torch.randn(channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x * self.gain + self.shift) + x


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return [channels]
