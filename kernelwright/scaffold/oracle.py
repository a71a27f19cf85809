"""A reference-correct region for a scaffold, written by executing the segment's own PyTorch lines
on symbolic values that print C / CUDA / Triton expressions.

It checks the scaffolds, never answers a task: the skeleton around a correct region must be
`correct` under the real evaluator, and the skeleton's speed with it is the best any model can
reach through the scaffold (tests/scaffold/, benchmarks/scaffold_check.py, skeleton_speed.py,
precheck_*.py). No stage of the pipeline imports it (tests/test_import_graph.py). It supports the
ops the built-in suite's segments use and fails loudly on anything else.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from kernelwright.scaffold import Scaffold, SegmentKind
from kernelwright.scaffold.grammar import local_name


class Unsupported(Exception):
    pass


class Sym:
    """A value of the segment: an expression per element (or per column j of a row), or, after a
    reduction, a per-row scalar held in a variable."""

    def __init__(self, em: "Emitter", expr: str, per_row: bool = False):
        self.em, self.expr, self.per_row = em, expr, per_row

    def _bin(self, other: Any, op: str, swap: bool = False) -> "Sym":
        a, b = self.expr, self.em.value(other)
        expr = f"({b} {op} {a})" if swap else f"({a} {op} {b})"
        return Sym(self.em, expr, self.per_row and (not isinstance(other, Sym) or other.per_row))

    def __add__(self, o: Any) -> "Sym": return self._bin(o, "+")
    def __radd__(self, o: Any) -> "Sym": return self._bin(o, "+", True)
    def __sub__(self, o: Any) -> "Sym": return self._bin(o, "-")
    def __rsub__(self, o: Any) -> "Sym": return self._bin(o, "-", True)
    def __mul__(self, o: Any) -> "Sym": return self._bin(o, "*")
    def __rmul__(self, o: Any) -> "Sym": return self._bin(o, "*", True)
    def __truediv__(self, o: Any) -> "Sym": return self._bin(o, "/")
    def __rtruediv__(self, o: Any) -> "Sym": return self._bin(o, "/", True)
    def __neg__(self) -> "Sym": return Sym(self.em, f"(-{self.expr})", self.per_row)

    def float(self) -> "Sym": return self
    def to(self, *a: Any, **k: Any) -> "Sym": return self
    def contiguous(self) -> "Sym": return self

    def pow(self, p: Any) -> "Sym":
        if p == 2:
            return self * self
        return Sym(self.em, self.em.fn("pow", self.expr, self.em.value(p)), self.per_row)

    def sum(self, dim: Any = None, keepdim: bool = False) -> "Sym": return self.em.reduce("sum", self)
    def mean(self, dim: Any = None, keepdim: bool = False) -> "Sym": return self.em.reduce("mean", self)
    def amax(self, dim: Any = None, keepdim: bool = False) -> "Sym": return self.em.reduce("max", self)


class Emitter:
    def __init__(self, scaffold: Scaffold):
        self.sc = scaffold
        self.seg = scaffold.segment
        self.lang = {"cuda": "c", "cpp": "c", "triton": "py"}[scaffold.target]
        self.target = scaffold.target
        self.row = self.seg.kind == SegmentKind.ROW
        self.lines: list[str] = []
        self.counter = itertools.count()
        self.y_in_use = False  # the output row holds a value a later line reads (C++ softmax)

    # -- leaves -------------------------------------------------------------------------------
    def value(self, v: Any) -> str:
        if isinstance(v, Sym):
            return v.expr
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Unsupported(f"constant {v!r}")
        f = float(v)
        if math.isinf(f):
            return ("-INFINITY" if f < 0 else "INFINITY") if self.lang == "c" else ("-float('inf')" if f < 0 else "float('inf')")
        return f"{f!r}f" if self.lang == "c" else repr(f)

    def arg(self, name: str) -> Sym:
        return Sym(self, f"{name}(j)" if self.row and self.lang == "c" else name)

    def fn(self, name: str, *args: str) -> str:
        if self.lang == "c":
            table = {"exp": "expf", "erf": "erff", "tanh": "tanhf", "log": "logf", "log1p": "log1pf",
                     "sqrt": "sqrtf", "max": "fmaxf", "min": "fminf", "abs": "fabsf", "pow": "powf"}
            if name == "rsqrt":
                return f"(1.0f / sqrtf({args[0]}))"
            if name == "where":
                return f"(({args[0]}) ? ({args[1]}) : ({args[2]}))"
            return f"{table[name]}({', '.join(args)})"
        if name == "tanh":
            return f"(2.0 * tl.sigmoid(2.0 * ({args[0]})) - 1.0)"
        if name == "log1p":
            return f"tl.log(1.0 + ({args[0]}))"
        table = {"exp": "tl.exp", "erf": "tl.erf", "log": "tl.log", "sqrt": "tl.sqrt", "rsqrt": "tl.rsqrt",
                 "max": "tl.maximum", "min": "tl.minimum", "abs": "tl.abs", "where": "tl.where"}
        if name == "pow":
            raise Unsupported("pow with a general exponent")
        return f"{table[name]}({', '.join(args)})"

    def lift(self, v: Any, op: str, *args: str) -> Sym:
        return Sym(self, self.fn(op, *args), isinstance(v, Sym) and v.per_row)

    # -- reductions over the row ----------------------------------------------------------------
    def reduce(self, how: str, v: Sym) -> Sym:
        if not self.row:
            raise Unsupported("a reduction in an elementwise segment")
        r = local_name(next(self.counter))  # the region language's locals (scaffold/grammar.py)
        if self.lang == "py":
            if how == "max":
                self.lines.append(f"{r} = tl.max(tl.where(mask, {v.expr}, -float('inf')), axis=0)")
            else:
                self.lines.append(f"{r} = tl.sum(tl.where(mask, {v.expr}, 0.0), axis=0)")
        else:
            init = "-INFINITY" if how == "max" else "0.0f"
            step = f"{r} = fmaxf({r}, {v.expr});" if how == "max" else f"{r} += {v.expr};"
            loop = ("for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)" if self.target == "cuda"
                    else "for (int64_t j = 0; j < cols; ++j)")
            self.lines += [f"float {r} = {init};", f"{loop} {{ {step} }}"]
            if self.target == "cuda":
                self.lines.append(f"{r} = block_{'max' if how == 'max' else 'sum'}({r});")
        if how == "mean":
            return Sym(self, f"({r} / {'(float)cols' if self.lang == 'c' else 'cols'})", True)
        return Sym(self, r, True)

    # -- the result ------------------------------------------------------------------------------
    def finish(self, y: Sym, wrong: bool) -> str:
        expr = f"({y.expr} + {self.value(1.0)})" if wrong else y.expr
        if not self.row or self.lang == "py":
            self.lines.append(f"y = {expr};" if self.lang == "c" else f"y = {expr}")
        elif y.per_row:  # a float y, stored by the skeleton
            self.lines.append(f"y = {expr};")
        else:
            loop = ("for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)" if self.target == "cuda"
                    else "for (int64_t j = 0; j < cols; ++j)")
            self.lines.append(f"{loop} y[j] = {expr};")
        return "\n".join(self.lines)


def _ops(em: Emitter) -> tuple[Any, Any]:
    """`torch` and `torch.nn.functional` stand-ins that build expressions."""

    def gelu(v: Sym, approximate: str = "none") -> Sym:
        if approximate == "tanh":
            inner = em.fn("tanh", f"(0.7978845608028654 * ({v.expr} + 0.044715 * {v.expr} * {v.expr} * {v.expr}))")
            return Sym(em, f"(0.5 * {v.expr} * (1.0 + {inner}))", v.per_row)
        return Sym(em, f"(0.5 * {v.expr} * (1.0 + {em.fn('erf', f'({v.expr} * 0.7071067811865476)')}))", v.per_row)

    def sigmoid(v: Sym) -> Sym:
        return Sym(em, f"(1.0 / (1.0 + {em.fn('exp', f'(-{v.expr})')}))", v.per_row)

    def softplus(v: Sym, beta: float = 1.0, threshold: float = 20.0) -> Sym:
        bv = f"({v.expr} * {em.value(beta)})"
        soft = f"({em.fn('log1p', em.fn('exp', bv))} / {em.value(beta)})"
        return Sym(em, em.fn("where", f"{bv} > {em.value(threshold)}", v.expr, soft), v.per_row)

    def tanh(v: Sym) -> Sym:
        return em.lift(v, "tanh", v.expr)

    def relu(v: Sym, inplace: bool = False) -> Sym:
        return em.lift(v, "max", v.expr, em.value(0.0))

    def clamp(v: Sym, min: Any = None, max: Any = None) -> Sym:  # noqa: A002 -- torch's names
        out = v
        if min is not None:
            out = em.lift(out, "max", out.expr, em.value(min))
        if max is not None:
            out = em.lift(out, "min", out.expr, em.value(max))
        return out

    def softmax(v: Sym, dim: int = -1) -> Sym:
        m = em.reduce("max", v)
        e = Sym(em, em.fn("exp", f"({v.expr} - {m.expr})"))
        if em.target == "cpp" and em.seg.out_dtype == "float32" and not em.y_in_use:
            # each exp once, kept in the output row by the sum's pass (what PyTorch's CPU softmax
            # does): recomputed in the division's pass, it ran at 0.78x eager (64 x 1000)
            em.y_in_use = True
            r = local_name(next(em.counter))
            em.lines += [f"float {r} = 0.0f;",
                         f"for (int64_t j = 0; j < cols; ++j) {{ y[j] = {e.expr}; {r} += y[j]; }}"]
            return Sym(em, f"(y[j] / {r})")
        s = em.reduce("sum", e)
        return Sym(em, f"({e.expr} / {s.expr})")

    def log_softmax(v: Sym, dim: int = -1) -> Sym:
        m = em.reduce("max", v)
        s = em.reduce("sum", Sym(em, em.fn("exp", f"({v.expr} - {m.expr})")))
        return Sym(em, f"({v.expr} - {m.expr} - {em.fn('log', s.expr)})")

    class F:
        pass

    f = F()
    f.gelu = gelu
    f.silu = lambda v, inplace=False: v * sigmoid(v)
    f.relu = relu
    f.mish = lambda v, inplace=False: v * tanh(softplus(v))
    f.softplus = softplus
    f.hardswish = lambda v, inplace=False: v * clamp(v + 3.0, 0.0, 6.0) / 6.0

    class NN:
        functional = f

    class Torch:
        nn = NN()
        bfloat16 = float16 = float32 = "dtype"

    t = Torch()
    t.softmax, t.log_softmax, t.tanh, t.sigmoid, t.relu, t.clamp = softmax, log_softmax, tanh, sigmoid, relu, clamp
    t.rsqrt = lambda v: em.lift(v, "rsqrt", v.expr)
    t.amax = lambda v, dim=None, keepdim=False: em.reduce("max", v)
    # the parts of a composite op's definition (scaffold/decompose.py)
    t.sum = lambda v, dim=None, keepdim=False: em.reduce("sum", v)
    t.mean = lambda v, dim=None, keepdim=False: em.reduce("mean", v)
    for name in ("exp", "abs", "log", "log1p"):
        setattr(t, name, lambda v, name=name: em.lift(v, name, v.expr))
    t.cumsum = None  # only as a whole segment: see region()
    return t, f


class _Self:
    """`self.<module>(v)` inside the segment's lines, for the modules the suite uses."""

    def __init__(self, em: Emitter, notes: list[str]):
        self.em, self.notes = em, notes

    def __getattr__(self, name: str) -> Any:
        note = next((n for n in self.notes if n.startswith(f"self.{name} = ")), None)
        if note is None or "LayerNorm(" not in note:
            raise Unsupported(f"module self.{name}")
        eps = float(note.split("eps=")[1].split(",")[0])
        weight = next(a.name for a in self.em.seg.args if a.origin == f"{name}.weight")
        bias = next(a.name for a in self.em.seg.args if a.origin == f"{name}.bias")

        def layer_norm(v: Sym) -> Sym:
            em = self.em
            mean = em.reduce("mean", v)
            d = Sym(em, f"({v.expr} - {mean.expr})")
            var = em.reduce("mean", d * d)
            scale = em.fn("rsqrt", f"({var.expr} + {em.value(eps)})")
            return Sym(em, f"({d.expr} * {scale} * {em.arg(weight).expr} + {em.arg(bias).expr})")

        return layer_norm


def region(scaffold: Scaffold, wrong: bool = False) -> str:
    """Region text computing the segment exactly (``wrong``: the result plus one)."""
    seg = scaffold.segment
    assert seg is not None
    em = Emitter(scaffold)
    if seg.targets == ["cumsum"]:
        return _cumsum(em, wrong)
    torch_ns, _ = _ops(em)
    env: dict[str, Any] = {"torch": torch_ns, "self": _Self(em, seg.module_notes)}
    for a in seg.args:
        env[a.name] = em.arg(a.name)
    # a GEMM segment's first lines are the GEMM itself: the skeleton's K loop computes them, and the
    # region starts from their result (the main input)
    exec("\n".join(seg.epilogue().torch_lines), env)  # noqa: S102 -- our own generated lines, on symbols
    return em.finish(env["y"], wrong)


def _cumsum(em: Emitter, wrong: bool) -> str:
    bump = " + 1.0f" if wrong else ""
    if em.lang == "py":
        return f"y = tl.cumsum(x, axis=0){' + 1.0' if wrong else ''}"
    guard = "if (threadIdx.x == 0) " if em.target == "cuda" else ""
    acc = local_name(0)
    return (f"{guard}{{\n    float {acc} = 0.0f;\n    for (int64_t j = 0; j < cols; ++j) {{ {acc} += x(j); "
            f"y[j] = {acc}{bump}; }}\n}}")
