"""The GEMM alternative of a plan: a `gemm` segment that takes a library GEMM into the kernel, with
the elementwise run after it as the epilogue (child-process side, beside plan.py).

Today's segment (plan.py) stops at library ops, so `gelu(linear(x) + b)` fuses only what follows
the GEMM and the GEMM's output makes one more round trip through memory. Here, on the same trace:

1. GEMM-like nodes: nn.Linear / F.linear (the weight is [N, K]: read transposed through its
   strides), torch.addmm with beta = alpha = 1 and a bias of [N], torch.matmul / `@` / mm with a 2-D
   right operand (the left one's leading dims fold into M), bmm and matmul of two 3-D operands of one
   batch (batched).
2. The epilogue: the best elementwise run (plan.py's candidates, measured the same way) whose main
   input is the GEMM's output and which holds every reader of it (the kernel writes only the
   epilogue's result). None: a lone GEMM, the region a pass-through.
3. The alternative is kept only where it covers at least the nodes of today's segment, so a
   GEMM followed by a softmax keeps its row kernel; among several GEMMs the one with the most
   epilogue work (then the most flops) wins.

The region keeps the epilogue's names: the accumulator tile is `x`, the segment's main input, as it
is in today's elementwise segment after a GEMM (its probes and recorded answers stay valid). The
prompt's lines start with the GEMM itself, its result assigned to `x`, as comments (the kernel has
computed them when the region starts).
"""

from __future__ import annotations

import logging
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import fx, nn

from kernelwright.analysis.graph import trace_fx
from kernelwright.analysis.types import OpNode, Role
from kernelwright.scaffold.plan import (
    FLOAT_DTYPES,
    CandidateRun,
    RewriteError,
    Values,
    connected_groups,
    describe_input,
    may_fuse,
    probes_for,
    rewrite_model,
    segment_of,
)
from kernelwright.scaffold.probes import probe
from kernelwright.scaffold.types import GemmSpec, KernelArg, ScaffoldPlan, Segment, SegmentKind

log = logging.getLogger(__name__)

GEMM_HEADER = "# before the region, the kernel's loop over K computes the GEMM:"
_LINEAR = (F.linear, torch._C._nn.linear)
_MATMUL = (torch.matmul, operator.matmul, torch.mm, torch.bmm, torch.addmm)
_METHODS = {"matmul": torch.matmul, "mm": torch.mm, "bmm": torch.bmm}


@dataclass
class _Gemm:
    """One GEMM node's operands: (origin, value, producing fx node or None for a module parameter)."""

    node: fx.Node
    op: str
    a: tuple[str, torch.Tensor, Optional[fx.Node]]
    b: tuple[str, torch.Tensor, Optional[fx.Node]]
    bias: Optional[tuple[str, torch.Tensor, Optional[fx.Node]]]
    b_transposed: bool
    batched: bool
    module_note: str = ""


def plan_gemm(task_id: str, module: Any, model: nn.Module, inputs: Any, values: Values, source: str,
              covered: set[str]) -> Optional[ScaffoldPlan]:
    """The GEMM alternative, or None (no GEMM, none that covers today's segment, or a failure here,
    which must never cost the task today's plan)."""
    try:
        return _plan(task_id, module, model, inputs, values, source, covered)
    except Exception:
        log.warning("no gemm plan for %s", task_id, exc_info=True)
        return None


def _plan(task_id: str, module: Any, model: nn.Module, inputs: Any, values: Values, source: str,
          covered: set[str]) -> Optional[ScaffoldPlan]:
    gm, graph = trace_fx(model, inputs)
    if any(n.name not in values.shapes for n in gm.graph.nodes if n.op != "output"):
        return None  # a trace that does not name its nodes as the first one did
    info = {n.name: n for n in graph.nodes}
    options = []
    for node in gm.graph.nodes:
        if node.name not in info or info[node.name].role != Role.COMPUTE:
            continue
        gemm = _operands(gm, node, values.shapes)
        if gemm is None:
            continue
        epilogue = _epilogue(model, gm, gemm, info, values)
        nodes = {node.name} | (set(epilogue[0].names) if epilogue else set())
        if not covered <= nodes:
            continue
        work = sum(1 for n in epilogue[0].nodes if info[n.name].role == Role.COMPUTE) if epilogue else 0
        out = values.shapes[node.name]
        flops = out.numel() * gemm.a[1].shape[-1]
        options.append(((work, flops), gemm, epilogue))
    if not options:
        return None
    _, gemm, epilogue = max(options, key=lambda o: o[0])
    seg, cand = _gemm_segment(gm, gemm, epilogue, values.shapes)
    # the probes first: they read the epilogue's nodes, which the rewrite erases
    probes = probes_for(gm, epilogue[1], epilogue[0]) if epilogue else _identity_probes(seg, values.real[gemm.node.name])
    call = [gemm.a[0], gemm.b[0]] + ([gemm.bias[0]] if gemm.bias else []) + [a.origin for a in seg.extras]
    try:
        prelude, model_new = rewrite_model(gm, model, seg, cand, source, module.__name__, call=call)
    except RewriteError:
        return None
    spec = seg.gemm
    assert spec is not None
    shape = f"[{spec.m} x {spec.k}] @ [{spec.k} x {spec.n}]" + (f", {spec.batch} batches" if spec.batched else "")
    what = " -> ".join(seg.targets)
    return ScaffoldPlan(task_id=task_id, available=True,
                        reason=f"gemm kernel for {what}: {shape}, the epilogue on the fp32 accumulator",
                        segment=seg, prelude=prelude, model_new=model_new, probes=probes)


# ---- the GEMM's operands -------------------------------------------------------------------------

def _arg(node: Any, values: dict[str, Any]) -> Optional[tuple[str, torch.Tensor, Optional[fx.Node]]]:
    if not isinstance(node, fx.Node) or not isinstance(values.get(node.name), torch.Tensor):
        return None
    return node.name, values[node.name], node


def _operands(gm: fx.GraphModule, node: fx.Node, values: dict[str, Any]) -> Optional[_Gemm]:
    """The node as a GEMM the skeleton computes, or None (not a GEMM, or one it does not take in)."""
    out = values.get(node.name)
    if not isinstance(out, torch.Tensor) or out.dtype not in FLOAT_DTYPES:
        return None
    kw = dict(node.kwargs)
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if type(mod) is not nn.Linear or len(node.args) != 1:
            return None
        a = _arg(node.args[0], values)
        bias = None if mod.bias is None else (f"{node.target}.bias", mod.bias.detach(), None)
        gemm = _Gemm(node, "linear", a, (f"{node.target}.weight", mod.weight.detach(), None), bias, True, False,
                     f"self.{node.target} = {mod!r}") if a else None
    elif node.op == "call_function" and node.target in _LINEAR:
        args = list(node.args) + [kw.pop(k) for k in ("weight", "bias") if k in kw]
        if kw or len(args) < 2:
            return None
        a, b = _arg(args[0], values), _arg(args[1], values)
        bias = _arg(args[2], values) if len(args) > 2 and args[2] is not None else None
        if len(args) > 2 and args[2] is not None and bias is None:
            return None
        gemm = _Gemm(node, "linear", a, b, bias, True, False) if a and b else None
    elif (node.op == "call_function" and node.target in _MATMUL) or \
            (node.op == "call_method" and node.target in _METHODS):
        target = node.target if node.op == "call_function" else _METHODS[str(node.target)]
        args = list(node.args)
        bias = None
        if target is torch.addmm:
            if any(kw.pop(k, 1) != 1 for k in ("beta", "alpha")) or len(args) != 3:
                return None
            bias, args = _arg(args[0], values), args[1:]
            if bias is None:
                return None
        if kw or len(args) != 2:
            return None
        a, b = _arg(args[0], values), _arg(args[1], values)
        if not (a and b):
            return None
        batched = a[1].dim() == 3 and b[1].dim() == 3
        op = "bmm" if batched else "linear" if target is torch.addmm else "matmul"
        gemm = _Gemm(node, op, a, b, bias, False, batched)
    else:
        return None
    return gemm if gemm is not None and _shapes_fit(gemm, out) else None


def _shapes_fit(g: _Gemm, out: torch.Tensor) -> bool:
    a, b = g.a[1], g.b[1]
    if a.dtype not in FLOAT_DTYPES or b.dtype != a.dtype or out.dtype != a.dtype:
        return False
    if g.bias is not None and (g.bias[1].dtype not in FLOAT_DTYPES or g.bias[1].dim() != 1):
        return False
    if g.batched:
        ok = a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]
        want = [a.shape[0], a.shape[1], b.shape[2]]
    else:
        if a.dim() < 2 or b.dim() != 2:
            return False
        k_b, n = (b.shape[1], b.shape[0]) if g.b_transposed else (b.shape[0], b.shape[1])
        ok = a.shape[-1] == k_b
        want = list(a.shape[:-1]) + [n]
    if g.bias is not None:
        ok = ok and g.bias[1].shape[0] == want[-1]
    return ok and list(out.shape) == want and min(want + [a.shape[-1]]) > 0


# ---- the epilogue --------------------------------------------------------------------------------

def _epilogue(model: nn.Module, gm: fx.GraphModule, g: _Gemm, info: dict[str, OpNode],
              values: Values) -> Optional[tuple[CandidateRun, Segment]]:
    """The elementwise run with the most work that reads the GEMM's output as its main input and
    holds every reader of it."""
    readers = {u.name for u in g.node.users}
    order = [n for n in gm.graph.nodes if n.name in info and may_fuse(info[n.name])]
    best: Optional[tuple[tuple[int, int], CandidateRun, Segment]] = None
    for comp in connected_groups(order):
        if not readers & {n.name for n in comp}:
            continue
        for start in range(len(comp)):
            for end in range(len(comp), start, -1):
                cand = CandidateRun(comp[start:end])
                if not readers <= cand.names:
                    continue
                seg = segment_of(model, gm, cand, info, values, main_origin=g.node.name)
                if isinstance(seg, str) or seg.kind != SegmentKind.ELEMENTWISE:
                    continue
                score = (sum(1 for n in cand.nodes if info[n.name].role == Role.COMPUTE), len(cand.nodes))
                if best is None or score > best[0]:
                    best = (score, cand, seg)
    return None if best is None else (best[1], best[2])


# ---- the segment ---------------------------------------------------------------------------------

def _gemm_segment(gm: fx.GraphModule, g: _Gemm, epilogue: Optional[tuple[CandidateRun, Segment]],
                  values: dict[str, Any]) -> tuple[Segment, CandidateRun]:
    out = values[g.node.name]
    a, b = g.a[1], g.b[1]
    m = a.shape[1] if g.batched else math.prod(a.shape[:-1])
    n = b.shape[0] if g.b_transposed else b.shape[-1]

    def operand(name: str, v: tuple[str, torch.Tensor, Optional[fx.Node]]) -> KernelArg:
        return KernelArg(name=name, origin=v[0], shape=list(v[1].shape), dtype=FLOAT_DTYPES[v[1].dtype],
                         describe=f"`{v[0]}` in Model.forward, shape {list(v[1].shape)}, {FLOAT_DTYPES[v[1].dtype]}")

    lines = _gemm_lines(gm, g.node)
    spec = GemmSpec(op=g.op, a=operand("kw_a", g.a), b=operand("kw_b", g.b),
                    bias=operand("kw_bias", g.bias) if g.bias else None, b_transposed=g.b_transposed,
                    batched=g.batched, m=m, n=n, k=a.shape[-1], batch=a.shape[0] if g.batched else 1,
                    lines=len(lines))
    notes = [g.module_note] if g.module_note else []
    if epilogue is not None:
        cand_e, seg_e = epilogue
        seg = seg_e.model_copy(update={
            "kind": SegmentKind.GEMM, "nodes": [g.node.name] + seg_e.nodes, "targets": [g.op] + seg_e.targets,
            "torch_lines": lines + seg_e.torch_lines, "module_notes": notes + seg_e.module_notes, "gemm": spec})
        nodes = [g.node] + cand_e.nodes
    else:
        main = KernelArg(name="x", origin=g.node.name, shape=list(out.shape), dtype=FLOAT_DTYPES[out.dtype],
                         main=True, describe=describe_input("x", g.node.name, out, out, True))
        seg = Segment(kind=SegmentKind.GEMM, nodes=[g.node.name], targets=[g.op], args=[main],
                      out_shape=list(out.shape), out_dtype=FLOAT_DTYPES[out.dtype], torch_lines=lines + ["y = x"],
                      module_notes=notes, gemm=spec)
        nodes = [g.node]
    return seg, CandidateRun(nodes)


def _gemm_lines(gm: fx.GraphModule, node: fx.Node) -> list[str]:
    """The reference's line for the GEMM, its result named `x` (the region's name for it), after the
    lines of the parameter reads and views feeding it (`t = self.weight.t()`), so B reads as written;
    commented, under a line saying the kernel computes them before the region."""
    g = fx.Graph()
    env: dict[fx.Node, Any] = {}

    def copy(n: fx.Node) -> Any:
        if n in env:
            return env[n]
        feeds = n.op == "get_attr" or (n.op in ("call_method", "call_function") and _is_view(n))
        if feeds and n is not node:
            for inp in n.all_input_nodes:
                copy(inp)
            env[n] = g.node_copy(n, lambda a: env[a])
        elif n is node:
            for inp in n.all_input_nodes:
                copy(inp)
            env[n] = g.node_copy(n, lambda a: env[a])
        else:
            env[n] = g.placeholder(n.name)
        return env[n]

    result = copy(node)
    g.output(result)
    code = g.python_code(root_module="self").src
    lines = []
    for line in code.splitlines():
        s = line.strip()
        if not s or s.startswith(("def ", "return ")):
            continue
        s = re.sub(r";\s+[\w\s=]+= None$", "", s).replace("torch._C._nn.", "torch.nn.functional.")
        lines.append(s)
    lines[-1] = re.sub(r"^\w+ = ", "x = ", lines[-1])
    # as comments: the region starts after them (the prompt asks for "every line" of what it shows)
    return [GEMM_HEADER] + [f"# {line}" for line in lines]


_VIEWS = {"t", "transpose", "permute", "view", "reshape", "contiguous", "T", "mT"}


def _is_view(n: fx.Node) -> bool:
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    return name in _VIEWS or (n.op == "call_function" and name == "getattr" and len(n.args) > 1 and n.args[1] in _VIEWS)


def _identity_probes(seg: Segment, out: torch.Tensor) -> Any:
    """A lone GEMM's probes: its region is the identity on the accumulator (y = x)."""
    g = fx.Graph()
    g.output(g.placeholder("in0"))
    sub = fx.GraphModule(nn.Module(), g)
    try:
        return probe(seg.epilogue(), sub, [out], ["x"], 0, {}, [])
    except Exception:
        log.warning("no probes for a lone gemm", exc_info=True)
        return None
