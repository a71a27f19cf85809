"""How a study shares its model: concurrent cells' requests reach it as one call, and a model
with a device holds that device (its lock file) while it generates."""

from __future__ import annotations

import fcntl
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import pytest

from kernelwright.device import lock_path
from kernelwright.llm.base import Completion, GenerationRequest
from kernelwright.study.runner import shared_backend


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path / "locks"))


class Probe:
    """A model double on `device` that looks, while it generates, at whether the device is held."""

    model = "probe"
    batches_requests = True

    def __init__(self, device: str | None) -> None:
        self.device = device
        self.seen: list[tuple[bool, int]] = []
        self.shared_ok: list[bool] = []

    def generate(self, requests):
        path = lock_path("cuda:0")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = False
                fcntl.flock(other, fcntl.LOCK_UN)
            except BlockingIOError:
                held = True
            try:  # an evaluation's correctness run (shared: no clock) may run beside generation
                fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
                self.shared_ok.append(True)
                fcntl.flock(other, fcntl.LOCK_UN)
            except BlockingIOError:
                self.shared_ok.append(False)
        self.seen.append((held, len(requests)))
        return [[Completion(text="x", finish_reason="stop", prompt_tokens=1, completion_tokens=1, latency_s=0.0)]
                for _ in requests]


def test_a_model_on_a_device_holds_it_and_cells_share_its_calls():
    probe = Probe("cuda")
    shared = shared_backend(probe)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: shared.generate([GenerationRequest.chat("q")]), range(4)))
    # held against timings (exclusive), not against correctness runs (shared)
    assert probe.seen and all(held for held, _ in probe.seen) and all(probe.shared_ok)
    assert sum(n for _, n in probe.seen) == 4 and len(probe.seen) < 4  # the linger gathered the wave


def test_a_model_without_a_device_holds_nothing():
    probe = Probe(None)
    shared_backend(probe).generate([GenerationRequest.chat("q")])
    assert probe.seen == [(False, 1)]


def _held_alone() -> bool:
    """Whether something holds cuda:0's lock (an exclusive request would wait)."""
    with open(lock_path("cuda:0"), "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(other, fcntl.LOCK_UN)
        return False


class Batched(Probe):
    """A double of a backend that generates one call in batches, holding `batch_guard` around each
    (as transformers_backend does)."""

    def __init__(self, device: str | None) -> None:
        super().__init__(device)
        self.batch_guard = nullcontext()
        self.between: list[bool] = []

    def generate(self, requests):
        lock_path("cuda:0").parent.mkdir(parents=True, exist_ok=True)
        for k in range(3):
            with self.batch_guard:
                self.seen.append((_held_alone(), k))
            self.between.append(_held_alone())
        return [[Completion(text="x", finish_reason="stop", prompt_tokens=1, completion_tokens=1, latency_s=0.0)]
                for _ in requests]


def test_a_batched_model_holds_its_device_a_batch_at_a_time():
    # a timing waiting for the device gets it between two batches of one long call
    probe = Batched("cuda")
    shared_backend(probe).generate([GenerationRequest.chat("q")])
    assert [held for held, _ in probe.seen] == [True, True, True]
    assert probe.between == [False, False, False]
