"""The CPU C++ skeleton (`load_inline`): `#pragma omp parallel for` over blocks of elements (or over
rows), within a block an `omp simd` loop the compiler vectorises, glibc's vector math declared, the
kernel cloned per instruction set (`cpp_build`).
"""

from __future__ import annotations

import dataclasses
import itertools

from kernelwright.scaffold.types import KernelArg, Scaffold, ScaffoldPlan, Segment, SegmentKind
from kernelwright.scaffold.writers.base import PLACEHOLDER, ext_name, marked_kernel
from kernelwright.scaffold.writers.clike import (
    C_TYPES,
    C_WORDS,
    LoadInlineWriter,
    c_index,
    c_params,
    host_function,
    ptr_args,
    row_output,
)

# Elements a block of the C++ elementwise loop: one thread's share at a time, its loop vectorised.
CPP_BLOCK = 4096


def _cpp_blocks(seg: Segment) -> str:
    """The C++ elementwise loop runs in blocks within which each broadcast input is one value (its
    index's `i / inner` the same) or a run of consecutive values (`inner` 1): its index is worked
    out once a block, not with a division and a remainder an element, and the element loop
    vectorises (with the vector math of `_cpp`). Blocks stay within chunks of kw_g elements, kw_g
    dividing n and every broadcast input's run; a chunk longer than CPP_BLOCK is cut in kw_parts."""
    lines = ["    int64_t kw_g = n;  // the greatest common divisor of n and every broadcast input's run\n"]
    for a in seg.args:
        if a.pattern == "broadcast":
            lines.append(f"    for (int64_t kw_r = {a.name}_inner > 1 ? {a.name}_inner : {a.name}_span; kw_r != 0;) "
                         "{ const int64_t kw_m = kw_g % kw_r; kw_g = kw_r; kw_r = kw_m; }\n")
    lines.append(f"    const int64_t kw_parts = (kw_g + {CPP_BLOCK - 1}) / {CPP_BLOCK};\n")
    return "".join(lines)


def _cpp_block_starts(seg: Segment) -> str:
    """Per block, where each broadcast input's values start and whether they move with the element."""
    out = []
    for a in seg.args:
        if a.pattern == "broadcast":
            n = a.name
            out.append(f"        const int64_t kw_{n}_at = {n}_inner > 1 ? (kw_s / {n}_inner) % {n}_span : "
                       f"kw_s % {n}_span;\n        const int64_t kw_{n}_step = {n}_inner > 1 ? 0 : 1;\n")
    return "".join(out)


def _c_flat_load(a: KernelArg, kind: SegmentKind, indent: str) -> str:
    """An input read at its flat index (`i`, or `row * cols + j` through an accessor): what the
    model is shown of every input (`cpp_view`), and the program's load of one not broadcast."""
    if kind == SegmentKind.ELEMENTWISE:
        return f"{indent}const float {a.name} = static_cast<float>({a.name}_ptr[{c_index(a, 'i')}]);\n"
    return (f"{indent}auto {a.name} = [&](int64_t j) -> float {{ return static_cast<float>("
            f"{a.name}_ptr[{c_index(a, 'row * cols + j')}]); }};\n")


def _c_loads(seg: Segment, indent: str) -> str:
    """The program's loads: a broadcast input from where its block (elementwise) or its row starts."""
    out = []
    for a in seg.args:
        if a.pattern != "broadcast":
            out.append(_c_flat_load(a, seg.kind, indent))
        elif seg.kind == SegmentKind.ELEMENTWISE:
            out.append(f"{indent}const float {a.name} = static_cast<float>("
                       f"{a.name}_ptr[kw_{a.name}_at + kw_t * kw_{a.name}_step]);\n")
        else:
            out.append(_c_row_load(a, indent))
    return "".join(out)


def _c_row_load(a: KernelArg, indent: str) -> str:
    """A C++ row kernel's accessor of a broadcast input: one value a row or a vector along it (the
    wrapper's layout given the row length, `_kw_bcast`), so its row's values start at one place and
    step 0 or 1, as CUDA's kw_row_vec: no division and remainder an element, which kept the model's
    loops over the row from vectorising."""
    return _c_row_start(a, indent) + _c_row_accessor(a, indent, f"kw_step_{a.name}")


def _c_row_start(a: KernelArg, indent: str) -> str:
    """Where a broadcast input's values for this row start (`kw_row_<name>`) and their step, 0 or 1
    (`kw_step_<name>`, the same for every row)."""
    n = a.name
    return (f"{indent}const int64_t kw_step_{n} = {n}_inner % cols == 0 ? 0 : 1;\n"
            f"{indent}const {C_TYPES[a.dtype]}* kw_row_{n} = {n}_ptr + "
            f"(kw_step_{n} == 0 ? row * cols / {n}_inner : row * cols) % {n}_span;\n")


def _c_row_accessor(a: KernelArg, indent: str, step: str) -> str:
    """The region's accessor of a broadcast input: its row's value at j, `step` apart."""
    return (f"{indent}auto {a.name} = [&](int64_t j) -> float {{ return static_cast<float>("
            f"kw_row_{a.name}[j * {step}]); }};\n")



CPP_ROW_PARALLEL_MIN = 32768
# Broadcast inputs up to which a row's body is compiled for each combination of their steps
CPP_STEP_COMBINATIONS = 2


def _cpp_row_body(seg: Segment, indent: str) -> tuple[str, str]:
    """(the row loop's body with PLACEHOLDER, the region's indent). A broadcast input's row steps 0
    or 1 (`_c_row_load`), the same for every row; read through a runtime step, its loads kept the
    region's loop from vectorising but 16 bytes at a time (L1/08 LayerNorm's weight and bias: GCC
    built each vector of them from scalar loads). So the body is a generic lambda taking each
    step as a value: called with `std::integral_constant` steps for every combination (up to
    CPP_STEP_COMBINATIONS broadcast inputs: 2^k instantiations of the region), the accessor is a
    plain load at j or one value a row; with more, the body reads through the runtime steps."""
    bcast = [a for a in seg.args if a.pattern == "broadcast"]
    if not bcast or len(bcast) > CPP_STEP_COMBINATIONS:  # the steps at run time, in the row loop's body
        y_decl, y_store = row_output(seg, indent, "")
        return f"{_c_loads(seg, indent)}{y_decl}{indent}{PLACEHOLDER}\n{y_store}", indent
    y_decl, y_store = row_output(seg, indent + "    ", "")
    inner = indent + "    "
    rows = "".join(_c_row_start(a, indent) for a in bcast)
    loads = "".join(_c_flat_load(a, seg.kind, inner) if a.pattern != "broadcast" else
                    _c_row_accessor(a, inner, f"kw_s_{a.name}") for a in seg.args)
    params = ", ".join(f"auto kw_s_{a.name}" for a in bcast)
    body = (f"{rows}{indent}auto kw_row_body = [&]({params}) {{\n{loads}{y_decl}{inner}{PLACEHOLDER}\n{y_store}"
            f"{indent}}};\n")
    calls = []
    for steps in itertools.product((0, 1), repeat=len(bcast)):
        test = " && ".join(f"kw_step_{a.name} == {v}" for a, v in zip(bcast, steps))
        args = ", ".join(f"std::integral_constant<int64_t, {v}>{{}}" for v in steps)
        calls.append(f"if ({test}) kw_row_body({args});")
    return body + indent + "\n".join(calls[:1] + [indent + "else " + c for c in calls[1:]]) + "\n", inner


def cpp_kernel(seg: Segment) -> tuple[str, str]:
    """(kernel with PLACEHOLDER where the region goes, the region's indent): the skeleton's and the
    pre-check's."""
    indent = "        "
    if seg.kind == SegmentKind.ELEMENTWISE:
        indent = "            "
        loop = (f"{_cpp_blocks(seg)}"
                "    #pragma omp parallel for if (n > 65536)\n"
                "    for (int64_t kw_b = 0; kw_b < n / kw_g * kw_parts; ++kw_b) {\n"
                f"        const int64_t kw_s = kw_b / kw_parts * kw_g + kw_b % kw_parts * {CPP_BLOCK};\n"
                f"        const int64_t kw_len = kw_g - kw_b % kw_parts * {CPP_BLOCK} < {CPP_BLOCK} ? "
                f"kw_g - kw_b % kw_parts * {CPP_BLOCK} : {CPP_BLOCK};\n"
                f"{_cpp_block_starts(seg)}"
                "        #pragma omp simd\n"
                "        for (int64_t kw_t = 0; kw_t < kw_len; ++kw_t) {\n"
                "            const int64_t i = kw_s + kw_t;\n"
                f"{_c_loads(seg, indent)}"
                "            float y = x;\n"
                f"{indent}{PLACEHOLDER}\n"
                f"            out_ptr[i] = static_cast<{C_TYPES[seg.out_dtype]}>(y);\n"
                "        }\n"
                "    }\n")
    else:
        body, indent = _cpp_row_body(seg, indent)
        # rows in parallel from PyTorch's own grain (at::internal::GRAIN_SIZE, 32768 values), as its
        # softmax and norms split rows: a row region's passes are several times an elementwise op's
        # work, and at 64 x 1000 eager's softmax ran on both cores while the kernel ran on one
        # (0.016 against 0.039 ms; 0.024 in parallel). The view keeps what it showed.
        loop = (f"    #pragma omp parallel for if (rows * cols > {CPP_ROW_PARALLEL_MIN})\n"
                "    for (int64_t row = 0; row < rows; ++row) {\n"
                f"{body}"
                "    }\n")
    params = ",\n    ".join(c_params(seg) + (["int64_t n"] if seg.kind == SegmentKind.ELEMENTWISE
                                                 else ["int64_t rows", "int64_t cols"]))
    return f"static void kw_fused_kernel(\n    {params}) {{\n{CPP_MIN_MAX}{loop}}}\n", indent


# fminf/fmaxf (and fmin/fmax) as the C library defines them (a NaN argument gives the other one),
# written as a comparison and a select, and named so in the kernel's scope that the region's calls
# find these first: the library's are calls GCC does not vectorise (x86's min/max instructions
# treat NaN otherwise), and one such call, in a clamp or a ReLU, kept the whole loop scalar.
CPP_MIN_MAX = ("    [[maybe_unused]] auto fminf = [](float a, float b) { return (a < b || b != b) ? a : b; };\n"
               "    [[maybe_unused]] auto fmaxf = [](float a, float b) { return (a > b || b != b) ? a : b; };\n"
               "    [[maybe_unused]] auto fmin = [](double a, double b) { return (a < b || b != b) ? a : b; };\n"
               "    [[maybe_unused]] auto fmax = [](double a, double b) { return (a > b || b != b) ? a : b; };\n")


def cpp_view(seg: Segment) -> str:
    """The C++ kernel as the model is shown it: one loop over the elements (or the rows) with the
    names the region sees, each input read at its flat index, as every C++ prompt showed it before
    the program's loop ran in blocks (`_cpp_blocks`) and its row accessors stepped (`_c_row_load`),
    so recorded prompts and answers stay comparable."""
    indent = "        "
    loads = "".join(_c_flat_load(a, seg.kind, indent) for a in seg.args)
    if seg.kind == SegmentKind.ELEMENTWISE:
        params = ",\n    ".join(c_params(seg) + ["int64_t n"])
        return (f"static void kw_fused_kernel(\n    {params}) {{\n"
                "    #pragma omp parallel for if (n > 65536)\n"
                "    for (int64_t i = 0; i < n; ++i) {\n"
                f"{loads}"
                "        float y = x;\n"
                f"{indent}{PLACEHOLDER}\n"
                f"        out_ptr[i] = static_cast<{C_TYPES[seg.out_dtype]}>(y);\n"
                "    }\n}\n")
    y_decl, y_store = row_output(seg, indent, "")
    params = ",\n    ".join(c_params(seg) + ["int64_t rows", "int64_t cols"])
    return (f"static void kw_fused_kernel(\n    {params}) {{\n"
            "    #pragma omp parallel for if (rows * cols > 65536)\n"
            "    for (int64_t row = 0; row < rows; ++row) {\n"
            f"{loads}{y_decl}{indent}{PLACEHOLDER}\n{y_store}"
            "    }\n}\n")


# The math functions that glibc's vector library (libmvec, x86-64, glibc 2.35 or later) has in
# SSE, AVX, AVX2 and AVX-512 versions for float and double: declared so, GCC calls them from a
# vectorised loop. <math.h> declares them so only under -ffast-math, which would also drop NaN and
# infinity semantics the references keep. The example's fused bias + GELU on the 2-core CPU
# (16K floats, AVX-512), the extension's call: 94 us with a scalar erff and a division an element,
# 20 us vectorised, 9.5 us with float literals too (eager's add and GELU: 10.5 us).
LIBMVEC = ("sin", "cos", "exp", "log", "pow", "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt",
           "cosh", "erf", "erfc", "exp10", "exp2", "expm1", "hypot", "log10", "log1p", "log2", "sinh", "tan", "tanh")
TWO_ARGS = ("pow", "atan2", "hypot")


def _vector_math() -> str:
    decls = []
    for f in LIBMVEC:
        for t, suffix in (("double", ""), ("float", "f")):
            args = f"{t}, {t}" if f in TWO_ARGS else t
            decls.append(f"KW_SIMD {t} {f}{suffix}({args}) noexcept;")
    rows = [" ".join(decls[k:k + 4]) for k in range(0, len(decls), 4)]
    return ("#ifdef KW_VECTOR_MATH  // set where glibc's libmvec has these (cpp_build)\n"
            "#define KW_SIMD __attribute__((__simd__(\"notinbranch\")))\nextern \"C\" {\n" + "\n".join(rows)
            + "\n}\n#endif\n")


CPP_VECTOR_MATH = _vector_math()


def cpp_build() -> tuple[list[str], list[str], str]:
    """(cflags, ldflags, the kernel's attribute) of the C++ skeleton's build, decided where the
    program is written and written into it as literals: the trusted builder builds only a
    `load_inline` whose arguments are literals (evaluate/buildspec.py), and flags computed at import
    made every C++ candidate build in its own worker, unshared. Sums are reassociated (vector partial
    sums, as any parallel reduction); NaN and infinities keep their meaning (no -ffinite-math-only).
    The vector math where glibc has libmvec (x86-64, 2.35 or later). The instruction set is chosen
    at load time, not here: on x86-64 the kernel is cloned for AVX-512 (x86-64-v4), AVX2
    (x86-64-v3) and the baseline, and the loader runs the one this CPU has (GCC's target_clones),
    so a program written on one machine runs on any x86-64."""
    import platform

    cflags = ["-O3", "-fopenmp", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math"]
    ldflags = ["-fopenmp"]
    attribute = ""
    if platform.machine() == "x86_64":
        attribute = '__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))\n'
        libc, version = platform.libc_ver()
        if libc == "glibc" and tuple(int(v) for v in version.split(".")[:2]) >= (2, 35):
            cflags.append("-DKW_VECTOR_MATH")
            ldflags.append("-lmvec")
    return cflags, ldflags, attribute


class CppWriter(LoadInlineWriter):
    target = "cpp"
    math_column = 0
    kernel_head = "static void kw_fused_kernel("
    bind_in_cpp_sources = False
    # without the loop the 1.5B model summed a row of 12544 values as `x(0) + x(1) + ... + x(63)` or
    # `y += x(0); y += x(1); // ...` (H200: 0 of 32 for a mean over dims (2, 3))
    words = dataclasses.replace(C_WORDS, row_loop=("loop over the row: `for (int64_t j = 0; j < cols; ++j)`",))

    def write(self, plan: ScaffoldPlan, seg: Segment) -> Scaffold:
        kernel, indent = cpp_kernel(seg)
        tail = "n" if seg.kind == SegmentKind.ELEMENTWISE else "rows, cols"
        launch = f"    kw_fused_kernel({ptr_args(seg)}, {tail});\n"
        _, host = host_function(seg, "device().is_cpu()", launch)
        kernel_prog, kernel_view = marked_kernel(kernel, indent, "//", cpp_view(seg))
        cflags, ldflags, attribute = cpp_build()
        kernel_prog = kernel_prog.replace("static void kw_fused_kernel(", f"{attribute}static void kw_fused_kernel(", 1)
        src = f"#include <torch/extension.h>\n#include <cmath>\n#include <algorithm>\n{CPP_VECTOR_MATH}\n{kernel_prog}\n{host}"
        name = ext_name(plan, "cpp")
        kernel_part = (f'KW_CPP_SOURCE = r"""\n{src}"""\n\n'
                       f'kw_ext = load_inline(name="{name}", cpp_sources=KW_CPP_SOURCE, functions=["kw_fused_impl"],\n'
                       f'                     extra_cflags={cflags!r},\n'
                       f'                     extra_ldflags={ldflags!r}, verbose=False)\n')
        return self.finish(plan, seg, kernel_part, kernel_view, indent)
