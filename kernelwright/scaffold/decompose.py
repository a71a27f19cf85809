"""A composite op as the lines of its definition, each checked alone (planning-child side).

Written a line at a time (steps.py), the 1.5B model still failed where one line is a whole
definition: softplus (a `tl.where` on the wrong value, `log(1 + exp(v))` that overflows), mish
(`tl.tanh(tl.softplus(x))`, names Triton does not have), GELU's tanh form, softmax and LayerNorm as
one row task (on the H200 host, gelu_tanh, softmax, layer_norm and layernorm_silu were
4 of the 5 C++ tasks search did not solve). Each line of their definitions is an op it writes
right alone: `exp(-|v|)`, `log1p(v)`, a row's max, a row's sum.

The parts are torch text, run here on the op's real input to give each part's value on the probes;
a split is kept only where its last part reproduces the op's own value (the arguments a table
entry assumes, softplus's beta and threshold, softmax over the last dim, are checked that way
rather than parsed). Each part is computed in float32 and only float32 ops are split: a bf16 op
rounds once, its parts would round at every line.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from torch import fx

from kernelwright.scaffold.steps import fill
from kernelwright.scaffold.types import StepPart

# torch text over {a} (the op's input) and {p1}, {p2}, ... (the parts before); the last is the op.
# One op a line: on the H200 parts of two ops were the lines the model did not write
# in 32 answers, each time dropping one op (`clamp(x + 3, 0, 6)` without its `+ 3`, `relu(x) + v2`
# without the relu, `0.5 * x * (1 + v2)` without the 0.5), where lines of one op passed.
# softplus(v) = max(v, 0) + log1p(exp(-|v|)): equal to log(1 + exp(v)) and never overflows, and
# within 2e-9 of PyTorch's threshold form (v where v > 20) at the threshold
# (`exp(-v)` is two ops too: 4 of 4 answers wrote `expf(x)`; and `y = -x` alone was answered
# `y = x;`, as if y already held it: the negation is a product with a constant, as GELU's are)
SOFTPLUS = [("abs", "torch.abs({a})"), ("mul", "-1.0 * {p1}"), ("exp", "torch.exp({p2})"),
            ("log1p", "torch.log1p({p3})"), ("relu", "torch.relu({a})"), ("add", "{p5} + {p4}")]
PARTS: dict[str, list[tuple[str, str]]] = {
    "softplus": SOFTPLUS,
    "mish": SOFTPLUS + [("tanh", "torch.tanh({p6})"), ("mul", "{a} * {p7}")],
    "gelu_tanh": [("mul", "{a} * {a} * {a}"), ("mul", "0.044715 * {p1}"), ("add", "{a} + {p2}"),
                  ("mul", "0.7978845608028654 * {p3}"), ("tanh", "torch.tanh({p4})"), ("add", "1 + {p5}"),
                  ("mul", "{a} * {p6}"), ("mul", "0.5 * {p7}")],
    "silu": [("sigmoid", "torch.sigmoid({a})"), ("mul", "{a} * {p1}")],
    "hardswish": [("add", "{a} + 3"), ("clamp", "torch.clamp({p1}, 0, 6)"), ("mul", "{a} * {p2}"), ("div", "{p3} / 6")],
    "softmax": [("amax", "torch.amax({a}, dim=-1, keepdim=True)"), ("sub", "{a} - {p1}"), ("exp", "torch.exp({p2})"),
                ("sum", "torch.sum({p3}, dim=-1, keepdim=True)"), ("div", "{p3} / {p4}")],
    "log_softmax": [("amax", "torch.amax({a}, dim=-1, keepdim=True)"), ("sub", "{a} - {p1}"),
                    ("exp", "torch.exp({p2})"), ("sum", "torch.sum({p3}, dim=-1, keepdim=True)"),
                    ("log", "torch.log({p4})"), ("sub", "{p2} - {p5}")],
}


def _mean(count: int, dims: str, of: str = "{a}", first: int = 1) -> list[tuple[str, str]]:
    """A mean as a row's sum and a division by its count: asked for a mean, 8 of 8 answers of the
    1.5B model summed the row and did not divide (docs/results/line-yield.md), where it writes a
    row's sum right. ``first``: the number of the sum's part."""
    return [("sum", f"torch.sum({of}, dim={dims}, keepdim=True)"), ("div", f"{{p{first}}} / {count}")]


def _layer_norm(n: int, eps: float, affine: bool) -> list[tuple[str, str]]:
    parts = [*_mean(n, "-1"), ("sub", "{a} - {p2}"), ("mul", "{p3} * {p3}"), *_mean(n, "-1", "{p4}", 5),
             ("add", f"{{p6}} + {eps!r}"), ("rsqrt", "torch.rsqrt({p7})"), ("mul", "{p3} * {p8}")]
    return parts + ([("mul", "{p9} * {w}"), ("add", "{p10} + {b}")] if affine else [])


def _mean_of(a: torch.Tensor, out: torch.Tensor) -> list[tuple[str, str]]:
    """A mean over the trailing dims of ``a`` whose values make one of ``out``'s; [] for another mean."""
    count = a.numel() // max(1, out.numel())
    for k in range(1, a.dim() + 1):
        if math.prod(a.shape[a.dim() - k:]) == count:
            return _mean(count, "-1" if k == 1 else "(" + ", ".join(str(-d) for d in range(k, 0, -1)) + ")")
    return []


def _table(node: fx.Node, target: str, sub: fx.GraphModule, a: torch.Tensor,
           out: torch.Tensor) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The parts for ``node``'s op (input ``a``, value ``out``) and the extra values they read
    ({w}, {b}); [] if it is not split."""
    if target == "mean":
        return _mean_of(a, out), {}
    if target == "gelu":
        approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return (PARTS["gelu_tanh"], {}) if approx == "tanh" else ([], {})
    if target == "layer_norm" and node.op == "call_module":
        mod = sub.get_submodule(str(node.target))
        if not isinstance(mod, torch.nn.LayerNorm) or len(mod.normalized_shape) != 1:
            return [], {}
        affine = mod.weight is not None and mod.bias is not None
        extra = {"w": mod.weight.detach().float(), "b": mod.bias.detach().float()} if affine else {}
        return _layer_norm(int(mod.normalized_shape[0]), float(mod.eps), affine), extra
    return PARTS.get(target, []), {}


def parts(node: fx.Node, target: str, sub: fx.GraphModule, env: dict[fx.Node, Any],
          encode: Callable[[torch.Tensor], Optional[tuple[str, bool]]]) -> list[StepPart]:
    """``node``'s op as its definition's parts with their values (``encode``: a value on the probes
    and whether it is one per row, or None where it cannot be checked alone); [] if not split."""
    if not node.args or not isinstance(node.args[0], fx.Node):
        return []
    a, out = env.get(node.args[0]), env.get(node)
    if not all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in (a, out)):
        return []
    table, extra = _table(node, target, sub, a, out)
    if not table:
        return []
    scope: dict[str, Any] = {"a": a, **extra}
    found: list[StepPart] = []
    for i, (op, expr) in enumerate(table):
        # the placeholders name the scope's values ({a}, {p1}, ...): run the text on them
        v = eval(fill(expr, {k: k for k in scope}), {"torch": torch}, scope)  # noqa: S307 -- our own table's text
        coded = encode(v) if isinstance(v, torch.Tensor) else None
        if coded is None:
            return []
        scope[f"p{i + 1}"] = v
        found.append(StepPart(target=op, expr=expr, values=coded[0], per_row=coded[1]))
    last = scope[f"p{len(table)}"]
    # (a mean without keepdim has the same values as its parts, one a row, in another shape)
    if last.numel() != out.numel() or not torch.allclose(last.reshape(out.shape), out, rtol=1e-4, atol=1e-6,
                                                         equal_nan=True):
        return []  # the table's assumptions (an argument, the dim) do not hold for this call
    return found
