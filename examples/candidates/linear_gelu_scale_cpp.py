"""A hand-written candidate for builtin/L2/01_linear_gelu_scale, C++ on the CPU.

The competence-matched shape of a good rewrite: the tuned library GEMM (nn.Linear) stays, and the
memory-bound epilogue (exact GELU, then the scale) becomes one fused pass in custom code.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

// y = gelu(x) * scale, exact (erf) GELU, one pass over x.
torch::Tensor gelu_scale(torch::Tensor x, double scale) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "gelu_scale: float32 input expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const int64_t n = xc.numel();
    const float s = static_cast<float>(scale);
    #pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        out[i] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)) * s;
    }
    return y;
}
"""

ext = load_inline(
    name="kw_example_gelu_scale",
    cpp_sources=CPP_SOURCE,
    functions=["gelu_scale"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.gelu_scale(self.linear(x), self.scale)
