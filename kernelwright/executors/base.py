"""Where evaluations run: `direct` (each in a fresh sandboxed child of this process, one per
calling thread), `local` (an EvalPool on this machine: duplicates judged once, builds ahead in
compile slots, one device slot per device) or `ray` (a Ray cluster: kernelwright/executors/ray.py).

An executor is anything with `evaluate(task, text, run) -> EvalResult` (blocking, callable from
many threads) and `close()`. It is passed in (RunContext.executor, run_regime, the study's jobs),
never installed process-wide: what evaluates a command's candidates is what that command chose.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional, Protocol

from kernelwright.evaluate.evaluator import EvalRun, evaluate
from kernelwright.records import EvalResult, Task

EXECUTORS = ("direct", "local", "ray")


class Executor(Protocol):
    def evaluate(self, task: Task, candidate_text: str, run: Optional[EvalRun] = None) -> EvalResult: ...

    def close(self) -> None: ...


class Direct:
    """Each evaluation in a fresh sandboxed child of the calling process (`evaluate.evaluate`)."""

    def evaluate(self, task: Task, candidate_text: str, run: Optional[EvalRun] = None) -> EvalResult:
        return evaluate(task, candidate_text, run)

    def close(self) -> None:
        pass


def make_executor(kind: str, devices: Sequence[str], **options: Any) -> Executor:
    """`direct`: Direct(). `local`: an EvalPool over `devices`. `ray`: RayExecutor(**options)
    (address, max_retries, ...); the devices are the Ray workers' business there."""
    if kind == "direct":
        return Direct()
    if kind == "local":
        from kernelwright.executors.pool import EvalPool, PoolConfig

        return EvalPool(PoolConfig(devices=list(devices), **options))
    if kind == "ray":
        from kernelwright.executors.ray import RayExecutor

        return RayExecutor(**options)
    raise ValueError(f"unknown executor {kind!r}: use {' or '.join(EXECUTORS)}")


@contextmanager
def opened(executor: Executor) -> Iterator[Executor]:
    """The executor for the block; closed on the way out (a pool's workers stop)."""
    try:
        yield executor
    finally:
        executor.close()
