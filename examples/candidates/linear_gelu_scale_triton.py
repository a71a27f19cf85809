"""A hand-written candidate for builtin/L2/01_linear_gelu_scale, Triton.

cuBLAS keeps the GEMM; a Triton kernel fuses the exact GELU and the scale.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_scale_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)) * scale
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x).contiguous()
        y = torch.empty_like(h)
        n = h.numel()
        gelu_scale_kernel[(triton.cdiv(n, 2048),)](h, y, n, self.scale, BLOCK=2048)
        return y
