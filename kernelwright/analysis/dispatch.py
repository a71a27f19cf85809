"""The fallback graph: the ATen ops of one real forward run, recorded with TorchDispatchMode.

Used when torch.fx cannot trace ``forward`` (Python control flow on shapes or values). The run is
the real one, so every branch and loop iteration that executes is recorded (loops come out
unrolled). Data flow is recovered from tensor identity: each op's output tensors are remembered
by ``id`` (forgotten through a weak reference when the tensor dies, so a recycled id is never
mistaken for an old tensor), and an op that later receives one of them depends on its producer.

Compared with the fx graph there is less structure (no module boundaries; ``nn.Linear`` appears
as ``t`` + ``addmm``; ``matmul`` of 4-D tensors as ``expand``/``clone``/``bmm``) but the records,
canonical names and therefore the classification are the same.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from kernelwright.analysis import ops
from kernelwright.analysis.shapes import fake_mode_of
from kernelwright.analysis.tensors import decide_role, input_source, jsonable, meta_of, tensors_in, walk
from kernelwright.analysis.types import GraphTensor, OpGraph, OpInput, OpNode, Role, Source

log = logging.getLogger(__name__)


def record_dispatch(model: nn.Module, inputs: Sequence[Any], reason: str | None = None) -> OpGraph:
    """Run ``model(*inputs)`` once under no_grad and record every ATen op it dispatches."""
    recorder = _Recorder()
    names = _input_names(model, len(inputs))
    graph_inputs: list[GraphTensor] = []
    for name, value in zip(names, inputs):
        if isinstance(value, torch.Tensor):
            recorder.remember(value, name, Source.GRAPH_INPUT, None)
            graph_inputs.append(GraphTensor(name=name, source=Source.GRAPH_INPUT, **meta_of(value).model_dump()))
    for qual, p in model.named_parameters():
        recorder.remember(p, qual, Source.PARAMETER, None)
    for qual, b in model.named_buffers():
        recorder.remember(b, qual, Source.BUFFER, None)
    with torch.no_grad(), fake_mode_of(inputs), recorder:  # the recorder innermost: it sees the real parameters
        result = model(*inputs)
    outputs = [recorder.lookup(t)[0] for t in tensors_in(result) if recorder.lookup(t) is not None]
    return OpGraph(method="dispatch", fallback_reason=reason, inputs=graph_inputs,
                   params=list(recorder.used_params.values()), nodes=recorder.nodes, outputs=outputs,
                   output_meta=[meta_of(t) for t in tensors_in(result)])


def _input_names(model: nn.Module, count: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params]
    except (TypeError, ValueError):
        names = []
    return (names + [f"input{i}" for i in range(len(names), count)])[:count]


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[OpNode] = []
        self.used_params: dict[str, GraphTensor] = {}
        self._known: dict[int, tuple[str, Source, Role | None]] = {}
        self._weak: dict[int, weakref.ref] = {}
        self._counts: Counter[str] = Counter()
        self._taken: set[str] = set()

    def _fresh_name(self, target: str) -> str:
        # fx-style names (add, add_1, ...), never equal to an input's or parameter's name
        while True:
            count = self._counts[target]
            self._counts[target] += 1
            name = target if count == 0 else f"{target}_{count}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def remember(self, t: torch.Tensor, name: str, source: Source, role: Role | None) -> None:
        self._taken.add(name)
        key = id(t)
        self._known[key] = (name, source, role)
        self._weak[key] = weakref.ref(t, lambda _ref, k=key: self._forget(k))

    def _forget(self, key: int) -> None:
        self._known.pop(key, None)
        self._weak.pop(key, None)

    def lookup(self, t: torch.Tensor) -> tuple[str, Source, Role | None] | None:
        return self._known.get(id(t))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # torch's protocol, untyped
        kwargs = kwargs or {}
        with FlopCounterMode(display=False) as counter:
            result = func(*args, **kwargs)
        try:
            self._record(func, args, kwargs, result, counter.get_total_flops())
        except Exception:  # recording must never change what the model computes
            log.debug("could not record %s", func, exc_info=True)
        return result

    def _record(self, func: Any, args: tuple, kwargs: dict, result: Any, flops: int) -> None:
        schema = func._schema
        base = schema.name.split("::")[-1]
        target = _conv_name(args) if base == "convolution" else ops.canonical(base)
        kind = ops.kind_of(target)
        arg_names = [a.name for a in schema.arguments]
        inputs: list[OpInput] = []
        scalars: dict[str, Any] = {}
        first_tensor = next(iter(tensors_in(list(args))), None)
        items = [(arg_names[i] if i < len(arg_names) else str(i), a) for i, a in enumerate(args)]
        for key, value in items + list(kwargs.items()):
            for path, leaf in walk(value, key):
                if isinstance(leaf, torch.Tensor):
                    inputs.append(self._input(leaf, path))
                else:
                    scalars[path] = jsonable(leaf)
        inplace = schema.is_mutable or base.endswith("_")
        role = decide_role(target, kind, inputs, result, first_tensor, inplace)
        name = self._fresh_name(target)
        self.nodes.append(OpNode(name=name, target=target, kind=kind, role=role, raw=str(func), inputs=inputs,
                                 outputs=[meta_of(t) for t in tensors_in(result)], scalars=scalars, flops=flops))
        for t in tensors_in(result):
            self.remember(t, name, Source.INTERMEDIATE, role)

    def _input(self, t: torch.Tensor, path: str) -> OpInput:
        known = self.lookup(t)
        if known is None:  # a tensor the module holds outside its parameters and buffers
            return OpInput(name=f"constant{list(t.shape)}", source=Source.CONSTANT, arg=path, **meta_of(t).model_dump())
        name, source, role = known
        if source in (Source.PARAMETER, Source.BUFFER):
            self.used_params.setdefault(name, GraphTensor(name=name, source=source, **meta_of(t).model_dump()))
        return OpInput(name=name, source=input_source(role, source), arg=path, **meta_of(t).model_dump())


def _conv_name(args: tuple) -> str:
    """aten.convolution covers every conv: read the rank from the weight, transposed from args[6]."""
    weight = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
    dims = weight.dim() - 2 if weight is not None else 2
    transposed = bool(args[6]) if len(args) > 6 else False
    return f"conv_transpose{dims}d" if transposed else f"conv{dims}d"
