import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 64 if FULL else 2
channels = 128 if FULL else 8
height = 56 if FULL else 10
width = 56 if FULL else 10


class Model(nn.Module):
    """Residual block: conv3x3-BN-ReLU-conv3x3-BN, add the input, ReLU (BN uses batch statistics)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        # Batch statistics only: no running buffers that forward would mutate.
        self.bn1 = nn.BatchNorm2d(channels, track_running_stats=False)
        self.bn2 = nn.BatchNorm2d(channels, track_running_stats=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + x)


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return [channels]
