import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 128 if FULL else 2
in_channels = 3
image = 224 if FULL else 32
patch = 16 if FULL else 8
dim = 768 if FULL else 32
hidden = 3072 if FULL else 64
classes = 1000 if FULL else 10


class Model(nn.Module):
    """Vision patch embedding with position embeddings, LayerNorm, token mean-pool and an MLP head."""

    def __init__(self, in_channels: int, image: int, patch: int, dim: int, hidden: int, classes: int):
        super().__init__()
        self.embed = nn.Conv2d(in_channels, dim, kernel_size=patch, stride=patch)
        self.position = nn.Parameter(0.02 * torch.randn(1, (image // patch) ** 2, dim))
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(images).flatten(2).transpose(1, 2) + self.position
        pooled = self.norm(tokens).mean(dim=1)
        return self.fc2(F.gelu(self.fc1(pooled)))


def get_inputs():
    return [torch.randn(batch, in_channels, image, image)]


def get_init_inputs():
    return [in_channels, image, patch, dim, hidden, classes]
