"""Where a study's evaluations run: `local` (an EvalPool on this machine, the default) or `ray`
(a Ray cluster: kernelwright/executors/ray.py).

An executor is anything with `evaluate(task, text, cfg) -> EvalResult` (blocking, callable from
many threads) and `close()`. `installed(executor)` routes every `kernelwright.evaluate.evaluate`
call of this process through it for the duration of a `with` block, so the strategies, which
call `evaluate` themselves, need no change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional, Protocol

from kernelwright.evaluate.evaluator import EvalConfig, set_executor
from kernelwright.records import EvalResult, Task

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    def evaluate(self, task: Task, candidate_text: str, cfg: Optional[EvalConfig] = None) -> EvalResult: ...

    def close(self) -> None: ...


def make_executor(kind: str, devices: Sequence[str], **options: Any) -> Executor:
    """`local`: an EvalPool over `devices`. `ray`: RayExecutor(**options) (address, max_retries,
    ...); the devices are the Ray workers' business there."""
    if kind == "local":
        from kernelwright.executors.pool import EvalPool, PoolConfig

        return EvalPool(PoolConfig(devices=list(devices), **options))
    if kind == "ray":
        from kernelwright.executors.ray import RayExecutor

        return RayExecutor(**options)
    raise ValueError(f"unknown executor {kind!r}: use {' or '.join(EXECUTORS)}")


@contextmanager
def installed(executor: Executor) -> Iterator[Executor]:
    """Route evaluate() through `executor` inside the block; close it on the way out."""
    previous = set_executor(executor)
    try:
        yield executor
    finally:
        set_executor(previous)
        executor.close()
