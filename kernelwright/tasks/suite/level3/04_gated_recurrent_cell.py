import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 256 if FULL else 2
steps = 128 if FULL else 6
input_size = 512 if FULL else 12
hidden_size = 1024 if FULL else 16


class Model(nn.Module):
    """Hand-written single-gate recurrent cell unrolled over time; returns every hidden state."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        # Input projections for the gate and the candidate state, computed for all steps at once.
        self.x_proj = nn.Linear(input_size, 2 * hidden_size)
        self.h_gate = nn.Linear(hidden_size, hidden_size, bias=False)
        self.h_cand = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, steps, _ = x.shape
        x_gate, x_cand = self.x_proj(x).chunk(2, dim=-1)
        h = x.new_zeros(b, self.hidden_size)
        states = []
        for t in range(steps):
            forget = torch.sigmoid(x_gate[:, t] + self.h_gate(h))
            candidate = torch.tanh(x_cand[:, t] + self.h_cand(forget * h))
            h = (1.0 - forget) * h + forget * candidate
            states.append(h)
        return torch.stack(states, dim=1)


def get_inputs():
    return [torch.randn(batch, steps, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
