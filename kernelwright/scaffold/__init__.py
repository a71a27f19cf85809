"""Scaffolded generation: the system writes the program, the model writes only the math.

* ``plan_task(task, size)`` -> ``ScaffoldPlan`` (in a child process: traces the reference, finds
  the segment to fuse, writes ModelNew around it) or the reason there is none.
* ``write(plan, target)`` -> ``Scaffold``: the complete candidate for cuda | triton | cpp with one
  marked region.
* ``assemble(scaffold, answer)`` -> ``Assembly``: the model's answer spliced in, with the
  splicer's repairs recorded.

Plans are cached per (task source, size) in memory: they are deterministic, and a study asks
for the same task's scaffold once per regime and turn.
"""

from __future__ import annotations

import hashlib
import threading

from kernelwright.childproc import ChildTimeout, run_json_child
from kernelwright.records import Task

from .planner_job import PlanJob
from .skeleton import write
from .splice import assemble
from .types import BEGIN, END, Assembly, KernelArg, Scaffold, ScaffoldPlan, Segment, SegmentKind

__all__ = ["BEGIN", "END", "Assembly", "KernelArg", "Scaffold", "ScaffoldError", "ScaffoldPlan", "Segment",
           "SegmentKind", "assemble", "build", "plan_task", "write"]

DEFAULT_TIMEOUT_S = 300.0
_cache: dict[str, ScaffoldPlan] = {}
_lock = threading.Lock()


class ScaffoldError(Exception):
    """Planning failed (the task's code raised, the child died); the message is one line."""


def plan_task(task: Task, size: str = "small", timeout: float = DEFAULT_TIMEOUT_S, device: str = "cpu") -> ScaffoldPlan:
    """The task's plan, from the cache or a planning child on `device`. A task whose planning
    fails (its code raised, the child crashed) gets a plan that says why, cached like any other:
    every cell of a study would fail the same way. Only a timeout raises ScaffoldError (and is
    tried again next time: a loaded machine may be the cause)."""
    key = hashlib.sha256(f"{size}\0{task.id}\0{task.source}".encode()).hexdigest()
    with _lock:
        if key in _cache:
            return _cache[key]
    job = PlanJob(task_id=task.id, source=task.source, path=task.path, size=size, device=device)
    try:
        reply, code, tail = run_json_child("kernelwright.scaffold", job.model_dump_json(), timeout,
                                           {"KERNELWRIGHT_SIZE": size})
    except ChildTimeout as e:
        raise ScaffoldError(f"{task.id}: scaffold planning: {e}") from None
    if reply is None:
        result = _none(task, f"scaffold planning crashed (exit {code})" + (f": {tail}" if tail else ""))
    elif not reply.get("ok"):
        result = _none(task, f"scaffold planning: {reply.get('stage')}: {reply.get('error')}")
    else:
        result = ScaffoldPlan.model_validate(reply["plan"])
    with _lock:
        _cache[key] = result
    return result


def _none(task: Task, reason: str) -> ScaffoldPlan:
    return ScaffoldPlan(task_id=task.id, available=False, reason=reason)


def build(task: Task, target: str, size: str = "small", device: str = "cpu") -> Scaffold:
    return write(plan_task(task, size, device=device), target)
