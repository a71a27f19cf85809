"""Out of memory is its own outcome (kernelwright issue #19): not the candidate's runtime error, and
re-run once alone before it stands. Real evaluations in real sandboxes; the memory is really
refused (an allocation no machine can serve, so no page is ever touched)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kernelwright import device as device_lock
from kernelwright.evaluate import evaluate
from kernelwright.evaluate.candidate_load import classify_runtime
from kernelwright.evaluate.cuda_arena import CudaError
from kernelwright.records import Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS

OOM = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        scratch = torch.empty(1 << 46, dtype=torch.uint8)  # 64 TiB
        return torch.relu(x + self.bias) + scratch[:1].float() * 0
'''

HEALTHY = (CANDIDATES / "cpu" / "torch_only.py").read_text()  # an honest PyTorch rewrite


@pytest.fixture(scope="module")
def task():
    return load_task(str(TASKS / "bias_relu.py"))


@pytest.fixture
def cfg(fast_cfg, tmp_path, monkeypatch):
    # a lock folder of this test's own: the admission lock it holds must not meet other tests' runs
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path / "locks"))
    return fast_cfg(time=False, static_checks=False)


def test_the_classifier_names_allocation_failures():
    for e in (MemoryError(), RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
              RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"),
              RuntimeError("CUDA error: out of memory"),
              CudaError("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2)")):  # the driver API's (cuda_arena)
        assert classify_runtime(e)[0] == "out_of_memory", e
    for e in (RuntimeError("index 7 is out of bounds"), ValueError("out of memory")):
        assert classify_runtime(e)[0] == "runtime_error", e


def test_out_of_memory_waits_for_the_others_then_is_re_run_alone(task, cfg):
    """Another evaluation holds the device (its admission, shared) until this candidate has run out
    of memory beside it, and a second longer: the re-run waits for it, and the record says so."""
    held, first_done, released = threading.Event(), threading.Event(), threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "re-running it alone" in record.getMessage():
                first_done.set()

    def other_evaluation() -> None:
        with device_lock.DeviceLock(cfg.device, shared=True, kind="admission"):
            held.set()
            first_done.wait(300)
            time.sleep(1.0)
        released.set()

    logger = logging.getLogger("kernelwright.evaluate.evaluator")
    handler, level = Seen(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    t = threading.Thread(target=other_evaluation)
    t.start()
    try:
        assert held.wait(30)
        r = evaluate(task, OOM, cfg)
    finally:
        first_done.set()
        t.join()
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert r.verdict == Verdict.OUT_OF_MEMORY, (r.verdict, r.error)
    assert "can't allocate memory" in (r.error or ""), r.error
    assert released.is_set()
    flag = next(f for f in r.flags if "re-run alone" in f)
    waited = float(flag.split("after waiting ")[1].split(" s")[0])
    assert waited >= 0.5, flag  # it waited for the other evaluation to let go
    assert not r.correct


def test_an_out_of_memory_candidate_beside_a_healthy_one(task, cfg):
    results: dict[str, object] = {}

    def run(name: str, code: str) -> None:
        results[name] = evaluate(task, code, cfg)

    threads = [threading.Thread(target=run, args=a) for a in (("oom", OOM), ("healthy", HEALTHY))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    oom, healthy = results["oom"], results["healthy"]
    assert oom.verdict == Verdict.OUT_OF_MEMORY and any("re-run alone" in f for f in oom.flags), oom.error
    # the healthy one is judged on its own merits (torch only: right outputs, no custom kernel)
    assert healthy.verdict == Verdict.NO_CUSTOM_KERNEL and healthy.correct, healthy.error
    assert not any("re-run alone" in f for f in healthy.flags)


# the same module, touching every page of 2 GiB instead of asking for what no machine can serve
GREEDY = OOM.replace("torch.empty(1 << 46, dtype=torch.uint8)  # 64 TiB",
                     "torch.ones(1 << 31, dtype=torch.uint8)  # 2 GiB, every page touched")
assert GREEDY != OOM


def test_a_candidate_killed_at_the_memory_limit_is_out_of_memory_not_a_crash(task, cfg):
    """The kernel kills the candidate's process when it touches more than the evaluation's memory
    limit (its cgroup's): that is `out_of_memory`, said as such, never a `crash`; re-run alone, it
    stays so (the limit is its own). An honest candidate under the same limit is correct."""
    from dataclasses import replace

    from kernelwright.confine import offer

    if not offer().cgroup:
        pytest.skip("no cgroup here: the memory limit is RLIMIT_DATA, an allocation failure, tested above")
    small = cfg.but(memory_limit_mb=1024)
    r = evaluate(task, GREEDY, small)
    assert r.verdict == Verdict.OUT_OF_MEMORY, (r.verdict, r.error)
    assert "memory limit of 1024 MB" in r.error and r.confinement.memory_limit_mb == 1024
    assert any("re-run alone" in f for f in r.flags)
    assert evaluate(task, HEALTHY, small).verdict == Verdict.NO_CUSTOM_KERNEL


def test_a_reference_out_of_memory_is_re_run_alone_then_fails_the_task_not_the_candidate(task, cfg, tmp_path):
    """The reference's own run out of memory is the device's state as a candidate's is (a study's
    runners share the GPU): re-run alone; out of memory alone too, the task fails (EvaluatorError,
    as any failing reference), never a verdict on the candidate."""
    from kernelwright.errors import EvaluatorError

    source = (TASKS / "bias_relu.py").read_text().replace(
        "        return torch.relu(x + self.bias)",
        "        scratch = torch.empty(1 << 46, dtype=torch.uint8)  # 64 TiB\n"
        "        return torch.relu(x + self.bias) + scratch[:1].float() * 0")
    path = tmp_path / "greedy_reference.py"
    path.write_text(source)
    seen: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("kernelwright.evaluate.evaluator")
    handler, level = Seen(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with pytest.raises(EvaluatorError, match="the reference itself fails: out of device memory even alone"):
            evaluate(load_task(str(path)), HEALTHY, cfg)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert any("re-running it alone" in m and "the reference ran out of device memory" in m for m in seen), seen
