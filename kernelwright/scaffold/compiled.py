"""A region as its program compiles it: rewrites the skeleton applies to the model's text where
the target's compiler would otherwise make it slow, each one meaning exactly what was written.

The program and the pre-check both compile `as_compiled(target, region)`; what is recorded and
shown is the model's own text. Each rewrite keeps the region's line count, so a compiler error's
line is still the region's.
"""

from __future__ import annotations

import re

# An unsuffixed decimal floating literal (`0.5`, `.5`, `1.`, `1e-5`, `2.5e3`), not part of a name, a
# hex float or a suffixed literal (`0.5f`, `1.0L`).
_FLOAT_LITERAL = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(?![\w.])")
_C_COMMENT_OR_STRING = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", re.S)


def float_literals(code: str) -> str:
    """C++ `code` with its unsuffixed floating literals suffixed `f` (outside comments and strings).
    A literal is a double in C++, and one double operand makes the whole expression double: the
    model's `0.5 * v * (1.0 + erff(v * 0.7071067811865476))` ran its vectorised loop in double
    precision, half the lanes and conversions both ways (a bias + GELU of 16K floats, AVX-512: 15.4
    us against 9.5 us with float literals, eager's add and GELU 10.5 us). The
    reference computes in float32 (PyTorch's opmath for float, half and bfloat16 tensors), so the
    region's arithmetic is the reference's precision either way; a variable the model declares
    `double` stays double."""
    out, at = [], 0
    for m in _C_COMMENT_OR_STRING.finditer(code):
        out.append(_FLOAT_LITERAL.sub(r"\1f", code[at:m.start()]))
        out.append(m.group(0))
        at = m.end()
    out.append(_FLOAT_LITERAL.sub(r"\1f", code[at:]))
    return "".join(out)


# A CUDA row region's loop over its row's columns with a 64-bit `j` (the view's `int64_t`), in the
# grammar's two forms: the block's threads striding, or one thread
_ROW_LOOP = re.compile(r"\bfor\s*\(\s*int64_t(\s+j\s*=\s*(?:threadIdx\.x|0)\s*;\s*j\s*<\s*cols\s*;\s*"
                       r"(?:j\s*\+=\s*(?:blockDim\.x|1)|\+\+j|j\+\+)\s*\))")
# j where a 32-bit j means the same: an accessor's argument `x(j)` or a subscript `y[j]`
_J_AS_INDEX = re.compile(r"(?<=[(\[])\s*j\s*(?=[)\]])")


# The block-strided loop, narrowed, and the same loop counted: each thread's trip count worked out
# once (cols is at most 2^31 - 1025, so the sum cannot overflow), which lets nvcc unroll it (by 4-16)
# and drop the bound check between the unrolled elements. The strided form's trip count depends on
# a runtime step the compiler does not solve for (SASS of the H200 build: the softmax's
# passes 6/12/19 -> 3.7/10.2/15.0 instructions an element; `#pragma unroll` on the strided form kept
# a check and a branch an element). Same j, same order, same body: a `continue` still steps j.
_STRIDED = re.compile(r"\bfor\s*\(\s*int\s+j\s*=\s*threadIdx\.x\s*;\s*j\s*<\s*cols\s*;\s*j\s*\+=\s*blockDim\.x\s*\)")
_COUNTED = ("for (int j = threadIdx.x, kw_left = cols > (int)threadIdx.x ? (cols - (int)threadIdx.x + (int)blockDim.x - 1)"
            " / (int)blockDim.x : 0; kw_left > 0; --kw_left, j += blockDim.x)")


def narrow_row_loops(region: str) -> str:
    """A CUDA row region's column loops with a 32-bit `j`, where the region uses `j` only as an
    index (the kernel's `cols` is a 32-bit int, checked on the host to leave a stride's room):
    a 64-bit j costs 3 of the 7 instructions each element pays for its loop (SASS, H200 build:
    softmax's passes 9, 19 and 37 instructions an element). Any other use of j (in
    arithmetic, where 32 bits could overflow) leaves the region as written. The block-strided loops
    then run counted (_COUNTED), on the same line, so a compiler error's line is the region's."""
    if not (_ROW_LOOP.search(region) or _STRIDED.search(region)):
        return region
    heads = _STRIDED.sub("", _ROW_LOOP.sub("", region))
    if re.search(r"\bj\b", _J_AS_INDEX.sub("", heads)):
        return region
    return _STRIDED.sub(_COUNTED, _ROW_LOOP.sub(r"for (int\1", region))


# A C++ row region's min/max over its row, `for (int64_t j = 0; j < cols; ++j) { m = fmaxf(m, E); }`
# (from any first column, e.g. 1 after `m = x(0);`; braces optional; fmaxf, fminf, fmax or fmin; m first
# or second): the one statement of the loop.
_CPP_MINMAX_LOOP = re.compile(
    r"(?P<head>\bfor\s*\(\s*int64_t\s+j\s*=\s*(?P<start>\d+)\s*;\s*j\s*<\s*cols\s*;\s*(?:\+\+j|j\+\+|j\s*\+=\s*1)\s*\)\s*)"
    r"(?P<open>\{\s*)?(?P<v>[A-Za-z_]\w*)\s*=\s*(?P<f>fmaxf|fminf|fmax|fmin)\s*\((?P<args>[^;{}]*)\)\s*;"
    r"(?(open)\s*\})")
_SIDE_EFFECT = re.compile(r"(?<![=!<>])=(?!=)|\+\+|--")
# The lanes start at NaN, the identity of C's fmax and fmin (a NaN argument gives the other one):
# -INFINITY is not, as fmaxf(NaN, -inf) is -inf where the loop, starting at NaN and given no value or
# only NaNs, gives NaN (a test found it)
_NOT_TYPES = {"return", "else", "case", "goto", "throw", "delete", "co_return", "co_yield"}  # words before a name
LANES = 64  # independent partial results: four AVX-512 vectors of floats, each its own dependency chain


def simd_min_max(region: str) -> str:
    """A C++ row region's min/max loops over the row, computed in LANES partial results: GCC
    vectorises a sum over the row on its own (-fassociative-math) but not a max through the
    comparison and select that keep C's NaN rule (the kernel's fmaxf), and the row's max pass,
    scalar, took 23 of a log_softmax's 39 us (32 x 1500 fp32, one thread). Each lane
    `k` folds the values at j = k, k + LANES, ... (an `omp simd` loop: no lane reads another), the
    tail too (lane k takes the tail's k-th value: run scalar, one dependent select a value, the 40
    left of a 1000-value row cost about what its 15 full blocks did), then the lanes fold into m
    one by one (folded in halves, 32 + 16 + ... + 1 in vector loops, a softmax over rows of 128
    ran 10-15% slower: 64 x 128). The kernel's fmaxf/fminf are commutative and associative
    over the values (NaNs ignored, as C's are; -fno-signed-zeros), so any order gives the result
    the loop would. Stand-alone (1500 floats a row, AVX-512): 0.41 ns an element scalar, 0.066 in
    lanes; an OpenMP user reduction (`declare reduction` + `omp simd reduction`) took 0.15.
    Only where the loop's one statement is `m = f(m, E)` with m a float or double the region
    declares (or the row's own `y`), and E neither reads m nor assigns anything. The rewrite is one
    line, followed by the newlines the loop had, so later lines stay where they were."""
    def lanes(m: re.Match) -> str:
        v, f, args = m.group("v"), m.group("f"), [a.strip() for a in _split_args(m.group("args"))]
        if len(args) != 2 or sum(a == v for a in args) != 1:
            return m.group(0)
        e = args[1] if args[0] == v else args[0]
        if re.search(rf"\b{re.escape(v)}\b", e) or _SIDE_EFFECT.search(e) or re.search(r"\bkw_", e):
            return m.group(0)
        # the type each declaration of m gives it (the lanes take m's type)
        # (`return y;` is no declaration: a composed region's lambdas each end so, and read as a type it
        # kept every composed max loop scalar: 0.8 of a 512 x 2048 temperature softmax's 1.0 ms)
        types = set(re.findall(rf"\b([A-Za-z_]\w*)\s*[*&]?\s+{re.escape(v)}\s*(?=[=;,)])", region)) - _NOT_TYPES
        if not (types <= {"float", "double"} and (types or v == "y")):
            return m.group(0)
        # fmaxf/fminf take and give floats: every step of the loop rounds m to a float, so float lanes
        # give the loop's result, at twice a double lane's width (a row task's answer is widened to
        # double, `steps._wide`: its max pass in double lanes cost a composed softmax 0.78x -> 0.99x
        # eager, 64 x 1000)
        acc = "float" if f in ("fmaxf", "fminf") else f"decltype({v})"
        text = (f"{{ {acc} kw_acc[{LANES}]; for (int kw_k = 0; kw_k < {LANES}; ++kw_k) kw_acc[kw_k] = NAN; "
                f"int64_t kw_j = {m.group('start')}; for (; kw_j + {LANES} <= cols; kw_j += {LANES}) {{ _Pragma(\"omp simd\") "
                f"for (int64_t kw_k = 0; kw_k < {LANES}; ++kw_k) {{ const int64_t j = kw_j + kw_k; kw_acc[kw_k] = {f}(kw_acc[kw_k], {e}); }} }} "
                f"_Pragma(\"omp simd\") for (int64_t kw_k = 0; kw_k < cols - kw_j; ++kw_k) {{ const int64_t j = kw_j + kw_k; "
                f"kw_acc[kw_k] = {f}(kw_acc[kw_k], {e}); }} "
                f"for (int kw_k = 0; kw_k < {LANES}; ++kw_k) {v} = {f}({v}, kw_acc[kw_k]); }}")
        return text + "\n" * m.group(0).count("\n")
    return _CPP_MINMAX_LOOP.sub(lanes, region)


def _split_args(text: str) -> list[str]:
    """A call's arguments, split at the commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    return out + [cur]


# `expf(` as a call of C's expf (not `std::expf`, a member or a longer name)
_EXPF = re.compile(r"(?<![\w:.>])expf(?=\s*\()")


def tritons_exp(region: str) -> str:
    """A CUDA region's fp32 `expf` as Triton's `tl.exp` compiles, and so torch.compile's kernels (the
    baseline a user compares with): `__expf`, `ex2.approx.f32` of x * log2(e) (read in Triton 3.6's
    PTX), within 2 + 1.2|x| ulp, far inside the judge's fp32 tolerance (1e-4). IEEE expf cost the
    CUDA softmax's passes 16 and 35 instructions an element, __expf with Triton's division 12 and
    19 (SASS of the H200 build). The pre-check computes expf in full precision (its
    shim's __expf is expf): the judge, on the device, is what sees these numerics."""
    return _EXPF.sub("__expf", region)


def as_compiled(target: str, region: str) -> str:
    """A region as its program (and the pre-check) compiles it: C++'s floating literals float and
    its row min/max loops marked as reductions; a CUDA row region's column loops 32-bit and counted
    where that changes nothing (narrow_row_loops), its exp Triton's (tritons_exp)."""
    if target == "cpp":
        return simd_min_max(float_literals(region))
    return tritons_exp(narrow_row_loops(region)) if target == "cuda" else region
