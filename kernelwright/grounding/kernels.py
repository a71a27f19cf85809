"""C++/CUDA rewrites for grounding: the hallucination tables and the code generators.

Each function here looks at one source text and returns `Fix`es (offsets into that text, the new text
and a message) or `Problem`s (what it could not fix, said so the model can fix it). They do not know
about Python; `grounding_sources` maps the fixes back onto the string literals they came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from kernelwright.grounding import env
from kernelwright.grounding.cxx import (
    CFunction,
    Param,
    mask,
    parse_params,
    scan_functions,
    split_args,
)


@dataclass(frozen=True)
class Fix:
    start: int
    end: int
    text: str
    message: str
    at: int  # offset the message is about (for its line)


@dataclass(frozen=True)
class Problem:
    message: str
    at: Optional[int] = None


# Functions small models call in device code that CUDA does not have, and what they mean for a float.
# `{0}` is the argument; it may appear twice, so only side-effect-free arguments are rewritten.
DEVICE_FLOAT_FUNCTIONS: dict[str, str] = {
    "relu": "fmaxf({0}, 0.0f)",
    "relu6": "fminf(fmaxf({0}, 0.0f), 6.0f)",
    "sigmoid": "(1.0f / (1.0f + expf(-({0}))))",
    "silu": "(({0}) / (1.0f + expf(-({0}))))",
    "swish": "(({0}) / (1.0f + expf(-({0}))))",
    "gelu": "(0.5f * ({0}) * (1.0f + erff(({0}) * 0.70710678118654752f)))",  # erf form, torch's default
}
# Namespaces the same hallucination comes with (`torch::relu(x)` on a float in a kernel).
_DEVICE_QUALIFIERS = r"(?:torch::|at::|std::|torch\.|F\.|torch::nn::functional::)?"
_NOT_FLOAT = re.compile(r"\b(?:double|half|__half|__half2|bfloat16|__nv_bfloat16|scalar_t|template|c10::Half|"
                        r"c10::BFloat16|at::Half|at::BFloat16)\b")
_IMPURE = re.compile(r"\+\+|--|(?<![=!<>])=(?!=)|\+=|-=|\*=|/=")

# Python spellings of torch dtypes -> their C++ constants.
_DTYPES = {"float32": "kFloat32", "float": "kFloat", "float16": "kFloat16", "half": "kHalf", "bfloat16": "kBFloat16",
           "float64": "kFloat64", "double": "kDouble", "int32": "kInt32", "int": "kInt", "int64": "kInt64",
           "long": "kLong", "int16": "kInt16", "int8": "kInt8", "uint8": "kUInt8", "bool": "kBool"}


def device_bodies(src: str) -> list[CFunction]:
    return [f for f in scan_functions(src) if f.kind in ("global", "device") and f.body is not None]


def _device_pattern() -> re.Pattern[str]:
    names = "|".join(sorted(DEVICE_FLOAT_FUNCTIONS, key=len, reverse=True))
    return re.compile(rf"(?<![\w.>:]){_DEVICE_QUALIFIERS}(?P<name>{names})\s*\(")


def _hallucinated(m: re.Match[str], defined: set[str]) -> bool:
    qualified = m.start("name") > m.start()
    return qualified or m.group("name") not in defined  # an unqualified name the candidate defined is its own


def _rewrite_expression(expr: str, defined: set[str]) -> Optional[str]:
    """`expr` with every table call in it rewritten, innermost first; None when one cannot be."""
    masked, out, pos = mask(expr), [], 0
    for m in _device_pattern().finditer(masked):
        if m.start() < pos or not _hallucinated(m, defined):
            continue
        parsed = split_args(masked, m.end() - 1)
        if parsed is None or len(parsed[1]) != 1:
            return None
        close, ((a, b),) = parsed
        inner = _rewrite_expression(expr[a:b].strip(), defined)
        if inner is None or _IMPURE.search(mask(inner)):
            return None
        out += [expr[pos:m.start()], DEVICE_FLOAT_FUNCTIONS[m.group("name")].format(inner)]
        pos = close + 1
    return "".join(out + [expr[pos:]])


def device_function_fixes(src: str, defined: set[str]) -> tuple[list[Fix], list[Problem]]:
    """Calls in __global__/__device__ bodies to functions CUDA lacks (`relu(x)`), rewritten for float
    kernels when the name is defined nowhere in the sources (nested calls are rewritten together)."""
    masked = mask(src)
    fixes, problems = [], []
    for fn in device_bodies(src):
        body_a, body_b = fn.body  # type: ignore[misc]
        floaty = not _NOT_FLOAT.search(masked[fn.start:body_b]) and "float" in masked[fn.start:body_b]
        end = body_a
        for m in _device_pattern().finditer(masked, body_a, body_b):
            if m.start() < end or not _hallucinated(m, defined):
                continue  # inside a call already handled, or the candidate's own function
            parsed = split_args(masked, m.end() - 1)
            if parsed is None:
                continue
            end = parsed[0] + 1
            call = src[m.start():end]
            spelled = src[m.start():m.end() - 1].strip()
            new = _rewrite_expression(call, defined) if floaty else None
            if new is None:
                why = "the kernel is not float-only" if not floaty else "its argument is not a plain expression"
                problems.append(Problem(f"`{spelled}()` does not exist in CUDA device code; not rewritten because "
                                        f"{why}: write the math yourself (e.g. relu(x) is fmaxf(x, 0.0f) for float)",
                                        m.start()))
                continue
            fixes.append(Fix(m.start(), end, new, f"`{spelled}()` does not exist in CUDA device code: "
                             f"`{call}` -> `{new}`", m.start()))
    return fixes, problems


def python_api_fixes(src: str) -> tuple[list[Fix], list[Problem]]:
    """Python spellings in C++ host code: `torch.relu(x)` -> `torch::relu(x)` (when ATen has the op),
    `torch.float32` -> `torch::kFloat32`, `t.shape[i]` -> `t.size(i)` for tensor parameters."""
    masked = mask(src)
    device = [(f.body[0], f.body[1]) for f in device_bodies(src)]  # type: ignore[misc]
    fixes: list[Fix] = []
    problems: list[Problem] = []
    for m in re.finditer(r"(?<![\w.:>])torch\.(?P<chain>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)", masked):
        if any(a <= m.start() <= b for a, b in device):
            continue  # device code: handled by the device-function table
        chain = m.group("chain")
        called = masked[m.end():].lstrip().startswith("(")
        if "." not in chain and called and env.aten_has(chain):
            fixes.append(Fix(m.start(), m.end(), f"torch::{chain}",
                             f"`torch.{chain}(` is Python; in C++ it is `torch::{chain}(`", m.start()))
        elif "." not in chain and not called and chain in _DTYPES:
            fixes.append(Fix(m.start(), m.end(), f"torch::{_DTYPES[chain]}",
                             f"`torch.{chain}` is Python; in C++ it is `torch::{_DTYPES[chain]}`", m.start()))
        else:
            problems.append(Problem(f"`torch.{chain}` is Python syntax inside C++ source; use the C++ API "
                                    f"(torch::... / at::...)", m.start()))
    fixes += _shape_fixes(src, masked)
    return fixes, problems


def _shape_fixes(src: str, masked: str) -> list[Fix]:
    fixes = []
    for fn in scan_functions(src):
        if fn.kind != "host" or fn.body is None:
            continue
        tensors = [p.strip().split()[-1].lstrip("&*") for p in fn.params.split(",")
                   if re.search(r"\b(?:torch::|at::)?Tensor\b", p) and p.strip()]
        for name in tensors:
            for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\.shape\s*\[\s*(-?\w+)\s*\]", masked[:fn.body[1]]):
                if m.start() > fn.body[0]:
                    new = f"{name}.size({m.group(1)})"
                    fixes.append(Fix(m.start(), m.end(), new, f"`{src[m.start():m.end()]}` is Python; in C++ it "
                                     f"is `{new}`", m.start()))
    return fixes


# --- prototypes --------------------------------------------------------------------------------

_BUILTIN_TYPES = frozenset({"void", "bool", "char", "short", "int", "long", "float", "double", "unsigned", "signed",
                            "const", "auto", "size_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t",
                            "uint16_t", "uint32_t", "uint64_t", "extern", "inline"})
_TORCH_NAMESPACES = ("torch::", "at::", "c10::", "std::")


def prototype(fn: CFunction, sources: list[str]) -> tuple[Optional[str], Optional[str]]:
    """The declaration torch's binding needs, or (None, why not). Bare `Tensor` becomes `torch::Tensor`
    when the sources say `using namespace torch/at` (the binding's file has no such using)."""
    ret = fn.return_type()
    params = " ".join(fn.params.split())
    using_tensor = any(re.search(r"using\s+(?:namespace\s+(?:torch|at)\s*;|(?:torch|at)::Tensor\s*;)", s)
                       for s in sources)
    if using_tensor:
        ret = re.sub(r"(?<![\w:])Tensor\b", "torch::Tensor", ret)
        params = re.sub(r"(?<![\w:])Tensor\b", "torch::Tensor", params)
    unknown = _unknown_types(ret, params)
    if unknown:
        return None, f"its signature uses {', '.join(sorted(unknown))}, which the binding's C++ file cannot see"
    extern_c = 'extern "C" ' if re.search(r'\bextern\s*"C"', fn.head) else ""
    return f"{extern_c}{ret} {fn.name}({params});", None


def _unknown_types(ret: str, params: str) -> set[str]:
    unknown = set()
    for word in re.findall(r"[A-Za-z_][\w]*(?:::[A-Za-z_]\w*)*", _strip_defaults(ret)):
        if word not in _BUILTIN_TYPES and not word.startswith(_TORCH_NAMESPACES):
            unknown.add(word)
    for param in _strip_defaults(params).split(","):
        words = re.findall(r"[A-Za-z_][\w]*(?:::[A-Za-z_]\w*)*", param)
        for word in words[:-1] if len(words) > 1 else words:  # the last word is the parameter's name
            if word not in _BUILTIN_TYPES and not word.startswith(_TORCH_NAMESPACES) and word not in (
                    "__restrict__", "__restrict"):
                unknown.add(word)
    return unknown


def _strip_defaults(params: str) -> str:
    return ",".join(p.split("=")[0] for p in re.sub(r"<[^<>]*>", "", params).split(","))


# --- host launcher for a 1-D elementwise kernel -------------------------------------------------

_INDEX = re.compile(r"\b(?:const\s+)?(?:unsigned\s+int|unsigned|int|long|long\s+long|int64_t|size_t|"
                    r"uint32_t|int32_t)\s+(?P<var>[A-Za-z_]\w*)\s*=\s*(?P<expr>[^;]+);")
_FLAT_INDEX = {"blockIdx.x*blockDim.x+threadIdx.x", "blockDim.x*blockIdx.x+threadIdx.x",
               "threadIdx.x+blockIdx.x*blockDim.x", "threadIdx.x+blockDim.x*blockIdx.x"}
_NOT_1D = re.compile(r"\b(?:threadIdx|blockIdx|blockDim|gridDim)\.[yz]\b|__shared__|__syncthreads|\bgridDim\b|"
                     r"\bwarpSize\b|__shfl|atomic\w*\s*\(|\bfor\s*\(|\bwhile\s*\(")
_ELEMENT_TYPES = {"float": "torch::kFloat", "double": "torch::kDouble", "int": "torch::kInt",
                  "int32_t": "torch::kInt", "int64_t": "torch::kLong", "long": "torch::kLong",
                  "long long": "torch::kLong", "bool": "torch::kBool", "uint8_t": "torch::kByte"}
_INT_SCALARS = {"int", "int32_t", "int64_t", "long", "long long", "unsigned", "unsigned int", "size_t", "uint32_t"}
_FLOAT_SCALARS = {"float", "double"}
LAUNCHER_INCLUDES = "#include <c10/cuda/CUDAStream.h>\n#include <c10/cuda/CUDAException.h>\n"


@dataclass
class Launcher:
    kernel_name: str  # what the kernel is renamed to
    code: str  # the launcher's C++ text (with its includes)
    prototype: str
    returns: Optional[str]  # the parameter whose tensor the launcher returns


def elementwise_launcher(fn: CFunction, src: str, sources: list[str]) -> tuple[Optional[Launcher], str]:
    """A host launcher for a `__global__` kernel that is unambiguously 1-D elementwise: one flat index
    `blockIdx.x * blockDim.x + threadIdx.x`, a bound `if (idx < n)` (or `if (idx >= n) return;`) on
    integer parameters, simple pointer/scalar parameters, nothing 2-D, shared or looping. The launcher
    takes the same parameters (pointers become tensors) and returns the one tensor the kernel writes."""
    if fn.kind != "global" or fn.body is None or fn.scope or fn.is_template:
        return None, "it is not a plain __global__ kernel at file scope"
    params = parse_params(fn.params)
    if not params:
        return None, "its parameter list is not a simple list of pointers and scalars"
    masked = mask(src)
    body = masked[fn.body[0]:fn.body[1] + 1]
    if _NOT_1D.search(body):
        return None, "it is not a flat 1-D elementwise kernel (2-D indices, shared memory, loops or atomics)"
    m = next((i for i in _INDEX.finditer(body) if re.sub(r"[\s()]", "", i.group("expr")) in _FLAT_INDEX), None)
    if m is None:
        return None, "it computes no flat index `blockIdx.x * blockDim.x + threadIdx.x`, so its grid is unknown"
    count = _bound(body, m.group("var"), params)
    if count is None:
        return None, (f"no bound `if ({m.group('var')} < n)` on integer parameters guards the index, so the "
                      "element count is unknown")
    for p in params:
        known = _ELEMENT_TYPES if p.pointer else _INT_SCALARS | _FLOAT_SCALARS
        if p.base not in known:
            return None, f"parameter `{p.name}` has type `{p.type}`, which the launcher generator does not handle"
    written = [p for p in params
               if p.pointer and re.search(rf"(?<![\w.]){p.name}\s*\[[^\]]*\]\s*(?:[-+*/]?=)(?!=)", body)]
    if any(p.name.startswith("kw_") for p in params):
        return None, "its parameter names clash with the launcher's locals (kw_*)"
    renamed = f"{fn.name}_kernel"
    if any(renamed == g.name for s in sources for g in scan_functions(s)):
        return None, f"the name `{renamed}` is taken"
    out = written[0] if len(written) == 1 else None
    code, proto = _launcher_text(fn.name, renamed, params, count, out)
    return Launcher(renamed, code, proto, out.name if out else None), ""


def _bound(body: str, var: str, params: list[Param]) -> Optional[list[str]]:
    ints = {p.name for p in params if not p.pointer and p.base in _INT_SCALARS}
    pats = [rf"\bif\s*\(\s*{var}\s*<\s*(?P<n>[\w\s*()]+?)\s*\)",
            rf"\bif\s*\(\s*{var}\s*>=\s*(?P<n>[\w\s*()]+?)\s*\)\s*return\b"]
    for pat in pats:
        m = re.search(pat, body)
        if m:
            factors = [f.strip() for f in re.sub(r"[()]", "", m.group("n")).split("*")]
            if factors and all(f in ints for f in factors):
                return factors
            return None
    return None


def _launcher_text(name: str, kernel: str, params: list[Param], count: list[str],
                   written: Optional[Param]) -> tuple[str, str]:
    sig, checks, args = [], [], []
    for p in params:
        if p.pointer:
            sig.append(f"torch::Tensor {p.name}")
            checks.append(f"    TORCH_CHECK({p.name}.is_cuda() && {p.name}.is_contiguous() && "
                          f"{p.name}.scalar_type() == {_ELEMENT_TYPES[p.base]}, "
                          f'"{p.name} must be a contiguous {p.base} CUDA tensor");')
            args.append(f"{p.name}.data_ptr<{p.base}>()")
        elif p.base in _FLOAT_SCALARS:
            sig.append(f"double {p.name}")
            args.append(f"static_cast<{p.base}>({p.name})")
        else:
            sig.append(f"int64_t {p.name}")
            args.append(f"static_cast<{p.base}>({p.name})")
    ret = "torch::Tensor" if written else "void"
    proto = f"{ret} {name}({', '.join(sig)});"
    n = " * ".join(count)
    lines = [
        LAUNCHER_INCLUDES.rstrip("\n"),
        f"// Host launcher generated by kernelwright grounding for the 1-D kernel {kernel}.",
        f"{ret} {name}({', '.join(sig)}) {{",
        *checks,
        f"    const int64_t kw_count = {n};",
        "    if (kw_count > 0) {",
        "        const int kw_threads = 256;",
        "        const unsigned int kw_blocks = static_cast<unsigned int>((kw_count + kw_threads - 1) / kw_threads);",
        f"        {kernel}<<<kw_blocks, kw_threads, 0, c10::cuda::getCurrentCUDAStream()>>>({', '.join(args)});",
        "        C10_CUDA_KERNEL_LAUNCH_CHECK();",
        "    }",
    ]
    if written:
        lines.append(f"    return {written.name};")
    lines.append("}")
    return "\n" + "\n".join(lines) + "\n", proto


def kernel_name_uses(name: str, sources: list[str]) -> int:
    return sum(len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", mask(s))) for s in sources)
