"""The reference module as a graph of canonical ops with shapes, dtypes and FLOPs.

``build_graph(model, inputs)`` traces ``forward`` with ``torch.fx.symbolic_trace`` and runs the
traced graph once on the example inputs (a ``ShapeProp`` that also records each node's FLOPs with
``FlopCounterMode`` and whether it returned or aliased its input). Standard ``torch.nn`` layers
stay whole (``nn.Linear`` is one ``linear`` node), so the graph reads like the source.

fx cannot trace Python control flow on tensor values or shapes (``for t in range(x.shape[1])``,
``b, t, d = x.shape``, ``torch.ones(t, t)``). Then the graph is recorded at the ATen level from one
real run instead (``dispatch.py``): the same records and classification, with finer-grained ops
(``t`` + ``addmm`` for a linear layer, loops unrolled) and ``fallback_reason`` saying why.

The inputs may be fake tensors (``shapes.fake_inputs``): then the run propagates shapes, dtypes
and FLOPs under their FakeTensorMode and allocates nothing, which is how analysis and planning see
a reference of any size.

``classify`` and ``epilogue_chains`` live in ``structure.py`` and are re-exported here.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.fx import GraphModule, Node, symbolic_trace
from torch.fx.node import _get_qualified_name
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils.flop_counter import FlopCounterMode

from kernelwright.analysis import ops
from kernelwright.analysis.shapes import fake_mode_of
from kernelwright.analysis.structure import classify, epilogue_chains
from kernelwright.analysis.tensors import decide_role, input_source, jsonable, meta_of, tensors_in
from kernelwright.analysis.types import GraphTensor, OpGraph, OpInput, OpNode, Role, Source, TensorMeta

log = logging.getLogger(__name__)

__all__ = ["ShapeError", "build_graph", "classify", "epilogue_chains", "trace_fx"]


class ShapeError(Exception):
    """``forward`` traced, but running the traced graph on the inputs failed (the cause is chained)."""


def build_graph(model: nn.Module, inputs: Sequence[Any], *, allow_fallback: bool = True) -> OpGraph:
    """Trace ``model`` on ``inputs`` (run once, under no_grad). Errors from the model itself propagate."""
    try:
        gm = symbolic_trace(model)
    except Exception as e:  # any tracing failure means: record the ATen ops of a real run
        if not allow_fallback:
            raise
        reason = f"fx could not trace forward: {type(e).__name__}: {_first_line(e)}"
        log.info("%s; recording ATen ops instead", reason)
        from kernelwright.analysis.dispatch import (
            record_dispatch,  # late: dispatch imports helpers that import us
        )

        return record_dispatch(model, inputs, reason)
    return _FxBuilder(model, gm).run(inputs)


def trace_fx(model: nn.Module, inputs: Sequence[Any]) -> tuple[GraphModule, OpGraph]:
    """The fx GraphModule and the OpGraph built from it (node names shared), for callers that
    rewrite the graph (scaffolding). Raises what fx raises when it cannot trace ``forward``, and
    ``ShapeError`` (from the real cause) when the traced graph fails on ``inputs``."""
    gm = symbolic_trace(model)
    try:
        return gm, _FxBuilder(model, gm).run(inputs)
    except Exception as e:
        raise ShapeError(f"running the traced forward on its inputs failed") from e


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""


class _FxBuilder(ShapeProp):
    """ShapeProp that turns every executed node into an OpNode as it goes (no tensors kept)."""

    def __init__(self, model: nn.Module, gm: GraphModule):
        super().__init__(gm)
        self.model = model
        self.params = {name: p for name, p in model.named_parameters()}
        self.buffers = {name: b for name, b in model.named_buffers()}
        self.nodes: list[OpNode] = []
        self.inputs: list[GraphTensor] = []
        self.used_params: dict[str, GraphTensor] = {}
        self.refs: dict[str, tuple[str, Source, Role | None]] = {}  # fx node -> (name, source, role)
        self.graph_outputs: list[str] = []
        self.output_meta: list[TensorMeta] = []

    def run(self, inputs: Sequence[Any]) -> OpGraph:
        with torch.no_grad(), fake_mode_of(inputs):
            self.propagate(*inputs)
        return OpGraph(method="fx", inputs=self.inputs, params=list(self.used_params.values()),
                       nodes=self.nodes, outputs=self.graph_outputs, output_meta=self.output_meta)

    def run_node(self, n: Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        with FlopCounterMode(display=False) as counter:
            result = super().run_node(n)
        if n.op == "placeholder":
            if isinstance(result, torch.Tensor):
                self.inputs.append(GraphTensor(name=n.name, source=Source.GRAPH_INPUT, **meta_of(result).model_dump()))
            self.refs[n.name] = (n.name, Source.GRAPH_INPUT, None)
        elif n.op == "get_attr":
            source = Source.PARAMETER if n.target in self.params else (
                Source.BUFFER if n.target in self.buffers else Source.CONSTANT)
            self.refs[n.name] = (str(n.target), source, None)
            if source != Source.CONSTANT and isinstance(result, torch.Tensor):
                self._use_param(str(n.target), source, result)
        elif n.op == "output":
            self._record_outputs(n, result)
        else:
            self._record_op(n, args, kwargs, result, counter.get_total_flops())
        return result

    def _use_param(self, name: str, source: Source, t: torch.Tensor) -> None:
        self.used_params.setdefault(name, GraphTensor(name=name, source=source, **meta_of(t).model_dump()))

    def _record_op(self, n: Node, args: tuple, kwargs: dict, result: Any, flops: int) -> None:
        module = self.model.get_submodule(str(n.target)) if n.op == "call_module" else None
        if module is not None:
            target, raw = ops.module_canonical(type(module).__name__), f"call_module:{type(module).__name__}"
        elif n.op == "call_method":
            target, raw = ops.canonical(str(n.target)), f"Tensor.{n.target}"
        else:
            name = getattr(n.target, "__name__", str(n.target))
            if name == "getattr" and len(n.args) > 1 and n.args[1] in _VIEW_ATTRIBUTES:
                name = "transpose"  # `a.T` is a view of a, not a read of its metadata
            target, raw = ops.canonical(name), _qualified(n.target)
        kind = ops.kind_of(target)
        inputs: list[OpInput] = []
        scalars: dict[str, Any] = {}
        names = _arg_names(n, module)
        for i, (arg_node, arg_val) in enumerate(zip(n.args, args)):
            self._collect(names[i] if i < len(names) else str(i), arg_node, arg_val, inputs, scalars)
        for key, arg_node in n.kwargs.items():
            self._collect(key, arg_node, kwargs[key], inputs, scalars)
        first_tensor = next(iter(tensors_in(list(args))), None)  # a tuple's first for getitem(split)
        if module is not None:
            for pname, p in list(module.named_parameters()) + list(module.named_buffers()):
                qual = f"{n.target}.{pname}"
                source = Source.PARAMETER if qual in self.params else Source.BUFFER
                self._use_param(qual, source, p)
                inputs.append(OpInput(name=qual, source=source, arg=pname, **meta_of(p).model_dump()))
            scalars.update(_module_settings(module))
        inplace = (n.op == "call_method" and str(n.target).endswith("_")) or bool(scalars.get("inplace"))
        role = decide_role(target, kind, inputs, result, first_tensor, inplace)
        outs = [meta_of(t) for t in tensors_in(result)]
        self.nodes.append(OpNode(name=n.name, target=target, kind=kind, role=role, raw=raw, inputs=inputs,
                                 outputs=outs, scalars=scalars, flops=flops))
        self.refs[n.name] = (n.name, Source.INTERMEDIATE, role)

    def _collect(self, key: str, arg_node: Any, arg_val: Any, inputs: list[OpInput], scalars: dict[str, Any]) -> None:
        """Tensor arguments become inputs, everything else (shapes read at run time too) scalars."""
        for path, ref, value in _pairs(arg_node, arg_val, key):
            if isinstance(ref, Node) and isinstance(value, torch.Tensor):
                name, source, role = self.refs[ref.name]
                inputs.append(OpInput(name=name, source=input_source(role, source), arg=path,
                                      **meta_of(value).model_dump()))
            elif isinstance(ref, Node) and tensors_in(value):  # a tuple of tensors (split -> getitem)
                name, source, role = self.refs[ref.name]
                inputs.append(OpInput(name=name, source=input_source(role, source), arg=path))
            else:
                scalars[path] = jsonable(value)

    def _record_outputs(self, n: Node, result: Any) -> None:
        self.graph_outputs = [self.refs[a.name][0] for a in _flat_nodes(n.args) if a.name in self.refs]
        self.output_meta = [meta_of(t) for t in tensors_in(result)]


# Tensor attributes that are views of the tensor's data (transposed, conjugated); other getattr
# reads (`x.shape`, `x.dtype`) read metadata
_VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH"})


def _pairs(arg_node: Any, arg_val: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """(path, fx argument, its value) leaves; fx arguments mirror the structure of their values."""
    if isinstance(arg_node, (list, tuple)) and isinstance(arg_val, (list, tuple)) and len(arg_node) == len(arg_val) \
            and any(_has_node(a) for a in arg_node):
        for i, (a, v) in enumerate(zip(arg_node, arg_val)):
            yield from _pairs(a, v, f"{path}.{i}")
    else:
        yield path, arg_node, arg_val


def _has_node(value: Any) -> bool:
    return bool(_flat_nodes(value))


def _flat_nodes(value: Any) -> list[Node]:
    if isinstance(value, Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat_nodes(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat_nodes(v)]
    return []


def _qualified(target: Any) -> str:
    try:
        return _get_qualified_name(target)
    except Exception:  # some builtins have no qualified name
        return getattr(target, "__name__", repr(target))


def _arg_names(n: Node, module: nn.Module | None) -> list[str]:
    """Positional parameter names where Python can tell them (Python functions, modules), else []."""
    fn = module.forward if module is not None else (n.target if n.op == "call_function" else None)
    if fn is None:
        return []  # methods: positions ("0" is the tensor itself)
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # C builtins such as torch.softmax
        return []


def _module_settings(module: nn.Module) -> dict[str, Any]:
    """The constructor settings torch.nn declares as constants (stride, eps, approximate, ...)."""
    names = list(getattr(module, "__constants__", [])) + ["training"]
    if hasattr(module, "inplace"):
        names.append("inplace")
    return {k: jsonable(getattr(module, k)) for k in names if hasattr(module, k)}
