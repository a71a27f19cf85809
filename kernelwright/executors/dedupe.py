"""Exact-duplicate candidates are evaluated once; every duplicate gets a copy of that result.

At low temperature a model often writes the same program twice, across samples and across
cells. Same task source, same extracted code, same evaluation settings: same job. The key is
content only (hashes), so it holds across threads and across executors (local pool, Ray).
"""

from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import Future

from kernelwright.evaluate.config import EvalRun
from kernelwright.records import EvalResult, Task


def result_key(task: Task, code_hash: str, run: EvalRun) -> str:
    """Content key of one evaluation: the task's id and source, the code, the whole config and
    what of the run's place can change a result (its device, build cache and extra environment);
    not when it runs (priority, deadline) or whether its folder is kept."""
    settings = {**run.config.model_dump(), "size": run.config.task_size, "device": run.device,
                "cache_dir": run.cache_dir, "extra_env": dict(run.extra_env)}
    material = {"task": task.id, "task_source": hashlib.sha256(task.source.encode()).hexdigest(),
                "code": code_hash, "cfg": settings}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


class LinkTable:
    """key -> the one Future evaluating it."""

    def __init__(self) -> None:
        self._futures: dict[str, Future[EvalResult]] = {}
        self._lock = threading.Lock()

    def claim(self, key: str) -> tuple[Future[EvalResult], Future[EvalResult] | None]:
        """(the caller's future, the future to fill or None when another caller already is).
        Each caller gets its own deep copy of the one result: callers may mutate theirs."""
        with self._lock:
            fut = self._futures.get(key)
            if fut is not None:
                return _copied(fut), None
            fut = Future()
            self._futures[key] = fut
            return _copied(fut), fut

    def forget(self, key: str) -> None:
        """Drop a key whose evaluation did not produce a verdict (an error of the machinery), so
        a later duplicate is evaluated afresh instead of inheriting the error."""
        with self._lock:
            self._futures.pop(key, None)


def _copied(source: Future[EvalResult]) -> Future[EvalResult]:
    """A future that completes with a deep copy of `source`'s result: callers may mutate theirs."""
    out: Future[EvalResult] = Future()

    def relay(done: Future[EvalResult]) -> None:
        if done.cancelled():  # a closed pool cancels what it never ran: so is every copy
            out.cancel()
            return
        exc = done.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(done.result().model_copy(deep=True))

    source.add_done_callback(relay)
    return out
