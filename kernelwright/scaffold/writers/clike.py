"""What the two `load_inline` writers share (CUDA and CPU C++): C types, the kernel's parameters,
the host function `kw_fused_impl` (input checks, contiguity, output allocation), the Python around
the extension, the math line, and several regions in one extension (`shared_programs`)."""

from __future__ import annotations

import hashlib
import re
from typing import Optional

from kernelwright.scaffold.types import KernelArg, Scaffold, ScaffoldPlan, Segment, SegmentKind
from kernelwright.scaffold.writers.base import (
    RegionWords,
    assemble_program,
    ext_args,
    launch_line,
    make_scaffold,
    region_words,
    segment_wrapper,
    variables,
)

C_TYPES = {"float32": "float", "float16": "at::Half", "bfloat16": "at::BFloat16"}
TORCH_DTYPES = {"float32": "torch::kFloat32", "float16": "torch::kHalf", "bfloat16": "torch::kBFloat16"}
# The math a region may call: only the functions the region's own lines and definitions name (a
# word -> (C++ name, CUDA name)). Listing all of them made the 1.5B model call them one after
# another in 11 of 27 regions (docs/results/scaffold-math-line-cpu.md); the list of what is needed
# did that in none (Triton's likewise: triton.TRITON_NEEDS).
C_MATH = {
    "exp": ("std::exp", "expf"), "log": ("std::log", "logf"), "log1p": ("std::log1p", "log1pf"),
    "sqrt": ("std::sqrt", "sqrtf"), "rsqrt": ("std::sqrt", "rsqrtf"), "tanh": ("std::tanh", "tanhf"),
    "erf": ("std::erf", "erff"), "max": ("std::fmax", "fmaxf"), "min": ("std::fmin", "fminf"),
    "clamp": ("std::fmin, std::fmax", "fminf, fmaxf"), "abs": ("std::fabs", "fabsf"), "pow": ("std::pow", "powf"),
    # named inside another op's definition (mish), whose own definition is then not shown
    "softplus": ("std::exp, std::log", "expf, logf"),
}
NO_HELPERS = "there are no relu/sigmoid/gelu functions"


def c_math_line(seg: Segment, column: int) -> str:
    """The prompt's line on the math functions the region may call; `column`: C_MATH's spelling (0 C++,
    1 CUDA)."""
    words = region_words(seg)
    names: list[str] = []
    for word, spellings in C_MATH.items():
        if word in words:
            names += [n for n in spellings[column].split(", ") if n not in names]
    if not names:
        return f"no math function is needed here ({NO_HELPERS})"
    return f"the math functions these lines need: {', '.join(names)} ({NO_HELPERS})"


def c_params(seg: Segment, pointer_suffix: str = "_ptr") -> list[str]:
    out = []
    for a in seg.args:
        out.append(f"const {C_TYPES[a.dtype]}* __restrict__ {a.name}{pointer_suffix}")
        if a.pattern == "broadcast":
            out += [f"int64_t {a.name}_inner", f"int64_t {a.name}_span"]
    out.append(f"{C_TYPES[seg.out_dtype]}* __restrict__ out_ptr")
    return out


def c_index(a: KernelArg, flat: str) -> str:
    """An input's index for flat position `flat`, spelled out (C++, and the view the model is shown;
    CUDA's kernels find it through kw_bcast_run / kw_row_at)."""
    if a.pattern == "same":
        return flat
    if a.pattern == "scalar":
        return "0"
    return f"(({flat}) / {a.name}_inner) % {a.name}_span"



def host_function(seg: Segment, device_check: str, launch: str, knobs: tuple[str, ...] = ()) -> tuple[str, str]:
    """(declaration, definition) of the host function `kw_fused_impl`; `knobs` are its launch
    settings (`kw_<knob>`, from the program's KW_LAUNCH)."""
    params = ["torch::Tensor x"]
    for a in seg.extras:
        params.append(f"torch::Tensor {a.name}")
        if a.pattern == "broadcast":
            params += [f"int64_t {a.name}_inner", f"int64_t {a.name}_span"]
    if seg.kind == SegmentKind.ROW:
        params.append("int64_t cols")
    params += [f"int64_t kw_{k}" for k in knobs]
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


def row_output(seg: Segment, indent: str, guard: str) -> tuple[str, str]:
    """(declaration before the region, store after it) of a row kernel's output: a float `y` for
    one value per row, a pointer to the row for a whole row."""
    t = C_TYPES[seg.out_dtype]
    if seg.per_row_output:
        return f"{indent}float y = 0.0f;\n", f"{indent}{guard}out_ptr[row] = static_cast<{t}>(y);\n"
    return f"{indent}{t}* y = out_ptr + row * cols;\n", ""


def ptr_args(seg: Segment) -> str:
    """The kernel's arguments from the host function."""
    out = []
    for a in seg.args:
        out.append(f"{a.name}.data_ptr<{C_TYPES[a.dtype]}>()")
        if a.pattern == "broadcast":
            out += [f"{a.name}_inner", f"{a.name}_span"]
    out.append(f"out.data_ptr<{C_TYPES[seg.out_dtype]}>()")
    return ", ".join(out)


# The C targets' words for what the region reads and writes; each writer adds its own row lines.
C_WORDS = RegionWords(value="float", element="this element's value of",
                      elementwise_y="`y` (already set to x): assign the result to it",
                      row_input="`{name}(j)` (float): column j of this row of {describe}", row_loop=(),
                      per_row_y="`y` (a float, already 0): assign the row's one result to it",
                      row_y="write `y[j]` for every column j of the row")
_DECL = re.compile(r"torch::Tensor kw_fused_impl\(([^)]*)\)")


class LoadInlineWriter:
    """A target whose program is one `load_inline` extension: the kernel's module and the Python
    around it. Subclasses write the kernel part (`write`) and say how the kernel's line starts
    (`kernel_head`) and where the bindings of several regions go (`bind_in_cpp_sources`)."""

    target: str
    kinds = (SegmentKind.ELEMENTWISE, SegmentKind.ROW)
    math_column: int
    words: RegionWords
    kernel_head: str
    # CUDA: the host functions live in the CUDA object, bound from cpp_sources; C++: one source
    bind_in_cpp_sources: bool

    def default_launch(self, seg: Segment) -> dict[str, int]:
        return {}

    def launch_grid(self, seg: Segment) -> list[dict[str, int]]:
        return []

    def finish(self, plan: ScaffoldPlan, seg: Segment, kernel_part: str, kernel_view: str, indent: str) -> Scaffold:
        """The Python around a load_inline extension (CUDA and CPU C++ alike): imports, the wrapper
        that shapes inputs and output, ModelNew."""
        launch = self.default_launch(seg)
        knobs = [f'KW_LAUNCH["{k}"]' for k in launch]
        call = f"kw_ext.kw_fused_impl({', '.join(['x'] + ext_args(seg) + knobs)})"
        if launch:
            kernel_part += f"\n{launch_line(launch)}\n"
        header = "import math\n\nimport torch\nfrom torch.utils.cpp_extension import load_inline\n"
        program = assemble_program(plan, header, kernel_part, segment_wrapper(seg, call))
        default = ("// (empty: y stays x)" if seg.kind == SegmentKind.ELEMENTWISE else
                   "// (empty: y stays 0)" if seg.per_row_output else "// (empty)")
        return make_scaffold(plan, seg, self.target, program, kernel_view, indent, default, self.target,
                             variables(seg, self.words, c_math_line(seg, self.math_column)))

    def shared_programs(self, sc: Scaffold, regions: list[str]) -> Optional[list[str]]:
        """One program per region, all with one extension: every region's kernel and host function in
        namespace kw_v<i> of the same sources, a binding kw_fused_impl_v<i> for each, and program i
        calling binding i. The load_inline arguments are identical across the programs, so the trusted
        builder compiles them once (a build of 20-60 s serves every region) and each program is then
        evaluated on its own. None for fewer than two regions, or a program whose kernel and host
        function are not where this writer puts them."""
        head = self.kernel_head
        decl = _DECL.search(sc.program)
        if len(regions) < 2 or decl is None or head not in sc.program:
            return None
        program = sc.program
        start = program.index(head)
        attribute = program.rfind("\n", 0, start - 1) + 1
        if program[attribute:start].startswith("__attribute__"):  # the kernel's own line (cpp_build) goes with it
            start = attribute
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
        if self.bind_in_cpp_sources:
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
