"""A reference's inputs as fake tensors: shapes and dtypes at any size, no memory behind them.

Analysis and scaffold planning read shapes, dtypes and FLOPs from one run of the traced forward;
none of them needs the values of full-size tensors, and full-size tensors of some problems are
gigabytes (on a GPU that other processes share, they are what runs out). So `get_inputs()` runs
under a ``FakeTensorMode`` (every factory call returns a fake tensor of the requested shape) and
the forward runs on those: the module's real parameters are converted as each op reads them.
The same shapes come out at any size and on any machine, whatever memory is free.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from kernelwright.measure.draw import seed_all


def fake_mode() -> FakeTensorMode:
    # real tensors (the module's parameters and buffers) may meet fake ones: converted as read
    return FakeTensorMode(allow_non_fake_inputs=True)


def fake_inputs(get_inputs: Callable[[], Any], seed: int, mode: FakeTensorMode) -> list[Any]:
    """`get_inputs()` under `seed` and `mode`: its tensors fake, its other values as they are."""
    seed_all(seed)
    with mode:
        raw = get_inputs()
    if not isinstance(raw, (list, tuple)):
        raise TypeError(f"get_inputs() returned a {type(raw).__name__}, not a list of inputs")
    return list(raw)


def fake_mode_of(values: Sequence[Any]) -> contextlib.AbstractContextManager:
    """The FakeTensorMode of the first fake tensor in `values` (to run ops on them under it, so
    factory calls inside forward are fake too), else nothing."""
    for v in values:
        if isinstance(v, FakeTensor):
            return v.fake_mode
    return contextlib.nullcontext()
