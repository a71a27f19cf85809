"""How a study shares its devices: a model generating on a device holds it (this process's lock
and the device's lock file), and concurrent cells' requests reach the model as one call."""

from __future__ import annotations

import fcntl
from concurrent.futures import ThreadPoolExecutor

from kernelwright.llm.base import Completion, GenerationRequest
from kernelwright.study.runner import DeviceSlots, SharedBackend


class Probe:
    """A model double on `device` that looks, while it generates, at who holds that device."""

    model = "probe"

    def __init__(self, device: str, slots: DeviceSlots, lock_file) -> None:
        self.device, self.slots, self.lock_file = device, slots, lock_file
        self.seen: list[tuple[bool, bool, int]] = []

    def generate(self, requests):
        self.lock_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_file, "a") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                file_free = True
                fcntl.flock(other, fcntl.LOCK_UN)
            except BlockingIOError:
                file_free = False
        self.seen.append((self.slots.locks["cuda"].locked(), file_free, len(requests)))
        return [[Completion(text="x", finish_reason="stop", prompt_tokens=1, completion_tokens=1, latency_s=0.0)]
                for _ in requests]


def test_a_model_on_a_study_device_holds_it_while_generating(tmp_path):
    slots = DeviceSlots(["cuda"])
    probe = Probe("cuda:0", slots, tmp_path / "device-locks" / "cuda:0.lock")
    shared = SharedBackend(probe, slots, tmp_path)

    def cell() -> None:
        device = slots.take()
        with slots.holding(device):  # a cell holds its device, and lets go of it to generate
            shared.generate([GenerationRequest.chat("q")])
        slots.give(device)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: cell(), range(4)))
    assert probe.seen and all(locked and not file_free for locked, file_free, _ in probe.seen)
    assert sum(n for *_, n in probe.seen) == 4
    assert not slots.locks["cuda"].locked()


def test_a_model_elsewhere_does_not_take_the_device(tmp_path):
    slots = DeviceSlots(["cuda"])
    probe = Probe("cpu", slots, tmp_path / "device-locks" / "cuda:0.lock")
    shared = SharedBackend(probe, slots, tmp_path)
    shared.generate([GenerationRequest.chat("q")])
    assert probe.seen == [(False, True, 1)]


def test_a_cell_waiting_on_helper_threads_lets_the_pool_time_its_candidate(fast_cfg):
    """A regime hands evaluations to helper threads while its cell holds the device; the pool's
    device slot needs that device: the cell must let go of it while it waits (a deadlock before)."""
    from concurrent.futures import ThreadPoolExecutor as Helpers

    from kernelwright.evaluate import evaluate
    from kernelwright.evaluate.evaluator import waiting_for_evaluations
    from kernelwright.evaluate.executors import installed, make_executor
    from kernelwright.records import Verdict
    from kernelwright.study.runner import DeviceReleasingExecutor
    from kernelwright.tasks import load_task
    from tests.conftest import CANDIDATES, TASKS

    slots = DeviceSlots(["cpu"])
    task = load_task(str(TASKS / "bias_relu.py"))
    text = (CANDIDATES / "cpu" / "torch_only.py").read_text()
    executor = DeviceReleasingExecutor(make_executor("local", ["cpu"], device_locks=slots.locks,
                                                     compile_workers=1), slots)
    with installed(executor):
        device = slots.take()
        with slots.holding(device), waiting_for_evaluations(), Helpers(2) as helpers:
            results = list(helpers.map(lambda _: evaluate(task, text, fast_cfg()), range(2)))
        slots.give(device)
    assert [r.verdict for r in results] == [Verdict.NO_CUSTOM_KERNEL] * 2
