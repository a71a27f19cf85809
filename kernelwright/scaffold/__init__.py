"""Scaffolded generation: the system writes the program, the model writes only the math.

* ``plan_task(task, size)`` -> ``ScaffoldPlan`` (in a child process: traces the reference, finds
  the segment to fuse, writes ModelNew around it) or the reason there is none.
* ``write(plan, target)`` -> ``Scaffold``: the complete candidate for cuda | triton | cpp with one
  marked region.
* ``assemble(scaffold, answer)`` -> ``Assembly``: the model's answer spliced in, with the
  splicer's repairs recorded.
* ``precheck(plan, target, region)`` / ``precheck_many(...)`` -> ``PrecheckResult``: the region
  against the segment computed by PyTorch on probe values, in well under a second, before any
  extension build (``precheck/``).
* ``region_grammar(scaffold)`` -> GBNF of a region answer (``grammar.py``): what constrained
  decoding lets the model write.

Plans are cached per (task source, size) in memory: they are deterministic, and a study asks
for the same task's scaffold once per regime and turn.
"""

from __future__ import annotations

import hashlib
import threading

from kernelwright.child import ChildTimeout, run_json_child
from kernelwright.records import Task
from kernelwright.scaffold.compose import write
from kernelwright.scaffold.grammar import region_grammar
from kernelwright.scaffold.planner_job import PlanBatch, PlanJob
from kernelwright.scaffold.precheck import Counterexample, PrecheckResult, PrecheckStatus, precheck, precheck_many
from kernelwright.scaffold.splice import assemble
from kernelwright.scaffold.types import (
    BEGIN,
    END,
    Assembly,
    KernelArg,
    Probes,
    Scaffold,
    ScaffoldPlan,
    Segment,
    SegmentKind,
)
from kernelwright.scaffold.writers import default_launch, launch_variants, shared_programs, with_launch

__all__ = ["BEGIN", "END", "Assembly", "Counterexample", "KernelArg", "PrecheckResult", "PrecheckStatus", "Probes",
           "Scaffold", "ScaffoldError", "ScaffoldPlan", "Segment", "SegmentKind", "assemble", "build", "default_launch",
           "launch_variants", "plan_task", "plan_tasks", "precheck", "precheck_many", "region_grammar",
           "shared_programs", "with_launch", "write"]

DEFAULT_TIMEOUT_S = 300.0
_cache: dict[str, ScaffoldPlan] = {}
_lock = threading.Lock()


class ScaffoldError(Exception):
    """Planning failed (the task's code raised, the child died); the message is one line."""


def _key(task: Task, size: str) -> str:
    return hashlib.sha256(f"{size}\0{task.id}\0{task.source}".encode()).hexdigest()


def _job(task: Task, size: str) -> PlanJob:
    return PlanJob(task_id=task.id, source=task.source, path=task.path, size=size)


def _result(task: Task, reply: dict | None, code: int, tail: str) -> ScaffoldPlan:
    if reply is None:
        return _none(task, f"scaffold planning crashed (exit {code})" + (f": {tail}" if tail else ""))
    if not reply.get("ok"):
        return _none(task, f"scaffold planning: {reply.get('stage')}: {reply.get('error')}")
    return ScaffoldPlan.model_validate(reply["plan"])


def _remember(task: Task, size: str, plan: ScaffoldPlan) -> ScaffoldPlan:
    with _lock:
        return _cache.setdefault(_key(task, size), plan)


def plan_task(task: Task, size: str = "small", timeout: float = DEFAULT_TIMEOUT_S, device: str = "cpu") -> ScaffoldPlan:
    """The task's plan, from the cache or a planning child. The child plans on the CPU from shapes
    whatever `device` the task runs on (plan.py), so the plan is the same on any machine and any
    amount of free memory; `device` is taken so that callers need not know. A task whose planning
    fails (its code raised, the child crashed) gets a plan that says why, cached like any other:
    every cell of a study would fail the same way. Only a timeout raises ScaffoldError (and is
    tried again next time: a loaded machine may be the cause)."""
    with _lock:
        if _key(task, size) in _cache:
            return _cache[_key(task, size)]
    try:
        reply, code, tail = run_json_child("kernelwright.scaffold", _job(task, size).model_dump_json(),
                                           timeout, {"KERNELWRIGHT_SIZE": size})
    except ChildTimeout as e:
        raise ScaffoldError(f"{task.id}: scaffold planning: {e}") from None
    return _remember(task, size, _result(task, reply, code, tail))


def plan_tasks(tasks: list[Task], size: str = "small", timeout: float = DEFAULT_TIMEOUT_S,
               device: str = "cpu") -> list[ScaffoldPlan]:
    """Plans for many tasks from one child (one interpreter start and torch import for all: most of
    a plan's cost). The tasks share that process, which is fine for planning (it only traces and
    runs each reference once); if the child dies or times out, the tasks it did not answer are
    planned one child each, so one bad task cannot cost the others their plans."""
    with _lock:
        todo = [t for t in dict.fromkeys(tasks, None) if _key(t, size) not in _cache]
    if len(todo) > 1:
        batch = PlanBatch(jobs=[_job(t, size) for t in todo])
        try:
            reply, _, _ = run_json_child("kernelwright.scaffold", batch.model_dump_json(),
                                         timeout * len(todo), {"KERNELWRIGHT_SIZE": size})
        except ChildTimeout:
            reply = None
        for task, one in zip(todo, (reply or {}).get("replies") or []):
            _remember(task, size, _result(task, one, 0, ""))
    return [plan_task(t, size, timeout, device) for t in tasks]


def _none(task: Task, reason: str) -> ScaffoldPlan:
    return ScaffoldPlan(task_id=task.id, available=False, reason=reason)


def build(task: Task, target: str, size: str = "small", device: str = "cpu") -> Scaffold:
    return write(plan_task(task, size, device=device), target)
