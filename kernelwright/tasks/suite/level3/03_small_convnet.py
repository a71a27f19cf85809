import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 128 if FULL else 2
in_channels = 3
image = 128 if FULL else 16
classes = 100 if FULL else 10


class Model(nn.Module):
    """Image classifier: three conv-ReLU stages with 2x2 max pooling, global average pool, linear."""

    def __init__(self, in_channels: int, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.head = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        return self.head(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(batch, in_channels, image, image)]


def get_init_inputs():
    return [in_channels, classes]
