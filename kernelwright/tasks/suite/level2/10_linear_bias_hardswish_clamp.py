import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 8192 if FULL else 16
in_features = 2048 if FULL else 64
out_features = 8192 if FULL else 100
clamp_min = -0.2
clamp_max = 2.0


class Model(nn.Module):
    """Bias-free matmul with a separate learned bias, HardSwish, then clamping."""

    def __init__(self, in_features: int, out_features: int, clamp_min: float, clamp_max: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(0.5 * torch.randn(out_features))
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.linear(x) + self.bias)
        return torch.clamp(y, self.clamp_min, self.clamp_max)


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features, clamp_min, clamp_max]
