import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

rows = 4096 if FULL else 32
vocab = 50304 if FULL else 1500


class Model(nn.Module):
    """Log-softmax over the last dimension, as applied to language-model logits."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1)


def get_inputs():
    return [torch.randn(rows, vocab) * 3.0]


def get_init_inputs():
    return []
