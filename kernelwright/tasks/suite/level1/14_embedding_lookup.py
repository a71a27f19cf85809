import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

vocab = 65536 if FULL else 1000
dim = 4096 if FULL else 64
batch = 16 if FULL else 4
seq = 2048 if FULL else 50


class Model(nn.Module):
    """Embedding-table lookup: gathers one row of a learned table per int64 token index."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(vocab, dim)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.table(token_ids)


def get_inputs():
    return [torch.randint(0, vocab, (batch, seq), dtype=torch.int64)]


def get_init_inputs():
    return [vocab, dim]
