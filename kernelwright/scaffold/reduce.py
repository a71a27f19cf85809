"""The reference at a reduced size, for the few planning checks that need values (child side).

The plan reads shapes, dtypes and the code of the segment from the full-size trace, which is
fake (``analysis/shapes.py``). Three things need real values: re-running a segment alone
(``plan._same``), the perturbation test that measures its layout (``plan._layout``) and the
pre-check's probes. Those run here on a smaller copy of the same run, on the CPU:

1. Every dimension size of the inputs that no parameter or buffer has is a candidate, and gets
   its own small prime that no tensor of the full-size run has as a dimension (so each size
   stays recognisable: 4096 -> 5, 512 -> 7).
2. A mapping is kept only if the traced forward, run on fake inputs of the mapped shapes, gives
   every node exactly the mapped shapes of its full-size run: no dimension derived in another
   way (a flatten, a conv's output size, a size written in the source) changes. So the smaller run
   is the same computation, each size renamed; a size that fails this stays as it is.
3. `get_inputs()` draws the real inputs under a dispatch mode that maps the `size` arguments of
   its factory calls (`torch.randn(batch, dim)`), so the values come from the task's own
   distributions (`rand` for a log, integer ranges for indices).

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

PRIMES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)
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
    fixed = {d for t in itertools.chain(model.parameters(), model.buffers()) for d in t.shape}
    present = fixed | {d for shapes in full.values() for s in shapes for d in s}
    primes = [p for p in PRIMES if p not in present]
    proposal: dict[int, int] = {}
    for v in sorted({d for t in tensors_in(list(inputs)) for d in t.shape} - fixed):
        if primes and primes[0] < v:
            proposal[v] = primes.pop(0)

    def holds(sizes: dict[int, int]) -> bool:
        return _node_shapes(gm, _resized(inputs, sizes)) == _mapped(full, sizes)

    sizes = proposal if holds(proposal) else {}
    if not sizes:
        good = [v for v in sorted(proposal, reverse=True) if holds({v: proposal[v]})]
        for v in good:  # largest first: the most memory saved
            if holds(sizes | {v: proposal[v]}):
                sizes[v] = proposal[v]
    need = sum(nbytes(t) for t in itertools.chain(model.parameters(), model.buffers())) + sum(
        _numel(s) * 4 for shapes in _mapped(full, sizes).values() for s in shapes)
    if need > LIMIT_BYTES:
        return (f"its sizes cannot be reduced for the planner's value checks, and at full size its values "
                f"need {need / 2**30:.1f} GiB (over the planner's {LIMIT_BYTES / 2**30:.0f} GiB)")
    real = _draw(get_inputs, seed, sizes)
    want = [(tuple(_map(t.shape, sizes)), t.dtype) if isinstance(t, torch.Tensor) else None for t in inputs]
    got = [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else None for t in real]
    if got != want:
        return (f"get_inputs() drew {got} at the reduced sizes {sizes}, not the shapes of its full-size "
                f"inputs with those sizes {want}")
    return Reduced(sizes=sizes, inputs=real)


def _map(shape: Sequence[int], sizes: dict[int, int]) -> list[int]:
    return [sizes.get(d, d) for d in shape]


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _mapped(full: Shapes, sizes: dict[int, int]) -> Shapes:
    return {k: [tuple(_map(s, sizes)) for s in v] for k, v in full.items()}


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
        self.shapes[n.name] = [tuple(t.shape) for t in tensors_in(result)]
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
