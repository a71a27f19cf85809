"""Whoever times on a device holds it: threads, sandboxed workers and other processes take turns."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelwright.evaluate import evaluate
from kernelwright.evaluate.device_lock import DeviceLock, lock_path
from kernelwright.records import Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path, monkeypatch):
    # the workers read the variable too: their environment is a copy of this one
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path / "locks"))


def test_a_worker_waits_for_the_device_to_time_but_not_to_check(fast_cfg):
    task = load_task(str(TASKS / "bias_relu.py"))
    text = (CANDIDATES / "cpu" / "torch_only.py").read_text()
    with ThreadPoolExecutor(2) as pool, DeviceLock("cpu"):  # held by "another" timing
        timed = pool.submit(evaluate, task, text, fast_cfg())
        untimed = pool.submit(evaluate, task, text + "\n# not timed\n", fast_cfg(time=False))
        assert untimed.result(timeout=300).verdict == Verdict.NO_CUSTOM_KERNEL
        time.sleep(2)
        assert not timed.done()  # its correctness checks ran; its timing waits for the device
    result = timed.result(timeout=300)
    assert result.verdict == Verdict.NO_CUSTOM_KERNEL and result.runtime_ms is not None


def test_the_lock_is_reentrant_in_a_thread_and_exclusive_across_threads():
    order: list[str] = []

    def grab() -> None:
        with DeviceLock("cuda:0"):
            order.append("other")

    with DeviceLock("cuda"), DeviceLock("cuda:0"):  # one GPU, held twice by this thread
        other = threading.Thread(target=grab)
        other.start()
        time.sleep(0.5)
        order.append("mine")
    other.join(timeout=10)
    assert order == ["mine", "other"] and lock_path("cuda").is_file()
