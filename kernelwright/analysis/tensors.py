"""Helpers shared by the two graph front ends (torch.fx and the ATen dispatch recorder).

Both front ends see real values while the model runs once on the example inputs; these helpers
turn those values into records (shapes, dtypes, JSON-safe scalars) and decide a node's role from
what actually happened (did the op return its input? does its output alias its input's storage?)
rather than from the op's name alone, because ``reshape``/``contiguous``/``float`` copy or not
depending on the tensor they get.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from kernelwright.analysis import ops
from kernelwright.analysis.types import OpInput, OpKind, Role, Source, TensorMeta


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def meta_of(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(shape=list(t.shape), dtype=dtype_name(t.dtype))


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Tensors in a (possibly nested) op result, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Leaves of nested args with a dotted path ("1", "0.2"); lists without tensors stay whole."""
    if isinstance(value, (list, tuple)) and any(_has_tensorish(v) for v in value):
        for i, v in enumerate(value):
            yield from walk(v, f"{path}.{i}" if path else str(i))
    else:
        yield path, value


def _has_tensorish(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_tensorish(v) for v in value)
    return isinstance(value, torch.Tensor) or type(value).__name__ == "Node"


def jsonable(value: Any) -> Any:
    """A JSON-safe rendering of a scalar argument (inf/nan as strings, dtypes by name)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, (torch.device, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, (list, tuple, torch.Size)):
        return [jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}"
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)[:80]


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """By storage identity, not address: a fake tensor's storage has none (every one reads 0)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        return StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage()) and a.numel() > 0
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
        return False


def decide_role(target: str, kind: OpKind, inputs: list[OpInput], result: Any,
                first_tensor_arg: torch.Tensor | None, inplace: bool = False) -> Role:
    outs = tensors_in(result)
    if target in ops.META or not outs:
        return Role.META
    if target in ops.FACTORIES:
        return Role.CONSTANT
    if not inputs or all(i.source == Source.CONSTANT for i in inputs):
        return Role.CONSTANT  # computed only from constants: a mask, a table of positions
    # Returning the very object it was given, without writing to it, is a no-op:
    # .contiguous() on contiguous data, .float() on fp32, .to(the same dtype).
    if first_tensor_arg is not None and outs[0] is first_tensor_arg and not inplace:
        return Role.NOOP
    if target == "identity" or (target == "dropout" and first_tensor_arg is not None
                                and shares_storage(outs[0], first_tensor_arg)):
        return Role.NOOP
    if kind == OpKind.DATA_MOVEMENT and first_tensor_arg is not None and shares_storage(outs[0], first_tensor_arg):
        return Role.VIEW  # whatever its name, no data moved (reshape of contiguous data, split)
    return Role.COMPUTE


def input_source(producer_role: Role | None, default: Source) -> Source:
    if producer_role in (Role.CONSTANT, Role.META):
        return Source.CONSTANT
    return default
