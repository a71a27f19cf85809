"""Launchers that run the notes' stand-alone device code, so its results can be compared with PyTorch.

A `cuda` block in a note is only a kernel or a few device functions; to run it we add a host
function that launches it and bind that with load_inline. The note's code is used as it is: only
what is around it comes from here.
"""

from __future__ import annotations

import re
from typing import Callable

import torch
import torch.nn.functional as F

from tests.knowledge import _snippets as S

# name -> (C++ call on `v`, the PyTorch definition it must match)
ACTIVATIONS: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = {
    "relu_f": ("relu_f(v)", torch.relu),
    "leaky_relu_f": ("leaky_relu_f(v, 0.01f)", lambda x: F.leaky_relu(x, 0.01)),
    "elu_f": ("elu_f(v, 1.0f)", lambda x: F.elu(x, 1.0)),
    "sigmoid_f": ("sigmoid_f(v)", torch.sigmoid),
    "silu_f": ("silu_f(v)", F.silu),
    "gelu_f": ("gelu_f(v)", F.gelu),
    "gelu_tanh_f": ("gelu_tanh_f(v)", lambda x: F.gelu(x, approximate="tanh")),
    "softplus_f": ("softplus_f(v, 1.0f, 20.0f)", F.softplus),
    "softplus_f/beta2": ("softplus_f(v, 2.0f, 5.0f)", lambda x: F.softplus(x, beta=2.0, threshold=5.0)),
    "mish_f": ("mish_f(v)", F.mish),
    "hardsigmoid_f": ("hardsigmoid_f(v)", F.hardsigmoid),
    "hardswish_f": ("hardswish_f(v)", F.hardswish),
    "tanh_f": ("tanh_f(v)", torch.tanh),
    "clamp_f": ("clamp_f(v, -0.5f, 0.75f)", lambda x: torch.clamp(x, -0.5, 0.75)),
}

CUDA_HEADERS = "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAException.h>\n"


def note_blocks(note_id: str, lang: str = "cuda") -> list[S.Snippet]:
    return [s for s in S.snippets() if s.note_id == note_id and s.lang == lang]


def with_lines(block: S.Snippet) -> str:
    """The block with a #line directive, so compiler messages point into the note."""
    return f"#line {block.line} \"{block.path}\"\n{block.code}\n#line 1 \"harness\"\n"


def activation_block() -> S.Snippet:
    blocks = note_blocks("activation-formulas")
    assert len(blocks) == 1, "the activation note has one cuda block of device functions"
    return blocks[0]


def activation_names_defined(block: S.Snippet) -> set[str]:
    return set(re.findall(r"__device__\s+__forceinline__\s+float\s+(\w+)\s*\(", block.code))


def activation_inputs(device: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.linspace(-40, 40, 20001), 4 * torch.randn(20000, generator=gen),
                   torch.tensor([0.0, -0.0, 1e-8, -1e-8, 88.0, -88.0, 100.0, -100.0])])
    return x.to(device)


def _cases() -> str:
    return "\n".join(f"        case {i}: y = {call}; break;" for i, (call, _) in enumerate(ACTIVATIONS.values()))


def activation_cpu_source(block: S.Snippet) -> str:
    """The device functions compiled as host C++ (the CUDA qualifiers defined away)."""
    return (
        "#define __device__\n#define __host__\n#define __forceinline__ inline\n" + with_lines(block) +
        "torch::Tensor apply(torch::Tensor x, int64_t which) {\n"
        "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n"
        "    const float* in = xc.data_ptr<float>();\n    float* o = out.data_ptr<float>();\n"
        "    for (int64_t j = 0; j < xc.numel(); ++j) {\n        const float v = in[j];\n        float y = 0.0f;\n"
        f"        switch (which) {{\n{_cases()}\n        }}\n        o[j] = y;\n    }}\n    return out;\n}}\n"
    )


def activation_cuda_source(block: S.Snippet) -> str:
    return (
        CUDA_HEADERS + with_lines(block) +
        "__global__ void apply_kernel(const float* in, float* o, int64_t n, int which) {\n"
        "    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n    if (j >= n) return;\n"
        "    const float v = in[j];\n    float y = 0.0f;\n"
        f"    switch (which) {{\n{_cases()}\n    }}\n    o[j] = y;\n}}\n"
        "torch::Tensor apply(torch::Tensor x, int64_t which) {\n"
        "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n    const int64_t n = xc.numel();\n"
        "    apply_kernel<<<(unsigned)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(\n"
        "        xc.data_ptr<float>(), out.data_ptr<float>(), n, (int)which);\n"
        "    C10_CUDA_KERNEL_LAUNCH_CHECK();\n    return out;\n}\n"
    )


# --- launchers for the other stand-alone kernels (GPU only) -------------------------------------

COALESCING_LAUNCHERS = """
torch::Tensor column_sum_launch(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty({xc.size(1)}, xc.options());
    column_sum<<<(unsigned)((xc.size(1) + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), xc.size(0), xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
torch::Tensor transpose_launch(torch::Tensor x) {
    auto xc = x.contiguous();
    const int rows = (int)xc.size(0), cols = (int)xc.size(1);
    auto out = torch::empty({cols, rows}, xc.options());
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 31) / 32);
    transpose_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

VECTORIZED_LAUNCHERS = """
torch::Tensor scale_launch(torch::Tensor x, double s) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    auto stream = at::cuda::getCurrentCUDAStream();
    if (aligned16(xp) && aligned16(yp)) {
        const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((n / 4 + 255) / 256, 65535));
        scale_vec4_kernel<<<blocks, 256, 0, stream>>>(xp, yp, (float)s, n);
    } else {
        const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 65535));
        scale_scalar_kernel<<<blocks, 256, 0, stream>>>(xp, yp, (float)s, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
bool is_aligned(torch::Tensor x) { return aligned16(x.data_ptr()); }
"""

REDUCTION_LAUNCHERS = """
__global__ void sums_kernel(const float* x, float* sums, float* squares, int64_t cols) {
    const float* row = x + (int64_t)blockIdx.x * cols;
    float a = 0.0f, b = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) { a += row[c]; b += row[c] * row[c]; }
    a = block_sum(a);
    b = block_sum(b);  // a second call in the same kernel
    if (threadIdx.x == 0) { sums[blockIdx.x] = a; squares[blockIdx.x] = b; }
}
__global__ void max_kernel(const float* x, float* out, int64_t cols) {  // one warp per row
    const float* row = x + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = warp_max(m);
    if (threadIdx.x == 0) out[blockIdx.x] = m;
}
std::vector<torch::Tensor> reduce_launch(torch::Tensor x, int64_t threads) {
    auto xc = x.contiguous();
    auto sums = torch::empty({xc.size(0)}, xc.options());
    auto squares = torch::empty_like(sums);
    auto maxes = torch::empty_like(sums);
    auto stream = at::cuda::getCurrentCUDAStream();
    sums_kernel<<<(unsigned)xc.size(0), (unsigned)threads, 0, stream>>>(
        xc.data_ptr<float>(), sums.data_ptr<float>(), squares.data_ptr<float>(), xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    max_kernel<<<(unsigned)xc.size(0), 32, 0, stream>>>(xc.data_ptr<float>(), maxes.data_ptr<float>(), xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {sums, squares, maxes};
}
"""

BROADCAST_LAUNCHERS = """
torch::Tensor affine_launch(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    auto xc = x.contiguous();
    auto sc = scale.contiguous();
    auto sh = shift.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const int blocks = (int)std::min<int64_t>((n + 255) / 256, 65535);
    channel_affine_kernel<<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), sc.data_ptr<float>(), sh.data_ptr<float>(), y.data_ptr<float>(),
        n, xc.size(1), xc.size(2) * xc.size(3));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""
