"""Complete candidate programs with one region left for the model (parent side, pure strings).

``write(plan, target)`` turns a ``ScaffoldPlan`` into a ``Scaffold``: everything a small model
gets wrong is written here, once, and checked by the test suite for every built-in task:

* CUDA (``load_inline``): declarations in ``cpp_sources``, kernel and host function in
  ``cuda_sources``, ``functions=[...]`` naming the host function, input checks, contiguity, output
  allocation, launch on the current stream, ``C10_CUDA_KERNEL_LAUNCH_CHECK`` after the launch.
  Row kernels get ``block_sum`` / ``block_max`` (warp shuffles + shared memory).
* Triton: ``@triton.jit`` kernel with program id, offsets, masks, loads and stores, and the launcher.
* CPU C++ (``load_inline``): plain loops with ``#pragma omp parallel for``.

Every input is loaded (converted to float) before the region and the result is stored after it,
so the region is only the math. Broadcasting is resolved in Python at call time: an extra input
arrives as a flat vector read at ``(i / inner) % span`` (``_kw_bcast``), which is exact for any
broadcast against the main input's shape.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional

from kernelwright.scaffold.types import BEGIN, END, KernelArg, Scaffold, ScaffoldPlan, Segment, SegmentKind

PLACEHOLDER = "@@KW_REGION@@"
C_TYPES = {"float32": "float", "float16": "at::Half", "bfloat16": "at::BFloat16"}
TORCH_DTYPES = {"float32": "torch::kFloat32", "float16": "torch::kHalf", "bfloat16": "torch::kBFloat16"}
PY_DTYPES = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16"}
ROW_THREADS = 256
ELEMENTWISE_THREADS = 256
TRITON_BLOCK = 1024
# The math a region may call. C targets: only the functions the region's own lines and definitions
# name (a word -> (C++ name, CUDA name)). Listing all of them made the 1.5B model call them one after
# another in 11 of 27 regions (docs/results/scaffold-math-line-cpu.md); the list of what is needed
# did that in none. Triton keeps its whole line: what tl lacks matters more than what it has.
C_MATH = {
    "exp": ("std::exp", "expf"), "log": ("std::log", "logf"), "log1p": ("std::log1p", "log1pf"),
    "sqrt": ("std::sqrt", "sqrtf"), "rsqrt": ("std::sqrt", "rsqrtf"), "tanh": ("std::tanh", "tanhf"),
    "erf": ("std::erf", "erff"), "max": ("std::fmax", "fmaxf"), "min": ("std::fmin", "fminf"),
    "clamp": ("std::fmin, std::fmax", "fminf, fmaxf"), "abs": ("std::fabs", "fabsf"), "pow": ("std::pow", "powf"),
}
NO_HELPERS = "there are no relu/sigmoid/gelu functions"
TRITON_MATH = ("tl has exp, log, sqrt, rsqrt, sigmoid, erf, abs, maximum, minimum, where, sum, max, min, cumsum "
               "(sum/max/min/cumsum with axis=0); there is no tl.tanh: use 2 * tl.sigmoid(2 * v) - 1")


def math_line(target: str, seg: Segment) -> str:
    """The prompt's line on the math functions the region may call."""
    if target == "triton":
        return TRITON_MATH
    text = "\n".join(seg.torch_lines + seg.op_notes)
    words = set(re.findall(r"[a-z0-9_]+", text.lower())) | ({"abs"} if "|" in text else set())
    names: list[str] = []
    for word, spellings in C_MATH.items():
        if word in words:
            names += [n for n in spellings[0 if target == "cpp" else 1].split(", ") if n not in names]
    if not names:
        return f"no math function is needed here ({NO_HELPERS})"
    return f"the math functions these lines need: {', '.join(names)} ({NO_HELPERS})"


BCAST_HELPER = '''
def _kw_bcast(t, shape):
    """t broadcast against `shape`, as (flat contiguous values, inner, span): element i of the
    broadcast tensor (row-major) is values[(i // inner) % span]."""
    nd = len(shape)
    dims = [1] * (nd - t.dim()) + list(t.shape)
    varying = [d for d in range(nd) if dims[d] != 1]
    if not varying:
        return t.reshape(1).contiguous(), 1, 1
    a, b = varying[0], varying[-1]
    if all(dims[d] == shape[d] for d in range(a, b + 1)):
        return t.reshape(-1).contiguous(), math.prod(shape[b + 1:]), math.prod(shape[a:b + 1])
    full = t.expand(shape).contiguous()  # a pattern with gaps: materialize it once
    return full.reshape(-1), 1, full.numel()
'''


def write(plan: ScaffoldPlan, target: str) -> Scaffold:
    if not plan.available or plan.segment is None:
        return Scaffold(task_id=plan.task_id, target=target, available=False, reason=plan.reason)
    seg = plan.segment
    writer = {"cuda": _cuda, "cpp": _cpp, "triton": _triton}[target]
    return writer(plan, seg)


# ---- shared pieces -------------------------------------------------------------------------------

def _ext_name(plan: ScaffoldPlan, target: str) -> str:
    slug = "".join(ch if ch.isalnum() else "_" for ch in plan.task_id.split("/")[-1])[:40]
    # the probes are the pre-check's, not the program's: leaving them out keeps names (and so the
    # prompts of recorded runs) what they were
    digest = hashlib.sha256((plan.model_dump_json(exclude={"probes"}) + target).encode()).hexdigest()[:8]
    return f"kw_{slug}_{target}_{digest}"


def _wrapper(seg: Segment, call: str) -> str:
    """Python `kw_fused(x, *extras)`: shapes extras for the kernel, calls it, shapes the output."""
    extras = seg.extras
    params = ", ".join(["x"] + [a.name for a in extras])
    lines = [f"def kw_fused({params}):", "    x = x.contiguous()", "    shape = tuple(x.shape)"]
    for a in extras:
        if a.pattern == "same":
            lines.append(f"    {a.name} = {a.name}.contiguous()")
            lines.append(f"    assert {a.name}.shape == x.shape, 'kw_fused: {a.name} must be shaped like x'")
        elif a.pattern == "scalar":
            lines.append(f"    {a.name} = {a.name}.reshape(1).contiguous()")
        else:
            lines.append(f"    {a.name}, {a.name}_inner, {a.name}_span = _kw_bcast({a.name}, shape)")
    if seg.kind == SegmentKind.ROW:
        lines.append(f"    cols = math.prod(shape[len(shape) - {seg.row_dims}:])")
        if seg.per_row_output:
            keep = f" + (1,) * {seg.row_dims}" if seg.out_keepdim else ""
            lines.append(f"    out_shape = shape[:len(shape) - {seg.row_dims}]{keep}")
        else:
            lines.append("    out_shape = shape")
    else:
        lines.append("    out_shape = shape")
    lines.append(f"    out = {call}")
    lines.append("    return out.reshape(out_shape)")
    return "\n".join(lines) + "\n"


def _ext_args(seg: Segment) -> list[str]:
    """Arguments after x passed from Python to the compiled function, in order."""
    out = []
    for a in seg.extras:
        out.append(a.name)
        if a.pattern == "broadcast":
            out += [f"{a.name}_inner", f"{a.name}_span"]
    if seg.kind == SegmentKind.ROW:
        out.append("cols")
    return out


def _assemble_program(plan: ScaffoldPlan, header: str, kernel_part: str, wrapper: str) -> str:
    seg = plan.segment
    helper = BCAST_HELPER + "\n\n" if seg is not None and any(a.pattern == "broadcast" for a in seg.args) else ""
    return f"{header}\n{plan.prelude}\n{kernel_part}\n{helper}\n{wrapper}\n\n{plan.model_new}"


def _variables(seg: Segment, target: str) -> list[str]:
    """What the region can read and must write, one line each, for the prompt."""
    c_like = target != "triton"
    lines = []
    if seg.kind == SegmentKind.ELEMENTWISE:
        for a in seg.args:
            what = "this element's value of" if c_like else "a block of BLOCK elements of"
            lines.append(f"`{a.name}` ({'float' if c_like else 'float32'}): {what} {a.describe}")
        lines.append("`y` (already set to x): assign the result to it" if c_like else
                     "`y` (already set to x): assign the result block to it")
        return lines + [math_line(target, seg)]
    rows_word = f"a row is the last {seg.row_dims} dims of x, {seg.cols} values" if seg.row_dims > 1 \
        else f"a row is the last dim of x, {seg.cols} values"
    lines.append(f"{rows_word}; `row` is this program's row, `cols` its length")
    for a in seg.args:
        if c_like:
            lines.append(f"`{a.name}(j)` (float): column j of this row of {a.describe}")
        else:
            lines.append(f"`{a.name}` (float32, BLOCK lanes, lane j = column j; lanes j >= cols, where `mask` is "
                         f"False, hold 0.0): this row of {a.describe}")
    if target == "cuda":
        lines.append("`block_sum(v)`, `block_max(v)`: reduce v over the threads of the block; every thread gets "
                     "the result and every thread must call them")
        lines.append(f"the block has blockDim.x = {ROW_THREADS} threads: loop `for (int64_t j = threadIdx.x; "
                     "j < cols; j += blockDim.x)`")
    if seg.per_row_output:
        lines.append({"cuda": "`y` (a float, already 0): assign the row's one result to it; thread 0's y is stored "
                              "(after block_sum/block_max every thread holds the same value)",
                      "cpp": "`y` (a float, already 0): assign the row's one result to it",
                      "triton": "assign the row's single result (a scalar, e.g. from tl.sum(..., axis=0)) to `y`"}[target])
    else:
        lines.append({"cuda": "write `y[j]` for every column j of the row",
                      "cpp": "write `y[j]` for every column j of the row",
                      "triton": "assign the row's result block (BLOCK values) to `y`"}[target])
    return lines + [math_line(target, seg)]


def _scaffold(plan: ScaffoldPlan, seg: Segment, target: str, program: str, kernel_view: str, indent: str,
              default: str, language: str) -> Scaffold:
    return Scaffold(task_id=plan.task_id, target=target, available=True, reason=plan.reason, segment=seg,
                    program=program, placeholder=indent + PLACEHOLDER, default_region=default, indent=indent,
                    language=language, kernel_view=kernel_view, variables=_variables(seg, target))


def _marked(body: str, indent: str, comment: str) -> tuple[str, str]:
    """(program text, view text) of a kernel whose region sits at PLACEHOLDER."""
    program = body.replace(f"{indent}{PLACEHOLDER}",
                           f"{indent}{comment} {BEGIN}\n{indent}{PLACEHOLDER}\n{indent}{comment} {END}")
    view = body.replace(f"{indent}{PLACEHOLDER}",
                        f"{indent}{comment} {BEGIN}\n{indent}{comment} ... your code ...\n{indent}{comment} {END}")
    return program, view


# ---- C-like kernels (CUDA and CPU C++) -----------------------------------------------------------

def _c_params(seg: Segment, pointer_suffix: str = "_ptr") -> list[str]:
    out = []
    for a in seg.args:
        out.append(f"const {C_TYPES[a.dtype]}* __restrict__ {a.name}{pointer_suffix}")
        if a.pattern == "broadcast":
            out += [f"int64_t {a.name}_inner", f"int64_t {a.name}_span"]
    out.append(f"{C_TYPES[seg.out_dtype]}* __restrict__ out_ptr")
    return out


def _c_index(a: KernelArg, flat: str) -> str:
    if a.pattern == "same":
        return flat
    if a.pattern == "scalar":
        return "0"
    return f"(({flat}) / {a.name}_inner) % {a.name}_span"


def _c_loads(seg: Segment, indent: str) -> str:
    if seg.kind == SegmentKind.ELEMENTWISE:
        return "".join(f"{indent}const float {a.name} = static_cast<float>({a.name}_ptr[{_c_index(a, 'i')}]);\n"
                       for a in seg.args)
    return "".join(f"{indent}auto {a.name} = [&](int64_t j) -> float {{ return static_cast<float>("
                   f"{a.name}_ptr[{_c_index(a, 'row * cols + j')}]); }};\n" for a in seg.args)


def _host(seg: Segment, device_check: str, launch: str) -> tuple[str, str]:
    """(declaration, definition) of the host function `kw_fused_impl`."""
    params = ["torch::Tensor x"]
    for a in seg.extras:
        params.append(f"torch::Tensor {a.name}")
        if a.pattern == "broadcast":
            params += [f"int64_t {a.name}_inner", f"int64_t {a.name}_span"]
    if seg.kind == SegmentKind.ROW:
        params.append("int64_t cols")
    signature = f"torch::Tensor kw_fused_impl({', '.join(params)})"
    checks = []
    for a in seg.args:
        checks.append(f"    TORCH_CHECK({a.name}.{device_check}, \"{a.name} must be on the right device\");")
        checks.append(f"    TORCH_CHECK({a.name}.scalar_type() == {TORCH_DTYPES[a.dtype]}, \"{a.name} must be {a.dtype}\");")
        checks.append(f"    TORCH_CHECK({a.name}.is_contiguous(), \"{a.name} must be contiguous\");")
    if seg.kind == SegmentKind.ROW:
        size = "rows" if seg.per_row_output else "rows * cols"
        alloc = ("    TORCH_CHECK(cols > 0 && x.numel() % cols == 0, \"x does not split into rows of cols\");\n"
                 "    const int64_t rows = x.numel() / cols;\n"
                 f"    auto out = torch::empty({{{size}}}, x.options().dtype({TORCH_DTYPES[seg.out_dtype]}));\n"
                 "    if (rows == 0) return out;\n")
    else:
        alloc = (f"    auto out = torch::empty({{x.numel()}}, x.options().dtype({TORCH_DTYPES[seg.out_dtype]}));\n"
                 "    const int64_t n = x.numel();\n"
                 "    if (n == 0) return out;\n")
    body = "\n".join(checks) + "\n" + alloc + launch + "    return out;\n"
    return signature + ";", f"{signature} {{\n{body}}}\n"


def _row_output(seg: Segment, indent: str, guard: str) -> tuple[str, str]:
    """(declaration before the region, store after it) of a row kernel's output: a float `y` for
    one value per row, a pointer to the row for a whole row."""
    t = C_TYPES[seg.out_dtype]
    if seg.per_row_output:
        return f"{indent}float y = 0.0f;\n", f"{indent}{guard}out_ptr[row] = static_cast<{t}>(y);\n"
    return f"{indent}{t}* y = out_ptr + row * cols;\n", ""


def _ptr_args(seg: Segment) -> str:
    out = []
    for a in seg.args:
        out.append(f"{a.name}.data_ptr<{C_TYPES[a.dtype]}>()")
        if a.pattern == "broadcast":
            out += [f"{a.name}_inner", f"{a.name}_span"]
    out.append(f"out.data_ptr<{C_TYPES[seg.out_dtype]}>()")
    return ", ".join(out)


CUDA_HELPERS = r'''
// Reductions over the threads of one block (blockDim.x a multiple of 32, at most 1024).
// Every thread must call them; every thread gets the result.
__device__ __forceinline__ float kw_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float kw_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float block_sum(float v) {
    __shared__ float buf[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();  // buf may still be read by a previous call
    v = kw_warp_sum(v);
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    v = (threadIdx.x < warps) ? buf[threadIdx.x] : 0.0f;
    if (warp == 0) v = kw_warp_sum(v);
    if (threadIdx.x == 0) buf[0] = v;
    __syncthreads();
    return buf[0];
}
__device__ float block_max(float v) {
    __shared__ float buf[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    v = kw_warp_max(v);
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    v = (threadIdx.x < warps) ? buf[threadIdx.x] : -INFINITY;
    if (warp == 0) v = kw_warp_max(v);
    if (threadIdx.x == 0) buf[0] = v;
    __syncthreads();
    return buf[0];
}
'''


def cuda_kernel(seg: Segment) -> tuple[str, str, str]:
    """(kernel with PLACEHOLDER where the region goes, the region's indent, helpers it calls):
    the skeleton's and the pre-check's, so the region sees the same names in both."""
    params = ",\n    ".join(_c_params(seg))
    indent = "    "
    if seg.kind == SegmentKind.ELEMENTWISE:
        kernel = (f"__global__ void kw_fused_kernel(\n    {params},\n    int64_t n) {{\n"
                  "    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;\n"
                  "    if (i >= n) return;\n"
                  f"{_c_loads(seg, indent)}"
                  "    float y = x;\n"
                  f"{indent}{PLACEHOLDER}\n"
                  f"    out_ptr[i] = static_cast<{C_TYPES[seg.out_dtype]}>(y);\n}}\n")
        return kernel, indent, ""
    # one value per row: a float the region assigns (an index into the output could run past it)
    y_decl, y_store = _row_output(seg, indent, "if (threadIdx.x == 0) ")
    kernel = (f"__global__ void kw_fused_kernel(\n    {params},\n    int64_t rows, int64_t cols) {{\n"
              "    const int64_t row = blockIdx.x;\n"
              "    if (row >= rows) return;\n"
              f"{_c_loads(seg, indent)}"
              f"{y_decl}"
              f"{indent}{PLACEHOLDER}\n{y_store}}}\n")
    return kernel, indent, CUDA_HELPERS


def _cuda(plan: ScaffoldPlan, seg: Segment) -> Scaffold:
    kernel, indent, helpers = cuda_kernel(seg)
    if seg.kind == SegmentKind.ELEMENTWISE:
        launch = (f"    const int threads = {ELEMENTWISE_THREADS};\n"
                  "    const int64_t blocks = (n + threads - 1) / threads;\n"
                  "    kw_fused_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(\n"
                  f"        {_ptr_args(seg)}, n);\n"
                  "    C10_CUDA_KERNEL_LAUNCH_CHECK();\n")
    else:
        launch = (f"    kw_fused_kernel<<<rows, {ROW_THREADS}, 0, at::cuda::getCurrentCUDAStream()>>>(\n"
                  f"        {_ptr_args(seg)}, rows, cols);\n"
                  "    C10_CUDA_KERNEL_LAUNCH_CHECK();\n")
    decl, host = _host(seg, "is_cuda()", launch)
    kernel_prog, kernel_view = _marked(kernel, indent, "//")
    # load_inline starts cuda_sources with <torch/types.h>, all the host code needs; <torch/extension.h>
    # (the whole C++ frontend and pybind11) would make nvcc take 2-3x as long (main.cpp has it)
    includes = "#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAException.h>\n#include <math.h>\n"
    cuda_src = f"{includes}{helpers}\n{kernel_prog}\n{host}"
    name = _ext_name(plan, "cuda")
    kernel_part = (f'KW_CPP_SOURCE = """\n{decl}\n"""\n\nKW_CUDA_SOURCE = r"""\n{cuda_src}"""\n\n'
                   f'kw_ext = load_inline(name="{name}", cpp_sources=KW_CPP_SOURCE, cuda_sources=KW_CUDA_SOURCE,\n'
                   '                     functions=["kw_fused_impl"], extra_cuda_cflags=["-O3"], verbose=False)\n')
    return _load_inline_scaffold(plan, seg, "cuda", kernel_part, helpers + kernel_view, indent)


def cpp_kernel(seg: Segment) -> tuple[str, str]:
    """(kernel with PLACEHOLDER where the region goes, the region's indent): the skeleton's and the
    pre-check's."""
    indent = "        "
    if seg.kind == SegmentKind.ELEMENTWISE:
        loop = ("    #pragma omp parallel for if (n > 65536)\n"
                "    for (int64_t i = 0; i < n; ++i) {\n"
                f"{_c_loads(seg, indent)}"
                "        float y = x;\n"
                f"{indent}{PLACEHOLDER}\n"
                f"        out_ptr[i] = static_cast<{C_TYPES[seg.out_dtype]}>(y);\n"
                "    }\n")
    else:
        y_decl, y_store = _row_output(seg, indent, "")
        loop = ("    #pragma omp parallel for if (rows * cols > 65536)\n"
                "    for (int64_t row = 0; row < rows; ++row) {\n"
                f"{_c_loads(seg, indent)}"
                f"{y_decl}"
                f"{indent}{PLACEHOLDER}\n"
                f"{y_store}"
                "    }\n")
    params = ",\n    ".join(_c_params(seg) + (["int64_t n"] if seg.kind == SegmentKind.ELEMENTWISE
                                                 else ["int64_t rows", "int64_t cols"]))
    return f"static void kw_fused_kernel(\n    {params}) {{\n{loop}}}\n", indent


def _cpp(plan: ScaffoldPlan, seg: Segment) -> Scaffold:
    kernel, indent = cpp_kernel(seg)
    tail = "n" if seg.kind == SegmentKind.ELEMENTWISE else "rows, cols"
    launch = f"    kw_fused_kernel({_ptr_args(seg)}, {tail});\n"
    _, host = _host(seg, "device().is_cpu()", launch)
    kernel_prog, kernel_view = _marked(kernel, indent, "//")
    src = f"#include <torch/extension.h>\n#include <cmath>\n#include <algorithm>\n\n{kernel_prog}\n{host}"
    name = _ext_name(plan, "cpp")
    kernel_part = (f'KW_CPP_SOURCE = r"""\n{src}"""\n\n'
                   f'kw_ext = load_inline(name="{name}", cpp_sources=KW_CPP_SOURCE, functions=["kw_fused_impl"],\n'
                   '                     extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)\n')
    return _load_inline_scaffold(plan, seg, "cpp", kernel_part, kernel_view, indent)


def _load_inline_scaffold(plan: ScaffoldPlan, seg: Segment, target: str, kernel_part: str, kernel_view: str,
                          indent: str) -> Scaffold:
    """The Python around a load_inline extension (CUDA and CPU C++ alike): imports, the wrapper
    that shapes inputs and output, ModelNew."""
    call = f"kw_ext.kw_fused_impl({', '.join(['x'] + _ext_args(seg))})"
    header = "import math\n\nimport torch\nfrom torch.utils.cpp_extension import load_inline\n"
    program = _assemble_program(plan, header, kernel_part, _wrapper(seg, call))
    default = ("// (empty: y stays x)" if seg.kind == SegmentKind.ELEMENTWISE else
               "// (empty: y stays 0)" if seg.per_row_output else "// (empty)")
    return _scaffold(plan, seg, target, program, kernel_view, indent, default, target)


# ---- Triton --------------------------------------------------------------------------------------

def _tri_index(a: KernelArg, flat: str) -> Optional[str]:
    if a.pattern == "same":
        return flat
    if a.pattern == "scalar":
        return None
    return f"(({flat}) // {a.name}_inner) % {a.name}_span"


def _tri_loads(seg: Segment, flat: str, indent: str) -> str:
    out = []
    for a in seg.args:
        idx = _tri_index(a, flat)
        if idx is None:
            out.append(f"{indent}{a.name} = tl.load({a.name}_ptr).to(tl.float32)")
        else:
            out.append(f"{indent}{a.name} = tl.load({a.name}_ptr + {idx}, mask=mask, other=0.0).to(tl.float32)")
    return "\n".join(out) + "\n"


def triton_kernel(seg: Segment) -> tuple[str, str]:
    """(`@triton.jit` kernel with PLACEHOLDER where the region goes, the region's indent): the
    skeleton's and the pre-check's."""
    params = []
    for a in seg.args:
        params.append(f"{a.name}_ptr")
        if a.pattern == "broadcast":
            params += [f"{a.name}_inner", f"{a.name}_span"]
    params.append("out_ptr")
    indent = "    "
    if seg.kind == SegmentKind.ELEMENTWISE:
        return ("@triton.jit\n"
                f"def kw_fused_kernel({', '.join(params)}, n, BLOCK: tl.constexpr):\n"
                "    pid = tl.program_id(0).to(tl.int64)\n"
                "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n"
                "    mask = offs < n\n"
                f"{_tri_loads(seg, 'offs', indent)}"
                "    y = x\n"
                f"{indent}{PLACEHOLDER}\n"
                "    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)\n"), indent
    store = ("    tl.store(out_ptr + row, y.to(out_ptr.dtype.element_ty))\n" if seg.per_row_output else
             "    tl.store(out_ptr + row * cols + offs, y.to(out_ptr.dtype.element_ty), mask=mask)\n")
    return ("@triton.jit\n"
            f"def kw_fused_kernel({', '.join(params)}, cols, BLOCK: tl.constexpr):\n"
            "    row = tl.program_id(0).to(tl.int64)\n"
            "    offs = tl.arange(0, BLOCK)\n"
            "    mask = offs < cols\n"
            f"{_tri_loads(seg, 'row * cols + offs', indent)}"
            + ("    y = tl.sum(x * 0.0, axis=0)\n" if seg.per_row_output else "    y = x\n")
            + f"{indent}{PLACEHOLDER}\n" + store), indent


def _triton(plan: ScaffoldPlan, seg: Segment) -> Scaffold:
    kernel, indent = triton_kernel(seg)
    if seg.kind == SegmentKind.ELEMENTWISE:
        launch = ("    n = x.numel()\n"
                  f"    out = torch.empty(n, device=x.device, dtype={PY_DTYPES[seg.out_dtype]})\n"
                  f"    kw_fused_kernel[(triton.cdiv(n, {TRITON_BLOCK}),)]({{args}}, out, n, BLOCK={TRITON_BLOCK})\n")
        default = "# (empty: y stays x)"
    else:
        size = "rows" if seg.per_row_output else "rows * cols"
        launch = ("    rows = x.numel() // cols\n"
                  f"    out = torch.empty({size}, device=x.device, dtype={PY_DTYPES[seg.out_dtype]})\n"
                  "    block = triton.next_power_of_2(cols)\n"
                  "    warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)\n"
                  "    kw_fused_kernel[(rows,)]({args}, out, cols, BLOCK=block, num_warps=warps)\n")
        default = "# (empty)"
    kernel_prog, kernel_view = _marked(kernel, indent, "#")
    args = ", ".join(["x"] + [p for a in seg.extras for p in
                              ([a.name, f"{a.name}_inner", f"{a.name}_span"] if a.pattern == "broadcast"
                               else [a.name])])
    launcher = ("def kw_launch(x, " + ", ".join(
        [p for a in seg.extras for p in ([a.name, f"{a.name}_inner", f"{a.name}_span"]
                                         if a.pattern == "broadcast" else [a.name])]
        + (["cols"] if seg.kind == SegmentKind.ROW else [])) + "):\n").replace("(x, )", "(x)")
    launcher += launch.replace("{args}", args) + "    return out\n"
    header = "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n"
    call = f"kw_launch({', '.join(['x'] + _ext_args(seg))})"
    program = _assemble_program(plan, header, kernel_prog + "\n\n" + launcher, _wrapper(seg, call))
    return _scaffold(plan, seg, "triton", program, kernel_view, indent, default, "python")


# ---- several regions, one build ------------------------------------------------------------------

KERNEL_HEAD = {"cuda": "__global__ void kw_fused_kernel(", "cpp": "static void kw_fused_kernel("}
_DECL = re.compile(r"torch::Tensor kw_fused_impl\(([^)]*)\)")


def shared_programs(sc: Scaffold, regions: list[str]) -> Optional[list[str]]:
    """One program per region, all with one extension: every region's kernel and host function in
    namespace kw_v<i> of the same sources, a binding kw_fused_impl_v<i> for each, and program i
    calling binding i. The load_inline arguments are identical across the programs, so the trusted
    builder compiles them once (a build of 20-60 s serves every region) and each program is then
    evaluated on its own. None where there is nothing to share: Triton (compiled at launch), fewer
    than two regions, or a scaffold not written by this module."""
    head = KERNEL_HEAD.get(sc.target)
    decl = _DECL.search(sc.program)
    if head is None or len(regions) < 2 or decl is None or head not in sc.program:
        return None
    program = sc.program
    start = program.index(head)
    end = program.index('"""', start)
    chunk = program[start:end]  # the kernel and its host function, region at the placeholder
    params = decl.group(1)
    names = ", ".join(p.split()[-1] for p in params.split(","))
    variants, bindings, decls = [], [], []
    for i, region in enumerate(regions):
        body = sc.with_region(chunk, region)
        variants.append(f"namespace kw_v{i} {{\n{body}}}  // namespace kw_v{i}\n")
        decls.append(f"namespace kw_v{i} {{ torch::Tensor kw_fused_impl({params}); }}")
        bindings.append(f"torch::Tensor kw_fused_impl_v{i}({params}) {{ return kw_v{i}::kw_fused_impl({names}); }}")
    shared = program[:start] + "\n".join(variants) + program[end:]
    if sc.target == "cuda":  # the host functions live in the CUDA object; bind them from cpp_sources
        shared = shared.replace(decl.group(0) + ";", "\n".join(decls + bindings), 1)
    else:  # one C++ source: the bindings follow the namespaces
        at = shared.index('"""', shared.index(f"namespace kw_v{len(regions) - 1} {{"))
        shared = shared[:at] + "\n".join(bindings) + "\n" + shared[at:]
    digest = hashlib.sha256("\0".join(regions).encode()).hexdigest()[:8]
    functions = "[" + ", ".join(f'"kw_fused_impl_v{i}"' for i in range(len(regions))) + "]"
    shared = re.sub(r'load_inline\(name="(kw_\w+)"', lambda m: f'load_inline(name="{m.group(1)}_s{digest}"',
                    shared, count=1)
    shared = shared.replace('functions=["kw_fused_impl"]', f"functions={functions}", 1)
    return [shared.replace("kw_ext.kw_fused_impl(", f"kw_ext.kw_fused_impl_v{i}(", 1) for i in range(len(regions))]
