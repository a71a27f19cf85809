import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

tokens = 16384 if FULL else 40
hidden = 4096 if FULL else 384


class Model(nn.Module):
    """LayerNorm over the last dimension with a learned (non-trivial) scale and shift."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        # Move the affine parameters off their identity defaults, so that a kernel which ignores
        # them cannot pass by accident.
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(tokens, hidden) * 2.0 + 0.5]


def get_init_inputs():
    return [hidden]
