"""RMSNorm in CUDA: one block per row."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Block-wide reductions for blockDim.x a multiple of 32 (at most 1024); every thread gets the result.
__device__ float block_max(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? sh[lane] : -INFINITY;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    v = sh[0];
    __syncthreads();  // sh is reused by the next reduction
    return v;
}
__device__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? sh[lane] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    v = sh[0];
    __syncthreads();
    return v;
}

__global__ void rms_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                           int64_t hidden, float eps) {
    __shared__ float sh[32];
    const float* row = x + (int64_t)blockIdx.x * hidden;
    float* out = y + (int64_t)blockIdx.x * hidden;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) ss += row[c] * row[c];
    ss = block_sum(ss, sh);
    const float inv = rsqrtf(ss / (float)hidden + eps);
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) out[c] = row[c] * inv * w[c];
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "float32 CUDA tensor expected");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t hidden = xc.size(-1), rows = xc.numel() / hidden;
    rms_kernel<<<(unsigned)rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), hidden, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kwg_rms", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["rms_norm"],
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        return ext.rms_norm(x, self.weight, self.eps)
