import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 64 if FULL else 2
in_channels = 16 if FULL else 3
out_channels = 64 if FULL else 8
height = 112 if FULL else 16
width = 112 if FULL else 16


class Model(nn.Module):
    """3x3 convolution, batch-statistics BatchNorm, ReLU, then the mean over height and width."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        # No running statistics: normalisation always uses the current batch, and forward has no
        # side effects on module state, so repeated calls give the same answer.
        self.bn = nn.BatchNorm2d(out_channels, track_running_stats=False)
        with torch.no_grad():
            self.bn.weight.copy_(1.0 + 0.1 * torch.randn(out_channels))
            self.bn.bias.copy_(0.1 * torch.randn(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn(self.conv(x)))
        return y.mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
