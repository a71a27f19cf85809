"""What a region's C++ / CUDA needs around it to compile on the host without torch: the standard
headers, `at::Half` / `at::BFloat16` as floats (the probes hold values as the kernel loads them;
the comparison applies the store's rounding), and for CUDA a host shim of the device world.

The CUDA shim runs a kernel as the GPU would, one block at a time: each thread of the block a host
thread, `__syncthreads()` the block's barrier, `__shared__` a variable the block's threads share,
`block_sum` / `block_max` reductions through that barrier, warp shuffles an exchange among the
block's threads (all of them must reach it, as they must reach the skeleton's helpers), device
math names mapped to <cmath>, intrinsics to what they approximate. `screen` applies the one nvcc
rule the host compiler cannot: no host function (the standard library's algorithms) in device code.
"""

from __future__ import annotations

import re

# nvcc rejects calls from device code to host functions; the standard library's algorithms are
# host functions, its math (and, with torch's --expt-relaxed-constexpr, min/max) is not.
STD_NAME = re.compile(r"\bstd::(\w+)")
CUDA_STD_OK = frozenset({"exp", "expf", "log", "logf", "log1p", "sqrt", "sqrtf", "tanh", "tanhf", "erf", "erff",
                         "pow", "powf", "fabs", "fabsf", "abs", "fmax", "fmaxf", "fmin", "fminf", "max", "min",
                         "isnan", "isinf", "isfinite", "floor", "ceil", "round", "exp2", "log2", "sin", "cos",
                         "cosh", "sinh", "expm1", "cbrt", "rsqrt", "numeric_limits", "size_t", "int64_t",
                         "int32_t", "uint32_t"})
# torch / ATen calls: not compiled here. The skeleton's own element types are (as floats).
TORCH_NAMES = re.compile(r"\btorch::|\b(?:at|c10)::(?!Half\b|BFloat16\b)|\bdata_ptr\s*<|\.item\s*\(")

COMMON = r'''
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
namespace at { using Half = float; using BFloat16 = float; }
namespace c10 { using Half = float; using BFloat16 = float; }
'''

CUDA_SHIM = r'''
#include <pthread.h>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
// the block's dynamically sized shared memory: the probe rows are short
#define KW_DYNAMIC_SHARED(name) alignas(16) static float name##_store[1 << 16]; float* name = name##_store
struct dim3 { unsigned x = 1, y = 1, z = 1; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
// One block at a time, its threads as host threads (plain pthreads: no templates to instantiate,
// which made each compile several times slower).
static pthread_barrier_t kw_bar;
static void (*kw_body)(void);
struct kw_id { unsigned t, b; };
static void* kw_thread(void* p) {
    const kw_id* id = static_cast<const kw_id*>(p);
    threadIdx.x = id->t; blockIdx.x = id->b;
    kw_body();
    return nullptr;
}
static void kw_launch(unsigned blocks, unsigned threads, void (*body)(void)) {
    static pthread_t ts[1024];
    static kw_id ids[1024];
    blockDim.x = threads; gridDim.x = blocks; kw_body = body;
    pthread_attr_t attr; pthread_attr_init(&attr); pthread_attr_setstacksize(&attr, 1 << 20);
    for (unsigned b = 0; b < blocks; ++b) {
        pthread_barrier_init(&kw_bar, nullptr, threads);
        for (unsigned t = 0; t < threads; ++t) { ids[t] = {t, b}; pthread_create(&ts[t], &attr, kw_thread, &ids[t]); }
        for (unsigned t = 0; t < threads; ++t) pthread_join(ts[t], nullptr);
        pthread_barrier_destroy(&kw_bar);
    }
}
static inline void __syncthreads() { pthread_barrier_wait(&kw_bar); }
static inline void __syncwarp(unsigned = 0xffffffffu) {}
static inline void __threadfence() {}
static float kw_exchange[1024];
static inline float kw_swap(float v, unsigned from) {
    __syncthreads(); kw_exchange[threadIdx.x] = v; __syncthreads();
    float r = kw_exchange[from < blockDim.x ? from : threadIdx.x]; __syncthreads(); return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int o, int = 32) { return kw_swap(v, threadIdx.x ^ o); }
static inline float __shfl_down_sync(unsigned, float v, unsigned o, int = 32) {
    unsigned lane = threadIdx.x & 31; return kw_swap(v, lane + o < 32 ? threadIdx.x + o : threadIdx.x); }
static inline float __shfl_up_sync(unsigned, float v, unsigned o, int = 32) {
    unsigned lane = threadIdx.x & 31; return kw_swap(v, lane >= o ? threadIdx.x - o : threadIdx.x); }
static inline float __shfl_sync(unsigned, float v, int src, int = 32) {
    return kw_swap(v, (threadIdx.x & ~31u) + (unsigned)(src & 31)); }
static inline float block_sum(float v) {
    __syncthreads(); kw_exchange[threadIdx.x] = v; __syncthreads();
    float s = 0.0f; for (unsigned t = 0; t < blockDim.x; ++t) s += kw_exchange[t];
    __syncthreads(); return s;
}
static inline float block_max(float v) {
    __syncthreads(); kw_exchange[threadIdx.x] = v; __syncthreads();
    float s = -INFINITY; for (unsigned t = 0; t < blockDim.x; ++t) s = fmaxf(s, kw_exchange[t]);
    __syncthreads(); return s;
}
static pthread_mutex_t kw_atomic = PTHREAD_MUTEX_INITIALIZER;
static inline float atomicAdd(float* a, float v) {
    pthread_mutex_lock(&kw_atomic); float o = *a; *a += v; pthread_mutex_unlock(&kw_atomic); return o; }
static inline float atomicMax(float* a, float v) {
    pthread_mutex_lock(&kw_atomic); float o = *a; *a = fmaxf(*a, v); pthread_mutex_unlock(&kw_atomic); return o; }
// glibc declares some of these names itself: macros, not definitions
#define __expf expf
#define __logf logf
#define __log2f log2f
#define __powf powf
#define __tanhf tanhf
#define __sinf sinf
#define __cosf cosf
#define exp10f(v) powf(10.0f, (v))
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __saturatef(float a) { return fminf(fmaxf(a, 0.0f), 1.0f); }
static inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
static inline double rsqrt(double v) { return 1.0 / sqrt(v); }
static inline float normcdff(float v) { return 0.5f * erfcf(-v / sqrtf(2.0f)); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
template <class T> static inline T __ldg(const T* p) { return *p; }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline float min(float a, float b) { return fminf(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
typedef float __half;
typedef float __nv_bfloat16;
static inline float __half2float(float v) { return v; }
static inline float __float2half(float v) { return v; }
static inline float __bfloat162float(float v) { return v; }
static inline float __float2bfloat16(float v) { return v; }
#define CUDART_INF_F INFINITY
'''



def screen(target: str, region: str) -> str:
    """What the harness cannot judge (torch calls: `unsupported`) or what nvcc would reject
    that the host compiler accepts (a host function in device code): one line, or ''."""
    if TORCH_NAMES.search(region):
        return "unsupported: the region calls torch / ATen, which the pre-check compiles without"
    if target == "cuda":
        for name in STD_NAME.findall(_code_only(region)):
            if name not in CUDA_STD_OK:
                return (f"compile_error: calling a __host__ function(\"std::{name}\") from a __global__ function "
                        "is not allowed")
    return ""


def _code_only(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)
