"""LayerNorm followed by SiLU: a normalization and an activation, two memory-bound passes to fuse.

KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`.
Run `kernelwright optimize examples/layernorm_silu.py` to get a verified rewrite.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full is the GPU size (kernelwright sets it on a GPU); the default runs fast on a laptop CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

rows = 16384 if FULL else 256
hidden = 4096 if FULL else 512


class Model(nn.Module):
    """y = silu(layer_norm(x)) over the last dimension, with a learned scale and shift."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():  # non-trivial affine parameters, so a kernel that ignores them fails the check
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.2, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.norm(x))


def get_inputs():
    return [torch.randn(rows, hidden)]


def get_init_inputs():
    return [hidden]
