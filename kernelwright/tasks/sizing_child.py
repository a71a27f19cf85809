"""The child side of sizing (sizing.py): run a task module under torch's FakeTensorMode, where every
tensor has a shape, a dtype and a device but no storage, to measure its inputs, outputs,
parameters and the forward's FLOPs at candidate sizes without allocating them.

`python -m kernelwright.tasks.sizing_child` reads a JSON list of sizing.SizingJob from stdin and
prints {"ok": true, "replies": [sizing.SizingReply, ...]}.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

from kernelwright.child import child_main, load_task_module, one_line
from kernelwright.tasks import sizing as sz


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _describe(t: Any) -> str:
    return f"({', '.join(str(d) for d in t.shape)}) {str(t.dtype).removeprefix('torch.')}"


def _bytes(ts: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def measure_source(source: str, where: str) -> sz.Measured | str:
    """The module's problem, run under FakeTensorMode: nothing is allocated."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        try:
            module = load_task_module(source, where, "kernelwright_sized_task")
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
        except Exception as e:  # the module's own code: said in one line
            return one_line(e)
        ins = _tensors(inputs)
        seen: set[int] = set()
        params = [p for p in [*model.parameters(), *model.buffers()] if not (id(p) in seen or seen.add(id(p)))]
        outs: list[Any] = []
        flops: Optional[float] = None
        error = None
        try:
            with FlopCounterMode(display=False) as counter:
                outs = _tensors(model(*inputs))
            flops = float(counter.get_total_flops())
        except Exception as e:
            error = one_line(e)
    return sz.Measured(input_shapes=[_describe(t) for t in ins], output_shapes=[_describe(t) for t in outs],
                       input_bytes=_bytes(ins), output_bytes=_bytes(outs), param_bytes=_bytes(params),
                       flops=flops, forward_error=error)


def _values(source: str, slots: list[sz.Slot], where: str) -> dict[str, int] | str:
    """Each slot's value as the module computes it (a size switch such as `8192 if FULL else 64`
    is decided by KERNELWRIGHT_SIZE here)."""
    import ast

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        try:
            module = load_task_module(source, where, "kernelwright_sized_task")
        except Exception as e:
            return one_line(e)
    out: dict[str, int] = {}
    for s in slots:
        if s.value is not None:
            out[s.key] = s.value
            continue
        try:
            value = eval(compile(ast.parse(s.text.strip(), mode="eval"), where, "eval"), dict(vars(module)))  # noqa: S307
        except Exception:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            out[s.key] = value
    return out


def size_one(job: sz.SizingJob) -> sz.SizingReply:
    os.environ[sz.SIZE_ENV_NAME] = job.env_size
    req = sz.SizeRequest(size=job.size, mode=job.mode, env_size=job.env_size,
                         factor=sz.parse_factor(job.factor) if job.factor else None,
                         max_bytes=job.max_bytes, max_flops=job.max_flops)
    try:
        slots = sz.find_slots(job.source)
    except SyntaxError as e:
        return sz.SizingReply(error=f"{job.where}: not valid Python: {e.msg} (line {e.lineno})")
    values = _values(job.source, slots, job.where)
    if isinstance(values, str):
        return sz.SizingReply(note=f"importing it under FakeTensorMode failed: {values}")
    p = sz.plan(slots, values)

    def measure(assignment: dict[str, int]) -> sz.Measured | str:
        return measure_source(sz.rewrite(job.source, p.slots, assignment, values), job.where)

    original = measure(p.assignment())
    if isinstance(original, str):
        return sz.SizingReply(note=f"building it or its inputs under FakeTensorMode failed: {original}")
    try:
        chosen = sz.choose(p, req, measure, original, job.where)
    except sz.SizingError as e:
        return sz.SizingReply(error=str(e))
    second, second_m, why = sz.second_shape(p, measure, req)
    record = sz.sizing_record(req, p, chosen, original if req.mode in ("budget", "factor") else None,
                              second, second_m, why, values)
    return sz.SizingReply(source=sz.rewrite(job.source, p.slots, p.assignment(), values), sizing=record)


def handle(text: str) -> dict[str, Any]:
    jobs = [sz.SizingJob.model_validate(j) for j in json.loads(text)]
    return {"ok": True, "replies": [size_one(j).model_dump(mode="json") for j in jobs]}


if __name__ == "__main__":
    sys.exit(child_main(handle))
