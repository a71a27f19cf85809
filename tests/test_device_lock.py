"""Whoever times on a device holds it: threads, sandboxed workers and other processes take turns."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelwright.device import DeviceLock, lock_path
from kernelwright.evaluate import evaluate
from kernelwright.records import Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path, monkeypatch):
    # the workers read the variable too: their environment is a copy of this one
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path / "locks"))


def test_an_evaluation_waits_while_another_process_times_on_its_device(fast_cfg):
    """Correctness runs hold the device shared, timings exclusively: while "another" timing holds
    it, neither a timed nor an untimed evaluation gets through; both finish once it is released,
    and the timed one records its wait."""
    task = load_task(str(TASKS / "bias_relu.py"))
    text = (CANDIDATES / "cpu" / "torch_only.py").read_text()
    with ThreadPoolExecutor(2) as pool:
        with DeviceLock("cpu"):  # held by "another" timing
            timed = pool.submit(evaluate, task, text, fast_cfg())
            untimed = pool.submit(evaluate, task, text + "\n# not timed\n", fast_cfg(time=False))
            time.sleep(12)  # longer than an untimed torch-only evaluation takes (3-4 s here)
            assert not untimed.done() and not timed.done()
        assert untimed.result(timeout=300).verdict == Verdict.NO_CUSTOM_KERNEL
        result = timed.result(timeout=300)
    assert result.verdict == Verdict.NO_CUSTOM_KERNEL and result.runtime_ms is not None
    assert result.device_lock_wait_s is not None


def test_shared_holders_overlap_and_an_exclusive_one_waits_for_them():
    events: list[str] = []

    def reader(name: str, hold: float) -> None:
        with DeviceLock("cpu", shared=True):
            events.append(f"{name} in")
            time.sleep(hold)
            events.append(f"{name} out")

    def writer() -> None:
        with DeviceLock("cpu") as held:
            events.append("timing")
        assert held.waited > 0.3

    a = threading.Thread(target=reader, args=("a", 1.0))
    b = threading.Thread(target=reader, args=("b", 1.0))
    a.start()
    b.start()
    time.sleep(0.3)
    w = threading.Thread(target=writer)
    w.start()
    for t in (a, b, w):
        t.join(timeout=10)
    assert sorted(events[:2]) == ["a in", "b in"]  # both readers held it at once
    assert events[-1] == "timing" and sorted(events[2:4]) == ["a out", "b out"]


def test_a_shared_hold_inside_an_exclusive_one_keeps_it_exclusive():
    order: list[str] = []

    def grab() -> None:
        with DeviceLock("cpu", shared=True):
            order.append("other")

    with DeviceLock("cpu"), DeviceLock("cpu", shared=True):
        other = threading.Thread(target=grab)
        other.start()
        time.sleep(0.5)
        order.append("mine")
    other.join(timeout=10)
    assert order == ["mine", "other"]


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


def test_a_waiting_timing_goes_before_later_shared_requests():
    """flock alone lets shared requests slip past a waiting exclusive one: on the H200, two studies'
    overlapping correctness runs kept a plain copy's timing waiting until it timed out. Here a
    reader holds the device, a timing waits, a second reader asks after it: the timing comes first."""
    events: list[str] = []
    release_a = threading.Event()

    def reader_a() -> None:
        with DeviceLock("cpu", shared=True):
            events.append("a in")
            release_a.wait(30)
        events.append("a out")

    def writer() -> None:
        with DeviceLock("cpu"):
            events.append("timing in")
            time.sleep(0.2)
            events.append("timing out")

    def reader_b() -> None:
        with DeviceLock("cpu", shared=True):
            events.append("b in")

    a = threading.Thread(target=reader_a)
    a.start()
    while "a in" not in events:
        time.sleep(0.01)
    w = threading.Thread(target=writer)
    w.start()
    time.sleep(0.3)  # the timing is waiting now (a holds the device)
    b = threading.Thread(target=reader_b)
    b.start()
    time.sleep(0.5)  # without the gate, b would be in by now, beside a
    assert "b in" not in events, events
    release_a.set()
    for t in (a, w, b):
        t.join(30)
    assert events.index("timing out") < events.index("b in"), events


def test_two_holders_upgrading_at_once_do_not_deadlock():
    """shared -> exclusive in two threads at once: each lets go before waiting behind the gate."""
    both_shared = threading.Barrier(2)
    done: list[str] = []

    def upgrade(name: str) -> None:
        with DeviceLock("cpu", shared=True):
            both_shared.wait(10)
            with DeviceLock("cpu"):
                done.append(name)

    threads = [threading.Thread(target=upgrade, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(done) == ["a", "b"]
