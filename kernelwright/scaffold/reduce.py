"""The reference at a reduced size, for the few planning checks that need values (child side).

The plan reads shapes, dtypes and the code of the segment from the full-size trace, which is
fake (``analysis/shapes.py``). Three things need real values: re-running a segment alone
(``plan._same``), the perturbation test that measures its layout (``plan._layout``) and the
pre-check's probes. Those run here on a smaller copy of the same run, on the CPU:

1. The traced forward runs once more on fake inputs whose sizes are symbols (a ``ShapeEnv``, one
   symbol per distinct size, as torch.compile's duck sizing does): every node's shape comes out as
   an expression of them (a conv's output `s0 - 2`, a flatten `128*(s0 - 2)**2`), and the run
   records as guards what it assumed (a size a parameter fixes: `Eq(s1, 64)`; `s0 >= 3`).
2. Each free symbol, largest first, gets the smallest prime of ``PRIMES`` below its size that keeps
   every guard true: the same computation at a smaller size, proven by torch's own reasoning about
   shapes rather than by a list of ops. A concrete fake run at those sizes must give every node
   the shape its expression says, or nothing is reduced.
3. `get_inputs()` draws the real inputs under a dispatch mode that maps the `size` arguments of
   its factory calls (`torch.randn(batch, dim)`) by value, as the symbols were made, so the values
   come from the task's own distributions (`rand` for a log, integer ranges for indices).

Where nothing can be reduced the run is the full-size one, on the CPU: refused when its tensors
would pass ``LIMIT_BYTES``, with that reason (a fixed rule on shapes, never on free memory).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import fx, nn
from torch.utils._python_dispatch import TorchDispatchMode

from kernelwright.analysis.shapes import fake_mode_of, nbytes
from kernelwright.analysis.tensors import tensors_in
from kernelwright.measure.draw import seed_all

# Reduced sizes: primes, so that no two sizes of the reduced run divide each other by accident and a
# row layout that holds there holds for the structure, not for one coincidence of sizes.
PRIMES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 103,
          107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173, 179, 181, 191, 193, 197, 199, 211)
LIMIT_BYTES = 4 * 2**30  # the values kept by the planner's real run, summed over the graph

Shapes = dict[str, list[tuple[int, ...]]]


@dataclass
class Reduced:
    sizes: dict[int, int]  # full size -> its reduced size
    inputs: list[Any]  # real, on the CPU


def reduce(gm: fx.GraphModule, model: nn.Module, inputs: Sequence[Any],
           get_inputs: Callable[[], Any], seed: int) -> Reduced | str:
    """Real inputs of a smaller run of ``gm`` that has the structure of its run on (fake)
    ``inputs``, or why there is none."""
    full = _node_shapes(gm, inputs)
    assert full is not None, "the full-size run was traced already"
    sizes, expected = _smaller_sizes(gm, inputs) or ({}, full)
    if sizes and _node_shapes(gm, _resized(inputs, sizes)) != expected:
        sizes = {}
    need = sum(nbytes(t) for t in itertools.chain(model.parameters(), model.buffers())) + sum(
        _numel(s) * 4 for shapes in (_node_shapes(gm, _resized(inputs, sizes)) or full).values() for s in shapes)
    if need > LIMIT_BYTES:
        return (f"at the smallest size its shapes allow ({_said(sizes)}) its values need {need / 2**30:.1f} GiB "
                f"(over the planner's {LIMIT_BYTES / 2**30:.0f} GiB)")
    real = _draw(get_inputs, seed, sizes)
    want = [(tuple(_map(t.shape, sizes)), t.dtype) if isinstance(t, torch.Tensor) else None for t in inputs]
    got = [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else None for t in real]
    if got != want:
        return (f"get_inputs() drew {got} at the reduced sizes ({_said(sizes)}), not the shapes of its full-size "
                f"inputs with those sizes {want}")
    return Reduced(sizes=sizes, inputs=real)


def _said(sizes: dict[int, int]) -> str:
    return ", ".join(f"{a} -> {b}" for a, b in sizes.items()) or "none reduced"


def _smaller_sizes(gm: fx.GraphModule, inputs: Sequence[Any]) -> Optional[tuple[dict[int, int], Shapes]]:
    """{full size: reduced size} that every guard of a symbolic run allows, and every node's
    shapes at those sizes, or None where the symbolic run fails (then nothing is reduced)."""
    import sympy
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    symbols: dict[int, Any] = {}

    def size(v: int) -> Any:
        if v not in symbols:
            sym = env.create_symbol(v, ConstantSource(f"size{v}"), dynamic_dim=DimDynamic.DUCK)
            symbols[v] = env.create_symintnode(sym, hint=v) if isinstance(sym, sympy.Symbol) else int(sym)
        return symbols[v]

    try:
        with mode:
            sym_inputs = [torch.empty([size(d) for d in t.shape], dtype=t.dtype) if isinstance(t, torch.Tensor)
                          else t for t in inputs]
        rec = _ShapeRecorder(gm)
        with torch.no_grad(), mode:
            rec.run(*sym_inputs)
    except Exception:  # ops without symbolic shape support: the full size it is
        return None
    free = {v: s.node.expr for v, s in symbols.items()
            if isinstance(s, torch.SymInt) and isinstance(env.replace(s.node.expr), sympy.Symbol)}
    values = {sym: v for v, sym in free.items()}

    def allowed(assign: dict[Any, int]) -> bool:
        subs = {sym: assign.get(sym, v) for sym, v in values.items()}
        try:
            for sym, val in subs.items():
                r = env.var_to_range.get(sym)
                if r is not None and not (r.lower <= val <= r.upper):
                    return False
            return all(bool(env.replace(g.expr).xreplace(subs)) for g in env.guards)
        except Exception:  # a guard these values cannot decide: not allowed
            return False

    assign: dict[Any, int] = {}
    used: set[int] = set()
    for v in sorted(free, reverse=True):
        for p in PRIMES:
            if p >= v:
                break
            if p not in used and allowed(assign | {free[v]: p}):
                assign[free[v]] = p
                used.add(p)
                break
    subs = {sym: assign.get(sym, v) for sym, v in values.items()}
    try:
        expected = {name: [tuple(int(env.replace(sympy.sympify(d)).xreplace(subs)) for d in shape) for shape in shapes]
                    for name, shapes in rec.shapes.items()}
    except Exception:  # a shape these values cannot evaluate: nothing reduced
        return None
    return {v: assign[free[v]] for v in free if free[v] in assign}, expected


def _map(shape: Sequence[int], sizes: dict[int, int]) -> list[int]:
    return [sizes.get(d, d) for d in shape]


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n




def _resized(inputs: Sequence[Any], sizes: dict[int, int]) -> list[Any]:
    """Fake tensors like ``inputs``' with the mapped shapes (nothing allocated)."""
    with fake_mode_of(inputs):
        return [torch.empty(_map(t.shape, sizes), dtype=t.dtype, device=t.device)
                if isinstance(t, torch.Tensor) else t for t in inputs]


class _ShapeRecorder(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.shapes: Shapes = {}

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        # symbolic sizes as their expressions
        self.shapes[n.name] = [tuple(d.node.expr if isinstance(d, torch.SymInt) else d for d in t.shape)
                               for t in tensors_in(result)]
        return result


def _node_shapes(gm: fx.GraphModule, inputs: Sequence[Any]) -> Optional[Shapes]:
    """Every node's tensor shapes on (fake) ``inputs``, or None where the run fails there."""
    rec = _ShapeRecorder(gm)
    try:
        with torch.no_grad(), fake_mode_of(inputs):
            rec.run(*inputs)
    except Exception:  # this size breaks the forward: not a size it can be reduced to
        return None
    return rec.shapes


class _MapSizes(TorchDispatchMode):
    """Maps the `size` arguments of every op (factories, views, expands) through ``sizes``."""

    def __init__(self, sizes: dict[int, int]):
        super().__init__()
        self.sizes = sizes

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        args, kwargs = list(args), dict(kwargs or {})
        for i, arg in enumerate(func._schema.arguments):
            if arg.name not in ("size", "shape"):
                continue
            if arg.name in kwargs:
                kwargs[arg.name] = self._map(kwargs[arg.name])
            elif i < len(args) and not arg.kwarg_only:
                args[i] = self._map(args[i])
        return func(*args, **kwargs)

    def _map(self, value: Any) -> Any:
        if isinstance(value, (list, tuple, torch.Size)):
            return [self.sizes.get(v, v) if isinstance(v, int) else v for v in value]
        return value


def _draw(get_inputs: Callable[[], Any], seed: int, sizes: dict[int, int]) -> list[Any]:
    seed_all(seed)
    with _MapSizes(sizes):
        raw = get_inputs()
    return list(raw)
