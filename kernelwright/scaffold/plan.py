"""Find the region a kernel should replace, and write the ModelNew around it (child-process side).

Runs on a traced reference (torch.fx + one run on the example inputs, fake: shapes, dtypes and the
segment's code come from the full-size trace without allocating it; the checks that need values
run on a reduced copy of the same run on the CPU, reduce.py):

1. Candidate segments are connected runs of elementwise / reduction / normalization nodes
   (casts and no-op calls included) with exactly one value leaving the run.
2. Each candidate is re-run on its own as a small GraphModule. Its main input is the largest
   tensor it reads; every other tensor must broadcast to it. The kind is then *measured*, not
   read off a table: a few elements of the main input are perturbed and the output may change
   only at the same element (elementwise) or inside the same row, where a row is the smallest
   trailing block of dims that keeps every change local (softmax and norms over the last dim,
   a mean over H*W, a scan along a row). Ops whose kind the table gets wrong, batch statistics
   for instance, fail this test instead of producing a wrong kernel.
3. The largest segment that passes wins. The fx graph is rewritten with that segment replaced by
   one call, `kw_fused(main, *extras)`, and printed back to Python: that is ModelNew.forward.
   ModelNew.__init__ is the reference's own (same statements, same order, hence the same
   parameters from the same seed), and the reference's module-level code comes along so the
   names it uses resolve.
"""

from __future__ import annotations

import ast
import keyword
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import fx, nn

from kernelwright.analysis import ops
from kernelwright.analysis.graph import ShapeError, trace_fx
from kernelwright.analysis.shapes import fake_mode_of
from kernelwright.analysis.types import OpGraph, OpKind, OpNode, Role
from kernelwright.measure.draw import SEED
from kernelwright.child import one_line
from kernelwright.scaffold.probes import constants, probe
from kernelwright.scaffold.reduce import LIMIT_BYTES, ROWS_LIMIT_BYTES, reduce
from kernelwright.scaffold.semantics import notes_for
from kernelwright.scaffold.types import KernelArg, Probes, ScaffoldPlan, Segment, SegmentKind

log = logging.getLogger(__name__)

FLOAT_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
RANDOM_OPS = frozenset({"dropout", "rand", "randn", "bernoulli", "multinomial"})
# Names the skeletons use themselves; an input called like this gets a suffix.
RESERVED = frozenset({"x", "y", "i", "j", "n", "row", "rows", "cols", "out", "offs", "mask", "pid", "idx",
                      "BLOCK", "tl", "triton", "torch", "float", "int", "auto", "const", "return", "kw_fused"})
PROBES = 4  # perturbed elements per locality test


class _Fused:
    """Stands in for the kernel in the rewritten fx graph; printed back as `kw_fused`."""

    __name__ = "kw_fused_placeholder"
    __qualname__ = __name__
    __module__ = "kernelwright_scaffold"

    def __call__(self, *args: Any) -> Any:  # never run: the graph is only printed
        raise RuntimeError("placeholder")


_FUSED = _Fused()


class NoValues(Exception):
    """The reduced run cannot be made (reduce.py says why)."""


@dataclass
class Values:
    """Every fx node's value twice: ``shapes`` from the full-size run (fake tensors: what the plan
    says about shapes, and the constants its code bakes in) and ``real`` from the reduced run
    (real tensors on the CPU: what its checks and probes compute on), run when first asked for:
    a module with no candidate segment needs none. ``rows_of(node, k)`` is another reduced run in
    which the last ``k`` dims of ``node`` keep their full sizes: a row segment's probes are rows of
    the length the evaluator's are (a region that counts masked lanes is wrong only on some)."""

    shapes: dict[str, Any]
    _reduce: Callable[[Optional[tuple[str, int]]], Any]
    _real: Optional[dict[str, Any]] = None

    @property
    def real(self) -> dict[str, Any]:
        if self._real is None:
            self._real = self._values(None)
        return self._real

    def rows_of(self, node: str, k: int) -> dict[str, Any]:
        return self._values((node, k))

    def _values(self, keep: Optional[tuple[str, int]]) -> dict[str, Any]:
        reduced = self._reduce(keep)
        if isinstance(reduced, str):
            raise NoValues(reduced)
        return reduced


def plan_segment(task_id: str, module: Any, model: nn.Module, inputs: Sequence[Any],
                 source: str, seed: int = SEED) -> tuple[ScaffoldPlan, set[str], Optional[Values]]:
    """The plan of the best elementwise/row segment for ``model`` (built from ``module``'s ``Model``)
    on ``inputs`` (fake, drawn by ``module.get_inputs``), the fx nodes it covers, and the traced
    values (compose.plan adds the GEMM alternative on top)."""
    try:
        gm, graph = trace_fx(model, inputs)
    except ShapeError as e:
        return _none(task_id, f"forward fails on its inputs' shapes ({one_line(e)}); "
                              "the model writes the whole program"), set(), None
    except Exception as e:  # control flow on shapes etc.: no graph to rewrite
        return _none(task_id, f"forward does not trace with torch.fx ({one_line(e)}); "
                              "the model writes the whole program"), set(), None
    def real(keep: Optional[tuple[str, int]]) -> dict[str, Any] | str:
        reduced = reduce(gm, model, inputs, module.get_inputs, seed, keep,
                         LIMIT_BYTES if keep is None else ROWS_LIMIT_BYTES)
        return reduced if isinstance(reduced, str) else _run_keeping_values(gm, reduced.inputs)

    values = Values(shapes=_run_keeping_values(gm, inputs), _reduce=real)
    try:
        result, covered = _plan_segment(task_id, module, model, gm, graph, values, source)
    except NoValues as e:
        return _none(task_id, f"no values to check a segment on: {e}; the model writes the whole program"), set(), None
    return result, covered, values


def _plan_segment(task_id: str, module: Any, model: nn.Module, gm: fx.GraphModule, graph: OpGraph,
                  values: Values, source: str) -> tuple[ScaffoldPlan, set[str]]:
    """The plan of the best segment, and the fx nodes that segment covers (none without one)."""
    found = _best_segment(model, gm, graph, values)
    if isinstance(found, str):
        return _none(task_id, found), set()
    seg, chosen = found
    probes = probes_for(gm, seg, chosen, values)  # first: a row segment's probes run gm, which the rewrite changes
    try:
        prelude, model_new = rewrite_model(gm, model, seg, chosen, source, module.__name__)
    except RewriteError as e:
        return _none(task_id, f"cannot print the rewritten forward: {e}; the model writes the whole program"), set()
    what = " -> ".join(seg.targets)
    where = (f"one row of {seg.cols} values per program ({seg.rows} rows)" if seg.kind == SegmentKind.ROW
             else f"{math.prod(seg.out_shape)} elements")
    return ScaffoldPlan(task_id=task_id, available=True, reason=f"{seg.kind.value} kernel for {what} over {where}",
                        segment=seg, prelude=prelude, model_new=model_new, probes=probes), set(seg.nodes)


def probes_for(gm: fx.GraphModule, seg: Segment, cand: "CandidateRun", values: Optional[Values] = None
            ) -> Optional[Probes]:
    """The pre-check's probes; a plan without them is still a plan (the pre-check then answers
    `unsupported` and the evaluator decides)."""
    assert cand.run is not None
    sub, call_args, call_names, main_pos, fixed = cand.run
    if seg.kind == SegmentKind.ROW and values is not None:
        srcs = cand.srcs
        try:  # rows of their full length, fewer of them
            rows = values.rows_of(srcs[main_pos].name, seg.row_dims)
            sub = _subgraph(gm, cand, cand.outs[0], srcs, rows)
            call_args = [rows[n.name] for n in srcs]
        except NoValues:
            log.info("row probes from the reduced run: %s", seg.targets)
        main = call_args[main_pos]
        cols = math.prod(main.shape[main.dim() - seg.row_dims:])
        seg = seg.model_copy(update={"cols": cols, "rows": main.numel() // max(1, cols)})
    try:
        return probe(seg, sub, call_args, call_names, main_pos, fixed, constants(gm, cand.nodes, seg.targets))
    except Exception:  # a segment whose ops reject the probe values: no pre-check for it
        log.warning("no probes for %s", seg.targets, exc_info=True)
        return None


def _none(task_id: str, reason: str) -> ScaffoldPlan:
    return ScaffoldPlan(task_id=task_id, available=False, reason=reason)


class RewriteError(Exception):
    """ModelNew cannot be written around the run (the forward uses something the rewrite cannot carry)."""


# ---- running the graph ---------------------------------------------------------------------------

def _run_keeping_values(gm: fx.GraphModule, inputs: Sequence[Any]) -> dict[str, Any]:
    interp = fx.Interpreter(gm, garbage_collect_values=False)
    with torch.no_grad(), fake_mode_of(inputs):
        interp.run(*inputs)
    return {n.name: v for n, v in interp.env.items()}


# ---- finding segments ----------------------------------------------------------------------------

def may_fuse(node: OpNode) -> bool:
    if node.target in RANDOM_OPS or len(node.outputs) != 1:
        return False
    if node.outputs[0].dtype not in FLOAT_DTYPES.values():
        return False
    if node.role == Role.NOOP:
        return True
    return node.role == Role.COMPUTE and node.kind in ops.FUSIBLE_KINDS


class CandidateRun:
    """A run of fusible nodes tried as one kernel's region (plan.py and gemm_plan.py both grow them)."""

    def __init__(self, nodes: list[fx.Node]):
        self.nodes = nodes
        # how the run was re-run on its own (set once it passes): what the probes need
        self.run: Optional[tuple[fx.GraphModule, list[torch.Tensor], list[str], int, dict[str, torch.Tensor]]] = None
        self.srcs: list[fx.Node] = []  # the fx nodes of the run's call arguments, in order
        self.names = {n.name for n in nodes}
        # what a node's metadata is (`h.dtype` in `.to(h.dtype)`) is fixed when the graph is traced,
        # not a value the run must hand out: such reads, used only inside the run, are part of it.
        # Else a residual add whose dtype the end casts back to is left outside the kernel (an
        # extra pass over three tensors: RMSNorm+residual bf16 ran at 0.58x torch.compile on an H200).
        self.meta = {u.name: u for n in nodes for u in n.users
                     if _metadata_read(u) and u.users and all(w.name in self.names for w in u.users)}
        # the values read outside the run (a valid segment has exactly one)
        self.outs = [n for n in nodes if any(u.name not in self.names and u.name not in self.meta for u in n.users)]


_METADATA = frozenset({"dtype", "shape", "device", "ndim", "is_cuda"})


def _metadata_read(n: fx.Node) -> bool:
    """`t.dtype`, `t.shape`, `t.size()`, `t.dim()`: what the trace fixed, not the tensor's values."""
    if n.op == "call_function" and n.target is getattr:
        return len(n.args) == 2 and n.args[1] in _METADATA
    return n.op == "call_method" and n.target in ("size", "dim")


def _best_segment(model: nn.Module, gm: fx.GraphModule, graph: OpGraph,
                  values: Values) -> tuple[Segment, CandidateRun] | str:
    info = {n.name: n for n in graph.nodes}
    order = [n for n in gm.graph.nodes if n.name in info and may_fuse(info[n.name])]
    if not order:
        return "no elementwise, reduction or normalization op outside library calls; the model writes the whole program"
    components = connected_groups(order)
    best: Optional[tuple[tuple[int, int], Segment, CandidateRun]] = None
    rejected: list[str] = []
    for comp in components:
        for start in range(len(comp)):
            for end in range(len(comp), start, -1):
                cand = CandidateRun(comp[start:end])
                seg = segment_of(model, gm, cand, info, values)
                if isinstance(seg, str):
                    rejected.append(seg)
                    continue
                work = sum(1 for n in cand.nodes if info[n.name].role == Role.COMPUTE)
                score = (work, math.prod(seg.main.shape))
                if best is None or score > best[0]:
                    best = (score, seg, cand)
    if best is None:
        why = rejected[0] if rejected else "no candidate"
        return f"no fusible region passed the checks ({why}); the model writes the whole program"
    return best[1], best[2]


def connected_groups(order: list[fx.Node]) -> list[list[fx.Node]]:
    """Allowed nodes grouped by data edges between them, each group in execution order."""
    parent = {n.name: n.name for n in order}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for n in order:
        for inp in n.all_input_nodes:
            if inp.name in parent:
                parent[find(inp.name)] = find(n.name)
    groups: dict[str, list[fx.Node]] = {}
    for n in order:
        groups.setdefault(find(n.name), []).append(n)
    return list(groups.values())


def segment_of(model: nn.Module, gm: fx.GraphModule, cand: CandidateRun, info: dict[str, OpNode],
             values: Values, main_origin: Optional[str] = None) -> Segment | str:
    """The run as a segment, or why not. ``main_origin``: the value that must be its main input
    (a GEMM's output, for the epilogue of a `gemm` segment); else the largest tensor it reads.
    Shapes and dtypes are the full-size run's; the run alone and its layout are measured on the
    reduced one."""
    if len(cand.outs) != 1:
        return f"{len(cand.outs)} values leave the run"
    out_node = cand.outs[0]
    out = values.shapes[out_node.name]
    if not isinstance(out, torch.Tensor) or out.dtype not in FLOAT_DTYPES:
        return "the run's result is not a float tensor"
    # What the run reads: fx values from outside it, and the parameters of modules it calls.
    externals: list[tuple[str, Any, Optional[fx.Node]]] = []  # (origin, value, producing node)
    seen: set[str] = set()
    for n in cand.nodes:
        for inp in n.all_input_nodes:
            if inp.name not in cand.names and inp.name not in seen:
                seen.add(inp.name)
                origin = str(inp.target) if inp.op == "get_attr" else inp.name
                externals.append((origin, values.shapes.get(inp.name), inp))
        if n.op == "call_module":
            for pname, p in _module_tensors(gm.get_submodule(str(n.target))):
                externals.append((f"{n.target}.{pname}", p.detach(), None))
    tensors = [(o, v, src) for o, v, src in externals if isinstance(v, torch.Tensor)]
    if not tensors:
        return "the run reads no tensor"
    for o, v, _ in externals:
        if not isinstance(v, torch.Tensor) and _holds_tensor(v):
            return f"{o} is a collection of tensors"
    for o, v, _ in tensors:
        if v.dtype not in FLOAT_DTYPES:
            return f"{o} has dtype {v.dtype}"
    if main_origin is not None:
        if main_origin not in [o for o, _, _ in tensors]:
            return f"the run does not read {main_origin}"
        main_i = [o for o, _, _ in tensors].index(main_origin)
    else:
        main_i = max(range(len(tensors)), key=lambda i: (tensors[i][1].numel(), tensors[i][2] is not None, -i))
    main = tensors[main_i][1]
    for o, v, _ in tensors:
        try:
            if tuple(torch.broadcast_shapes(v.shape, main.shape)) != tuple(main.shape):
                return f"{o} {list(v.shape)} does not broadcast to the main input {list(main.shape)}"
        except RuntimeError:
            return f"{o} {list(v.shape)} does not broadcast to the main input {list(main.shape)}"
    sub = _subgraph(gm, cand, out_node, [src for _, _, src in tensors if src is not None], values.real)
    call_args = [values.real[src.name] for _, _, src in tensors if src is not None]
    real_out = values.real[out_node.name]
    with torch.no_grad():
        again = sub(*call_args)
    if not _same(again, real_out):
        return "re-running the run alone does not reproduce its value"
    elementwise = all(info[n.name].kind == OpKind.ELEMENTWISE or info[n.name].role == Role.NOOP for n in cand.nodes)
    main_pos = [src for _, _, src in tensors if src is not None].index(tensors[main_i][2]) \
        if tensors[main_i][2] is not None else None
    if main_pos is None:
        return "the main input is a parameter of a module call inside the run"
    layout = _layout(sub, call_args, main_pos, real_out, elementwise)
    if isinstance(layout, str):
        return layout
    kind, k, per_row, keepdim = layout
    names = _names([o for o, _, _ in tensors], main_i)
    args = [KernelArg(name=names[i], origin=o, shape=list(v.shape), dtype=FLOAT_DTYPES[v.dtype], main=i == main_i,
                      pattern=_pattern(v, main), describe=describe_input(names[i], o, v, main, i == main_i))
            for i, (o, v, _) in enumerate(tensors)]
    args.sort(key=lambda a: not a.main)  # the main input first: every signature the skeletons write
    cols = math.prod(main.shape[main.dim() - k:]) if kind == SegmentKind.ROW else 1
    lines, module_notes = _torch_lines(gm, cand, out_node, tensors, names, values.shapes)
    call_names = [names[i] for i, (_, _, src) in enumerate(tensors) if src is not None]
    fixed = {names[i]: v for i, (_, v, src) in enumerate(tensors) if src is None}
    cand.run = (sub, call_args, call_names, main_pos, fixed)
    cand.srcs = [src for _, _, src in tensors if src is not None]
    targets = [info[n.name].target for n in cand.nodes if info[n.name].role == Role.COMPUTE]
    return Segment(kind=kind, nodes=[n.name for n in cand.nodes], targets=targets, args=args,
                   out_shape=list(out.shape), out_dtype=FLOAT_DTYPES[out.dtype], row_dims=k,
                   rows=main.numel() // max(1, cols) if kind == SegmentKind.ROW else 0,
                   cols=cols if kind == SegmentKind.ROW else 0, per_row_output=per_row, out_keepdim=keepdim,
                   torch_lines=lines, module_notes=module_notes, op_notes=notes_for(targets, lines + module_notes))


def _module_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(n, p) for n, p in list(module.named_parameters()) + list(module.named_buffers())
            if isinstance(p, torch.Tensor) and p.dtype.is_floating_point]


def _holds_tensor(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return any(isinstance(x, torch.Tensor) or _holds_tensor(x) for x in v)
    return False


def _same(a: Any, b: torch.Tensor) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a.nan_to_num(), b.nan_to_num())


def _subgraph(gm: fx.GraphModule, cand: CandidateRun, out_node: fx.Node, inputs: list[fx.Node],
              values: dict[str, Any]) -> fx.GraphModule:
    """The run alone: placeholders for the tensors it reads, other outside values baked in."""
    g = fx.Graph()
    env: dict[fx.Node, Any] = {}
    for i, inp in enumerate(inputs):
        env[inp] = g.placeholder(f"in{i}")

    def arg(node: fx.Node) -> Any:
        return env[node] if node in env else values[node.name]

    for n in cand.nodes:
        env[n] = g.node_copy(n, arg)
    g.output(env[out_node])
    return fx.GraphModule(gm, g)


def _layout(sub: fx.GraphModule, call_args: list[torch.Tensor], main_pos: int, out: torch.Tensor,
            elementwise: bool) -> tuple[SegmentKind, int, bool, bool] | str:
    """(kind, trailing dims per row, one value per row, keepdim), measured by perturbation."""
    main = call_args[main_pos]
    if elementwise:
        if tuple(out.shape) != tuple(main.shape):
            return f"elementwise result {list(out.shape)} is not shaped like its main input {list(main.shape)}"
        return (SegmentKind.ELEMENTWISE, 0, False, False) if _local(sub, call_args, main_pos, out, 1, False) \
            else "an elementwise-looking run is not elementwise"
    for k in range(1, main.dim() + 1):
        cols = math.prod(main.shape[main.dim() - k:])
        rows = main.numel() // cols
        if tuple(out.shape) == tuple(main.shape):
            per_row, keepdim = False, False
        elif out.numel() == rows and rows > 0:
            per_row = True
            keepdim = out.dim() == main.dim()
            expected = list(main.shape[:main.dim() - k]) + ([1] * k if keepdim else [])
            if list(out.shape) != expected:
                continue
        else:
            continue
        if _local(sub, call_args, main_pos, out, cols, per_row):
            return SegmentKind.ROW, k, per_row, keepdim
    return "no row layout keeps its output local (it mixes rows, e.g. batch statistics or pooling windows)"


def _local(sub: fx.GraphModule, call_args: list[torch.Tensor], main_pos: int, out: torch.Tensor, cols: int,
           per_row: bool) -> bool:
    """Perturbing element p of the main input changes only row p // cols of the output."""
    main = call_args[main_pos]
    gen = torch.Generator().manual_seed(1234)
    base = out.reshape(-1).float().nan_to_num()
    for p in torch.randint(0, main.numel(), (PROBES,), generator=gen).tolist():
        bumped = main.clone().reshape(-1)
        bumped[p] = bumped[p] + 1.0 + bumped[p].abs()
        args = list(call_args)
        args[main_pos] = bumped.view(main.shape)
        with torch.no_grad():
            got = sub(*args).reshape(-1).float().nan_to_num()
        changed = (got != base).nonzero().flatten()
        if changed.numel() == 0:
            continue
        row = p // cols
        lo, hi = (row, row + 1) if per_row else (row * cols, (row + 1) * cols)
        if int(changed.min()) < lo or int(changed.max()) >= hi:
            return False
    return True


def _pattern(v: torch.Tensor, main: torch.Tensor) -> str:
    if tuple(v.shape) == tuple(main.shape):
        return "same"
    if v.numel() == 1:
        return "scalar"
    return "broadcast"


def _names(origins: list[str], main_i: int) -> list[str]:
    names: list[str] = []
    for i, origin in enumerate(origins):
        if i == main_i:
            names.append("x")
            continue
        base = re.sub(r"\W", "_", origin.split(".")[-1]) or "t"
        if base[0].isdigit():
            base = "t" + base
        name = base
        if name in RESERVED or keyword.iskeyword(name) or name in names or name in origins[:i]:
            prefix = re.sub(r"\W", "_", origin.rsplit(".", 1)[0]) if "." in origin else ""
            name = f"{prefix}_{base}" if prefix and f"{prefix}_{base}" not in names else f"{base}_in"
        k = 2
        while name in names or name in RESERVED:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return names


def describe_input(name: str, origin: str, v: torch.Tensor, main: torch.Tensor, is_main: bool) -> str:
    """How the region sees one input, in words (the variable name is printed by the template)."""
    shape = list(v.shape)
    where = "" if origin == name else f" (`{origin}` in Model.forward)"
    if is_main:
        return f"x{where}, shape {shape}, {FLOAT_DTYPES[v.dtype]}"
    rel = ("same shape as x" if tuple(v.shape) == tuple(main.shape)
           else "a single value" if v.numel() == 1 else f"broadcast against x {list(main.shape)}")
    return f"{name}{where}, shape {shape}, {FLOAT_DTYPES[v.dtype]}, {rel}"


# ---- the reference's lines for the segment -------------------------------------------------------

def _torch_lines(gm: fx.GraphModule, cand: CandidateRun, out_node: fx.Node,
                 tensors: list[tuple[str, Any, Optional[fx.Node]]], names: list[str],
                 values: dict[str, Any]) -> tuple[list[str], list[str]]:
    g = fx.Graph()
    env: dict[fx.Node, Any] = {}
    param_names: dict[str, str] = {}
    for (origin, _, src), name in zip(tensors, names, strict=True):
        if src is not None:
            env[src] = g.placeholder(name)
        else:
            param_names[origin] = name
    for n in cand.nodes:
        env[n] = g.node_copy(n, lambda a: env[a] if a in env else values[a.name])
    g.output(env[out_node])
    code = g.python_code(root_module="self").src
    lines = []
    for line in code.splitlines():
        s = line.strip()
        if not s or s.startswith(("def ", "return ")):
            if s.startswith("return "):
                lines.append(f"y = {s[len('return '):]}")
            continue
        s = re.sub(r";\s+[\w\s=]+= None$", "", s)
        s = s.replace("torch._C._nn.", "torch.nn.functional.")
        lines.append(s)
    notes = []
    for n in cand.nodes:
        if n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            held = [f"{pname} is `{param_names[f'{n.target}.{pname}']}`" for pname, _ in _module_tensors(mod)
                    if f"{n.target}.{pname}" in param_names]
            notes.append(f"self.{n.target} = {mod!r}" + (f"; its {', '.join(held)}" if held else ""))
    return lines, notes


# ---- ModelNew ------------------------------------------------------------------------------------

def rewrite_model(gm: fx.GraphModule, model: nn.Module, seg: Segment, cand: CandidateRun, source: str,
             module_name: str, call: Optional[list[str]] = None) -> tuple[str, str]:
    """(prelude, ModelNew) with ``cand`` replaced by `kw_fused(...)` on the values ``call`` names
    (fx node names or parameter paths); by default the segment's args, the main input first."""
    g = gm.graph
    by_name = {n.name: n for n in g.nodes}
    last = cand.nodes[-1]
    out_node = cand.outs[0]
    ordered: list[fx.Node] = []
    cursor = last
    # seg.args has the main input first (sorted in segment_of): the call's order
    for origin in call if call is not None else [a.origin for a in seg.args]:
        if origin in by_name and by_name[origin].name not in cand.names:
            ordered.append(by_name[origin])
            continue
        node = next((n for n in g.nodes if n.op == "get_attr" and n.target == origin), None)
        if node is None:
            with g.inserting_after(cursor):
                node = g.get_attr(origin)
            cursor = node
        ordered.append(node)
    with g.inserting_after(cursor):
        fused = g.create_node("call_function", _FUSED, tuple(ordered), name="fused")
    out_node.replace_all_uses_with(fused)
    for n in reversed(cand.nodes):
        for u in list(n.users):
            if u.name in cand.meta:  # its readers in the run are gone already (they come after it)
                g.erase_node(u)
        g.erase_node(n)
    g.eliminate_dead_code()
    g.lint()
    pc = g.python_code(root_module="self")
    forward = _resolve_globals(pc.src, pc.globals, module_name)
    return _prelude(source), _model_new(source, forward)


def _resolve_globals(src: str, globals_: dict[str, Any], module_name: str) -> str:
    header: list[str] = []
    for name, value in globals_.items():
        if not re.search(rf"\b{re.escape(name)}\b", src):
            continue
        if isinstance(value, str):  # a type annotation fx stored as text, e.g. torch.Tensor
            src = re.sub(rf"\b{re.escape(name)}\b", value, src)
        elif value is _FUSED:
            src = re.sub(rf"\b{re.escape(name)}\(", "kw_fused(", src)
        elif value is torch or name in ("torch",):
            continue
        elif name in ("inf", "nan"):
            header.append(f"{name} = float({name!r})")
        elif name == "device" and value is torch.device:
            header.append("device = torch.device")
        elif getattr(value, "__module__", None) in (module_name, "builtins") and hasattr(value, "__name__"):
            # defined in the copied reference code, or a builtin: in scope under its own name
            if value.__name__ != name:
                header.append(f"{name} = {value.__name__}")
        elif isinstance(getattr(value, "__module__", None), str) and "." not in getattr(value, "__qualname__", "."):
            header.append(f"from {value.__module__} import {value.__qualname__} as {name}")
        else:
            raise RewriteError(f"the forward uses {name} ({type(value).__name__})")
    # fx frees dead values with `;  a = b = None`: noise in code a person reads
    body = [re.sub(r";\s+[\w\s=]+= None$", "", ln) for ln in src.strip("\n").splitlines()]
    body = [ln for ln in body if not re.fullmatch(r"\s+[\w\s=]+= None", ln)]
    if header:
        indent = "    "
        # globals become locals at the top of forward: the candidate module stays self-contained
        def_i = next(i for i, ln in enumerate(body) if ln.startswith("def forward"))
        body[def_i + 1:def_i + 1] = [indent + h for h in header]
    return "\n".join(body)


def _cut(source: str, keep: Callable[[ast.stmt], bool]) -> str:
    tree = ast.parse(source)
    lines = source.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        if not keep(node):
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            drop.update(range(start - 1, node.end_lineno or node.lineno))
    return "\n".join(ln for i, ln in enumerate(lines) if i not in drop)


def _prelude(source: str) -> str:
    """The reference file without Model and its input functions: imports, constants, helpers."""
    def keep(node: ast.stmt) -> bool:
        return not (isinstance(node, (ast.ClassDef, ast.FunctionDef)) and
                    node.name in ("Model", "get_inputs", "get_init_inputs"))
    text = _cut(source, keep)
    return re.sub(r"\n{3,}", "\n\n\n", text).strip() + "\n"


class _RenameModel(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "Model":
            return ast.copy_location(ast.Name(id="ModelNew", ctx=node.ctx), node)
        return node


def _model_new(source: str, forward: str) -> str:
    tree = ast.parse(source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if cls is None:
        raise RewriteError("no class Model in the source")
    fwd = ast.parse(forward).body[0]
    body = [s for s in cls.body if not (isinstance(s, ast.FunctionDef) and s.name == "forward")]
    new = ast.ClassDef(name="ModelNew", bases=cls.bases, keywords=cls.keywords, body=body + [fwd],
                       decorator_list=[], type_params=[])
    new = _RenameModel().visit(new)
    ast.fix_missing_locations(new)
    return ast.unparse(new) + "\n"
