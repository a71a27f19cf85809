"""The reference at a reduced size, for the few planning checks that need values (child side).

The plan reads shapes, dtypes and the code of the segment from the full-size trace, which is
fake (``analysis/shapes.py``). Three things need real values: re-running a segment alone
(``plan._same``), the perturbation test that measures its layout (``plan._layout``) and the
pre-check's probes. Those run here on a smaller copy of the same run, on the CPU:

1. The traced forward runs once more on fake inputs whose sizes are symbols (a ``ShapeEnv``, one
   symbol per dimension of each input): every node's shape comes out as an expression of them (a
   conv's output `s3 - 2`, a flatten `128*(s3 - 2)**2`), and the run records as guards what it
   assumed (a size a parameter fixes: `Eq(s1, 64)`; a size two inputs share: `Eq(s1, s2)`).
2. Each free symbol, largest first, gets the smallest prime of ``PRIMES`` below its size that keeps
   every guard true: the same computation at a smaller size, proven by torch's own reasoning about
   shapes rather than by a list of ops. A concrete fake run at those sizes must give every node
   the shape its expression says, or nothing is reduced.
3. `get_inputs()` draws the real inputs under a dispatch mode that gives each factory call whose
   `size` is an input's full shape (`torch.randn(batch, dim)`) that input's reduced shape, so the
   values come from the task's own distributions (`rand` for a log, integer ranges for indices).

Where nothing can be reduced the run is the full-size one, on the CPU: refused when its tensors
would pass ``LIMIT_BYTES``, with that reason (a fixed rule on shapes, never on free memory).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import fx, nn
from torch.utils._python_dispatch import TorchDispatchMode

from kernelwright.analysis.shapes import fake_mode_of
from kernelwright.analysis.tensors import tensors_in
from kernelwright.measure.draw import seed_all

# Reduced sizes are primes, so that no two sizes of the reduced run divide each other by accident and
# a row layout that holds there holds for the structure, not for one coincidence of sizes.
PRIMES = tuple(p for p in range(5, 10000) if all(p % q for q in range(2, int(p ** 0.5) + 1)))
# Each reduced input keeps at least this many elements (or all it has): the pre-check's probes take
# up to 512 elements or 6 rows of the main input, and a region is checked on rows of some length.
MIN_ELEMENTS = 4096
LIMIT_BYTES = 4 * 2**30  # the values kept by the planner's real run, summed over the graph
# the run for a row segment's full-length probe rows: past this (a row that is the whole tensor,
# batch statistics) the probes are the reduced run's rows
ROWS_LIMIT_BYTES = 2**28

Shapes = dict[str, list[tuple[int, ...]]]


@dataclass
class Reduced:
    shapes: list[Optional[tuple[int, ...]]]  # each input's reduced shape (None: not a tensor)
    inputs: list[Any]  # real, on the CPU


def reduce(gm: fx.GraphModule, model: nn.Module, inputs: Sequence[Any], get_inputs: Callable[[], Any],
           seed: int, keep: Optional[tuple[str, int]] = None, limit: int = LIMIT_BYTES) -> Reduced | str:
    """Real inputs of a smaller run of ``gm`` that has the structure of its run on (fake)
    ``inputs``, or why there is none. ``keep`` = (node, k): the last k dims of that node keep
    their full sizes (a row segment's rows, for its probes)."""
    full = _node_shapes(gm, inputs)
    assert full is not None, "the full-size run was traced already"
    full_in = [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in inputs]
    shapes, expected = _smaller_shapes(gm, inputs, keep) or (full_in, full)
    if shapes != full_in and _node_shapes(gm, _resized(inputs, shapes)) != expected:
        shapes, expected = full_in, full
    # what the real run adds to the model (built already): its inputs and every value it computes
    made = {n.name for n in gm.graph.nodes if n.op not in ("get_attr", "output")}
    need = sum(_numel(s) * 4 for name, node in expected.items() if name in made for s in node)
    said = ", ".join(f"{list(a)} -> {list(b)}" for a, b in zip(full_in, shapes) if a is not None and a != b)
    if need > limit:
        return (f"at the smallest size its shapes allow ({said or 'none reduced'}) its values need "
                f"{need / 2**30:.1f} GiB (over the planner's {limit / 2**30:.2g} GiB)")
    real = _draw(get_inputs, seed, full_in, shapes)
    got = [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in real]
    if got != shapes or [t.dtype for t in tensors_in(real)] != [t.dtype for t in tensors_in(list(inputs))]:
        return f"get_inputs() drew shapes {got} where the reduced run needs {shapes} ({said})"
    return Reduced(shapes=shapes, inputs=real)


def _smaller_shapes(gm: fx.GraphModule, inputs: Sequence[Any], keep: Optional[tuple[str, int]] = None
                    ) -> Optional[tuple[list[Optional[tuple[int, ...]]], Shapes]]:
    """Each input's reduced shape that every guard of a symbolic run allows, and every node's
    shapes at those sizes, or None where the symbolic run fails (then nothing is reduced)."""
    import sympy
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    hints: dict[Any, int] = {}  # symbol -> its full size

    def size(v: int, name: str) -> Any:
        sym = env.create_symbol(v, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
        if not isinstance(sym, sympy.Symbol):  # 0 and 1 stay what they are
            return int(sym)
        hints[sym] = v
        return env.create_symintnode(sym, hint=v)

    try:
        with mode:
            sym_inputs = [torch.empty([size(d, f"in{i}_{j}") for j, d in enumerate(t.shape)], dtype=t.dtype)
                          if isinstance(t, torch.Tensor) else t for i, t in enumerate(inputs)]
        rec = _ShapeRecorder(gm)
        with torch.no_grad(), mode:
            rec.run(*sym_inputs)
    except Exception:  # ops without symbolic shape support: the full size it is
        return None
    kept: set[Any] = set()
    if keep is not None:
        name, k = keep
        for d in rec.shapes[name][0][-k:]:
            kept |= env.replace(sympy.sympify(d)).free_symbols
    free = sorted((sym for sym in hints if env.replace(sym) == sym and sym not in kept), key=lambda sym: -hints[sym])
    floor = _floors(sym_inputs, set(free), env.replace)

    def value(expr: Any, assign: dict[Any, int]) -> int:
        return int(env.replace(sympy.sympify(expr)).xreplace({sym: assign.get(sym, v) for sym, v in hints.items()}))

    def allowed(assign: dict[Any, int]) -> bool:
        try:
            for sym, val in assign.items():
                r = env.var_to_range.get(sym)
                if r is not None and not (r.lower <= val <= r.upper):
                    return False
            subs = {sym: assign.get(sym, v) for sym, v in hints.items()}
            return all(bool(env.replace(g.expr).xreplace(subs)) for g in env.guards)
        except Exception:  # a guard these values cannot decide: not allowed
            return False

    assign: dict[Any, int] = {}
    for sym in free:
        for p in PRIMES:
            if p >= hints[sym]:
                break
            if p >= floor[sym] and p not in assign.values() and allowed(assign | {sym: p}):
                assign[sym] = p
                break
    try:
        shapes = [tuple(value(d.node.expr if isinstance(d, torch.SymInt) else d, assign) for d in t.shape)
                  if isinstance(t, torch.Tensor) else None for t in sym_inputs]
        expected = {name: [tuple(value(d, assign) for d in shape) for shape in node]
                    for name, node in rec.shapes.items()}
    except Exception:  # a shape these values cannot evaluate: nothing reduced
        return None
    return shapes, expected


def _floors(sym_inputs: Sequence[Any], free: set[Any], replace: Callable[[Any], Any]) -> dict[Any, float]:
    """The least reduced size of each free symbol: spread over an input's free dims, so that the
    input keeps MIN_ELEMENTS (what its fixed dims hold counts) and its rows and columns both stay
    long enough to check a layout on."""
    floor = {sym: 0.0 for sym in free}
    for t in sym_inputs:
        if not isinstance(t, torch.Tensor):
            continue
        dims = [replace(d.node.expr) if isinstance(d, torch.SymInt) else None for d in t.shape]
        mine = [e for e in dims if e in free]
        if not mine:
            continue
        # the fixed dims by their full sizes (arithmetic on the SymInts would add guards)
        fixed = _numel([d.node.hint if isinstance(d, torch.SymInt) else d
                        for d, e in zip(t.shape, dims) if e not in free])
        need = (MIN_ELEMENTS / max(1, fixed)) ** (1 / len(mine))
        for e in mine:
            floor[e] = max(floor[e], need)
    return floor


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n




def _resized(inputs: Sequence[Any], shapes: Sequence[Optional[tuple[int, ...]]]) -> list[Any]:
    """Fake tensors like ``inputs``' with the given shapes (nothing allocated)."""
    with fake_mode_of(inputs):
        return [torch.empty(shape, dtype=t.dtype, device=t.device) if isinstance(t, torch.Tensor) else t
                for t, shape in zip(inputs, shapes, strict=True)]


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


class _ReducedDraw(TorchDispatchMode):
    """Gives each op whose `size` is an input's full shape that input's reduced shape (each input
    once, in order): `torch.randn(batch, dim)` in `get_inputs()` draws the reduced tensor."""

    def __init__(self, full: Sequence[Optional[tuple[int, ...]]], reduced: Sequence[Optional[tuple[int, ...]]]):
        super().__init__()
        self.todo = [(f, r) for f, r in zip(full, reduced, strict=True) if f is not None and f != r]

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        args, kwargs = list(args), dict(kwargs or {})
        for i, arg in enumerate(func._schema.arguments):
            if arg.name != "size":
                continue
            if arg.name in kwargs:
                kwargs[arg.name] = self._swap(kwargs[arg.name])
            elif i < len(args) and not arg.kwarg_only:
                args[i] = self._swap(args[i])
        return func(*args, **kwargs)

    def _swap(self, size: Any) -> Any:
        if isinstance(size, (list, tuple, torch.Size)):
            for k, (full, reduced) in enumerate(self.todo):
                if tuple(size) == full:
                    del self.todo[k]
                    return list(reduced)
        return size


def _draw(get_inputs: Callable[[], Any], seed: int, full: Sequence[Optional[tuple[int, ...]]],
          reduced: Sequence[Optional[tuple[int, ...]]]) -> list[Any]:
    seed_all(seed)
    with _ReducedDraw(full, reduced):
        raw = get_inputs()
    return list(raw)
