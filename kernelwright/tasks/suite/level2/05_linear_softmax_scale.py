import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 8192 if FULL else 32
in_features = 2048 if FULL else 128
classes = 8192 if FULL else 300


class Model(nn.Module):
    """Linear layer, softmax over its outputs, then a learned per-class rescaling."""

    def __init__(self, in_features: int, classes: int):
        super().__init__()
        self.linear = nn.Linear(in_features, classes)
        self.class_scale = nn.Parameter(1.0 + 0.25 * torch.randn(classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=-1) * self.class_scale


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, classes]
