import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 16 if FULL else 2
in_channels = 8 if FULL else 3
base = 64 if FULL else 4
out_channels = 2
image = 256 if FULL else 16  # must be even: one 2x down/up step


class Model(nn.Module):
    """One U-Net level: encode, downsample, encode, upsample, concatenate the skip, decode, 1x1 out."""

    def __init__(self, in_channels: int, base: int, out_channels: int):
        super().__init__()
        self.enc1 = nn.Conv2d(in_channels, base, 3, padding=1)
        self.enc2 = nn.Conv2d(base, 2 * base, 3, padding=1)
        self.up = nn.ConvTranspose2d(2 * base, base, kernel_size=2, stride=2)
        self.dec = nn.Conv2d(2 * base, base, 3, padding=1)
        self.out = nn.Conv2d(base, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = F.relu(self.enc1(x))
        deep = F.relu(self.enc2(F.max_pool2d(skip, 2)))
        merged = torch.cat([self.up(deep), skip], dim=1)
        return self.out(F.relu(self.dec(merged)))


def get_inputs():
    return [torch.randn(batch, in_channels, image, image)]


def get_init_inputs():
    return [in_channels, base, out_channels]
