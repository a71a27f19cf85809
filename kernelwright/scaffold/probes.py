"""Probe inputs for a segment and what PyTorch computes on them (planning-child side).

The pre-check (precheck.py) runs a region answer on these values and compares with the result
stored here, so it needs neither torch nor the reference: the segment is run here, once per plan,
by the same fx subgraph the planner measured.

The probes are written into the real inputs (same shapes, dtypes and broadcasting as the
evaluator's), so ops with shapes baked in (views, a norm's weight) run as they do in the model:

* elementwise: up to ``ELEMENTS`` positions of the main input get edge values (0, -0, +-tiny,
  +-1, the magnitudes of the real input and several times them), the numeric constants of the
  segment's ops and the kinks of its activations (a clamp bound, a softplus threshold, hardswish's
  +-3) with values just beside them, a sweep across the whole range, and real values. Extra inputs
  get edge values at some of those positions and keep their real values at the others. The kinks
  are also found in the main input's units, where they lie behind other ops (a clamp after a scale
  or after mish): the main input values at which each kinked op's input reaches its kink, and
  values just beside them.
* row: up to ``ROWS`` rows: a real row, a constant row, a zero row, a real row with one large
  value, the real row negated, and a row of the elementwise edge values.

"Large" is relative to the real input (up to 4x its largest magnitude, at least 8): the evaluator
draws inputs like the planner's, so values far outside them would flag kernels the evaluator finds
correct (log(1 + exp(v)) for softplus overflows at v = 89, which no drawn input reaches).
"""

from __future__ import annotations

import base64
import math
from typing import Any, Callable, Optional

import torch
from torch import fx

from kernelwright.analysis import ops
from kernelwright.scaffold import decompose
from kernelwright.scaffold.types import Probes, Segment, SegmentKind, StepPart

ELEMENTS = 512
ROWS = 6
SWEEP = 97
# Kinks of activations whose constants are not arguments (in their input's units).
IMPLICIT_KINKS = {"relu": [0.0], "relu6": [0.0, 6.0], "hardtanh": [-1.0, 1.0], "hardswish": [-3.0, 3.0],
                  "hardsigmoid": [-3.0, 3.0], "leaky_relu": [0.0], "elu": [0.0], "selu": [0.0], "celu": [0.0],
                  "softplus": [20.0], "threshold": [], "clamp": [], "where": [0.0], "abs": [0.0], "sign": [0.0]}
MODULE_CONSTANTS = ("min_val", "max_val", "threshold", "beta", "negative_slope", "alpha", "lambd", "value")
# Ops whose numeric arguments are where their output bends or jumps (a clamp's bounds, a comparison's
# constant), as opposed to scales and offsets (mul, add).
KINK_OPS = frozenset(IMPLICIT_KINKS) | {"gt", "lt", "ge", "le", "eq", "ne", "clamp_min", "clamp_max", "hardshrink",
                                        "softshrink"}
KINK_SEARCH = 48  # elementwise: positions used to find the kinks in the main input's units
BISECT_STEPS = 30


def encode(values: torch.Tensor) -> str:
    return base64.b64encode(values.detach().float().contiguous().cpu().numpy().astype("<f4").tobytes()).decode()


def constants(gm: fx.GraphModule, nodes: list[fx.Node], targets: list[str]) -> list[float]:
    """Numeric constants of the segment's ops and the kinks of its activations."""
    found: list[float] = []

    def walk(v: Any) -> None:
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)) and math.isfinite(v):
            found.append(float(v))
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    for n in nodes:
        walk(list(n.args) + list(n.kwargs.values()))
        if n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            walk([getattr(mod, a) for a in MODULE_CONSTANTS if hasattr(mod, a)])
    for t in targets:
        found += IMPLICIT_KINKS.get(t, [])
    # integer arguments are mostly dims; keep them anyway (a dim of 1 is a harmless probe value)
    return sorted(set(found))


def _numbers(values: list[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _kink_ops(sub: fx.GraphModule) -> list[tuple[fx.Node, float]]:
    """(the op's input, the value of that input where the op bends or jumps), per kinked op."""
    found = []
    for n in sub.graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module") or not n.args \
                or not isinstance(n.args[0], fx.Node):
            continue
        if n.op == "call_module":
            mod = sub.get_submodule(str(n.target))
            name, extra = ops.module_canonical(type(mod).__name__), [getattr(mod, a, None) for a in MODULE_CONSTANTS]
        else:
            name = ops.canonical(n.target if isinstance(n.target, str) else getattr(n.target, "__name__", ""))
            extra = []
        if name not in KINK_OPS:
            continue
        for c in set(_numbers(list(n.args[1:]) + list(n.kwargs.values()) + extra) + IMPLICIT_KINKS.get(name, [])):
            found.append((n.args[0], c))
    return found


def _locate_kinks(sub: fx.GraphModule, args: list[torch.Tensor], main_pos: int, where: torch.Tensor,
                  top: float) -> list[float]:
    """Main-input values at which an op of the segment reaches its kink (the op may sit behind a
    scale, a bias or another activation: `clamp(mish(x), -0.25, 1.5)` bends where mish(x) = 1.5).
    All positions in ``where`` get the extra inputs of the first one, so they see one function of
    x; a sweep finds the sign changes of (op input - kink) and bisection pins them down."""
    kinks = _kink_ops(sub)
    if not kinks:
        return []
    main = args[main_pos]
    flat = main.reshape(-1)
    for i, a in enumerate(args):
        if i != main_pos and a.numel() > 1:
            a.reshape(-1)[_source_index(a, main.shape, where)] = a.reshape(-1)[_source_index(a, main.shape, where[:1])]

    def inputs_at(xs: torch.Tensor) -> list[torch.Tensor]:
        flat[where[:len(xs)]] = xs.to(flat.dtype)
        interp = fx.Interpreter(sub, garbage_collect_values=False)
        interp.run(*args)
        out = []
        for node, c in kinks:
            v = interp.env.get(node)
            ok = isinstance(v, torch.Tensor) and v.numel() == main.numel()
            out.append(v.reshape(-1)[where[:len(xs)]].double() - c if ok else torch.zeros(len(xs), dtype=torch.float64))
        return out

    grid = torch.linspace(-top, top, len(where), dtype=torch.float64, device=main.device)
    lo, hi, which = [], [], []
    for k, h in enumerate(inputs_at(grid)):
        for j in torch.nonzero((h[:-1] * h[1:]) < 0).flatten().tolist():
            lo.append(grid[j])
            hi.append(grid[j + 1])
            which.append(k)
    if not which:
        return []
    lo_t, hi_t = torch.stack(lo[:len(where)]), torch.stack(hi[:len(where)])
    which = which[:len(where)]
    for _ in range(BISECT_STEPS):
        mid = (lo_t + hi_t) / 2
        at_mid = inputs_at(mid)
        at_lo = inputs_at(lo_t)
        for i, k in enumerate(which):
            if at_lo[k][i] * at_mid[k][i] <= 0:
                hi_t[i] = mid[i]
            else:
                lo_t[i] = mid[i]
    return sorted(set(((lo_t + hi_t) / 2).tolist()))


def _edges(scale: float, consts: list[float]) -> list[float]:
    vals = [0.0, -0.0, 1e-6, -1e-6, 1.0, -1.0, 0.5, -0.5]
    for k in (0.25, 1.0, 2.0, 4.0):
        vals += [k * scale, -k * scale]
    for c in consts:
        d = 1e-3 * max(1.0, abs(c))
        vals += [c, c - d, c + d, -c]
    return vals


def _scale(t: torch.Tensor) -> float:
    finite = t.float()[torch.isfinite(t.float())]
    return max(1.0, float(finite.abs().max())) if finite.numel() else 1.0


def probe(seg: Segment, sub: fx.GraphModule, call_args: list[torch.Tensor], arg_names: list[str],
          main_pos: int, fixed: dict[str, torch.Tensor], consts: list[float]) -> Probes:
    """Probes for ``seg``: ``sub`` is its fx subgraph, run on ``call_args`` (named ``arg_names``,
    the main input at ``main_pos``). ``fixed`` are the args that are parameters of modules the
    segment calls: they are not inputs of ``sub`` and keep their real values."""
    gen = torch.Generator().manual_seed(4321)
    scale = _scale(call_args[main_pos])
    with torch.no_grad():
        if seg.kind == SegmentKind.ELEMENTWISE:
            p = _elementwise(sub, call_args, arg_names, main_pos, fixed, consts, scale, gen, seg.targets)
        else:
            p = _rows(seg, sub, call_args, arg_names, main_pos, fixed, consts, scale, gen)
    missing = {a.name for a in seg.args} - set(p.inputs)
    assert not missing, f"probes lack {missing}"
    return p


def _source_index(v: torch.Tensor, shape: torch.Size, flat: torch.Tensor) -> torch.Tensor:
    """For flat positions of the main input (shape ``shape``), the flat positions in ``v``
    (contiguous) that broadcasting reads there. Index arithmetic only: a full-size broadcast
    would materialize a tensor as large as the main input for every arg."""
    dims = [1] * (len(shape) - v.dim()) + list(v.shape)
    src = torch.zeros_like(flat)
    rest = flat.clone()
    stride = 1
    for d in reversed(range(len(shape))):
        coord = rest % shape[d]
        rest = rest // shape[d]
        if dims[d] != 1:
            src += coord * stride
        stride *= dims[d]
    return src


def _gather(v: torch.Tensor, shape: torch.Size, flat: torch.Tensor) -> torch.Tensor:
    v = v.contiguous()
    return v.reshape(-1)[_source_index(v, shape, flat.to(v.device))]


def _writable(call_args: list[torch.Tensor]) -> list[torch.Tensor]:
    """Contiguous copies, so writes through flat views reach the tensors the subgraph reads."""
    return [a.clone(memory_format=torch.contiguous_format) for a in call_args]


def _elementwise(sub: fx.GraphModule, call_args: list[torch.Tensor], arg_names: list[str], main_pos: int,
                 fixed: dict[str, torch.Tensor], consts: list[float], scale: float, gen: torch.Generator,
                 targets: list[str]) -> Probes:
    main = call_args[main_pos]
    n = main.numel()
    top = 4.0 * max([scale] + [abs(c) for c in consts])
    wanted = _edges(scale, consts) + torch.linspace(-top, top, SWEEP).tolist()
    count = min(n, ELEMENTS)
    pos = torch.randperm(n, generator=gen)[:count].to(main.device)
    search = pos[-KINK_SEARCH:] if count >= 2 * KINK_SEARCH else pos[:0]  # the kink positions, last
    args = _writable(call_args)
    flat_main = args[main_pos].reshape(-1)
    k = min(len(wanted), count - len(search))
    flat_main[pos[:k]] = torch.tensor(wanted[:k], dtype=flat_main.dtype, device=main.device)
    # extras: edge values at a shuffled third of the positions, so each meets many main values
    for i, a in enumerate(args):
        if i == main_pos or a.numel() == 1:
            continue
        src = _source_index(a, main.shape, pos)
        pick = torch.randperm(count - len(search), generator=gen)[: count // 3].to(main.device)
        edges = _edges(_scale(a), consts)
        vals = torch.tensor([edges[j % len(edges)] for j in range(len(pick))], dtype=a.dtype, device=a.device)
        a.reshape(-1)[src[pick]] = vals
    labels = ["edge" if j < len(wanted) - SWEEP else "sweep" if j < len(wanted) else "drawn" for j in range(count)]
    if len(search):
        found = _locate_kinks(sub, args, main_pos, search, top)
        near = [v for x in found for v in (x, x - 1e-3 * max(1.0, abs(x)), x + 1e-3 * max(1.0, abs(x)))]
        near = near[:len(search)]
        flat_main[search[:len(near)]] = torch.tensor(near, dtype=flat_main.dtype, device=main.device)
        labels[count - len(search):] = ["kink"] * len(near) + ["kink search"] * (len(search) - len(near))
    out, steps, step_dtypes, parts = _run_steps(sub, args, main.shape, pos, targets)
    named = list(zip(arg_names, args)) + list(fixed.items())
    inputs = {name: encode(_gather(a, main.shape, pos)) for name, a in named}
    return Probes(count=count, cols=1, inputs=inputs, expected=encode(out.reshape(-1)[pos]), labels=labels,
                  steps=steps, step_dtypes=step_dtypes, step_parts=parts)


def _run_steps(sub: fx.GraphModule, args: list[torch.Tensor], shape: torch.Size, pos: torch.Tensor,
               targets: list[str]) -> tuple[torch.Tensor, list[str], list[str], list[list[StepPart]]]:
    """The segment's output, and each of its ops' values at the probe positions, in op order (the
    order of the segment's torch lines): what each line computes on the probes, so a region written
    one line at a time can be checked a line at a time (scaffold/steps.py). A value that is not a
    floating tensor broadcastable to the main input is "" (that line cannot be checked alone).
    With them, a composite op's parts (decompose.py)."""
    interp = fx.Interpreter(sub, garbage_collect_values=False)
    out = interp.run(*args)

    def coded(v: Any) -> Optional[tuple[str, bool]]:
        ok = isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() <= len(shape) and \
            all(d in (1, s) for d, s in zip(reversed(v.shape), reversed(shape)))
        return (encode(_gather(v, shape, pos)), False) if ok else None

    steps, dtypes = [], []
    nodes = _op_nodes(sub)
    for node in nodes:
        v = interp.env.get(node)
        c = coded(v)
        steps.append(c[0] if c else "")
        dtypes.append(str(v.dtype).removeprefix("torch.") if c else "")
    return out, steps, dtypes, _all_parts(sub, nodes, interp.env, targets, coded)


def _op_nodes(sub: fx.GraphModule) -> list[fx.Node]:
    return [n for n in sub.graph.nodes if n.op not in ("placeholder", "output")]


def _all_parts(sub: fx.GraphModule, nodes: list[fx.Node], env: dict[fx.Node, Any], targets: list[str],
               coded: Callable[[Any], Optional[tuple[str, bool]]]) -> list[list[StepPart]]:
    """Each op's parts ([] where it is not split); none where the ops are not the segment's targets
    one for one (a no-op node among them)."""
    if len(nodes) != len(targets):
        return []
    return [decompose.parts(n, t, sub, env, coded) for n, t in zip(nodes, targets, strict=True)]


def _rows(seg: Segment, sub: fx.GraphModule, call_args: list[torch.Tensor], arg_names: list[str], main_pos: int,
          fixed: dict[str, torch.Tensor], consts: list[float], scale: float, gen: torch.Generator) -> Probes:
    main = call_args[main_pos]
    cols = seg.cols
    rows = main.numel() // cols
    count = min(rows, ROWS)
    chosen = torch.randperm(rows, generator=gen)[:count].to(main.device)
    args = _writable(call_args)
    m = args[main_pos].reshape(rows, cols)
    real = m[chosen[0]].float().clone()
    edges = torch.tensor(_edges(scale, consts), dtype=torch.float32, device=main.device)
    designs = [
        ("drawn", real),
        # a power of two: its sums are exact, so a mean-subtracting region sees a variance of exactly
        # 0 (as PyTorch's does) instead of the rounding of a naive sum, which the evaluator's drawn
        # rows never show
        ("constant", torch.full((cols,), 2.0 ** round(math.log2(0.5 * scale)), device=main.device)),
        ("zeros", torch.zeros(cols, device=main.device)),
        ("one large value", real.clone().index_fill_(0, torch.tensor([cols // 2], device=main.device), 4.0 * scale)),
        ("negated", -real),
        ("edge values", edges.repeat(cols // edges.numel() + 1)[:cols]),
    ][:count]
    labels = []
    for r, (label, values) in zip(chosen.tolist(), designs):
        m[r] = values.to(m.dtype)
        labels.append(label)
    flat = (chosen[:, None] * cols + torch.arange(cols, device=main.device)[None, :]).reshape(-1)
    out, steps, step_dtypes, step_rows, parts = _run_row_steps(sub, args, main, rows, chosen, flat, seg.targets)
    named = list(zip(arg_names, args)) + list(fixed.items())
    inputs = {name: encode(_gather(a, main.shape, flat)) for name, a in named}
    flat_out = out.reshape(rows, -1)[chosen]
    return Probes(count=count, cols=cols, inputs=inputs, expected=encode(flat_out), labels=labels,
                  steps=steps, step_dtypes=step_dtypes, step_rows=step_rows, step_parts=parts)


def _run_row_steps(sub: fx.GraphModule, args: list[torch.Tensor], main: torch.Tensor, rows: int,
                   chosen: torch.Tensor, flat: torch.Tensor, targets: list[str],
                   ) -> tuple[torch.Tensor, list[str], list[str], list[bool], list[list[StepPart]]]:
    """A row segment's output, and each op's value on the probe rows, in op order: a whole row
    (the main input's shape, or broadcast against it like a norm's weight: count * cols values) or
    one value a row (count values, step_rows). Anything else is "" (that line cannot be checked
    alone). With them, a composite op's parts (decompose.py)."""
    interp = fx.Interpreter(sub, garbage_collect_values=False)
    out = interp.run(*args)

    def coded(v: Any) -> Optional[tuple[str, bool]]:
        if not isinstance(v, torch.Tensor) or not v.is_floating_point():
            return None
        if tuple(v.shape) == tuple(main.shape):
            return encode(v.reshape(rows, -1)[chosen]), False
        if v.numel() == rows:
            return encode(v.reshape(rows)[chosen]), True
        if v.dim() <= main.dim() and all(d in (1, s) for d, s in zip(reversed(v.shape), reversed(main.shape))):
            return encode(_gather(v, main.shape, flat)), False
        return None

    steps, dtypes, per_row = [], [], []
    nodes = _op_nodes(sub)
    for node in nodes:
        v = interp.env.get(node)
        c = coded(v)
        steps.append(c[0] if c else ""), per_row.append(c[1] if c else False)
        dtypes.append(str(v.dtype).removeprefix("torch.") if c else "")
    return out, steps, dtypes, per_row, _all_parts(sub, nodes, interp.env, targets, coded)
