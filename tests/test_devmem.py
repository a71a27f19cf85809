"""GPU work admitted by measured memory (kernelwright issue #19; kernelwright/devmem.py).

There is no GPU here, so the driver's readings come from a stand-in (`Driver`); everything else is
real: the ledger's files and flock in a folder of the test's own, real child processes contending
for it (one of them killed), a real process tree sampled, nvidia-smi's real CSV text parsed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from kernelwright import devmem
from kernelwright.devmem import MIB, Ledger, Sampler

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Driver:
    """The driver's readings, as a test sets them."""

    used: int = 0
    total: int = 1000 * MIB
    processes: dict[int, int] = field(default_factory=dict)
    calls: int = 0

    def device_memory(self, device: str) -> Optional[tuple[int, int]]:
        return self.used, self.total

    def process_memory(self, device: str) -> Optional[dict[int, int]]:
        self.calls += 1
        return dict(self.processes)


# A second kernelwright process: takes an admission for a task on the same ledger, says when it is
# in and when it lets go (wall-clock times, comparable across processes), holds it `hold` seconds.
HOLDER = """
import sys, time
from pathlib import Path
from kernelwright.devmem import MIB, Ledger

class Driver:
    def device_memory(self, device):
        return 0, 1000 * MIB
    def process_memory(self, device):
        return {}

folder, key, hold = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
with Ledger("cuda:0", Driver(), folder=folder, poll_s=0.05).admit(key):
    print("in", time.time(), flush=True)
    time.sleep(hold)
    out = time.time()
print("out", out, flush=True)
"""


def start_holder(folder: Path, key: str, hold: float) -> tuple[subprocess.Popen, float]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), key, str(hold)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline().split()
    assert line and line[0] == "in", line
    return proc, float(line[1])


@pytest.fixture
def folder(tmp_path) -> Path:
    return tmp_path / "locks"


def ledger(folder: Path, driver: Optional[Driver] = None) -> Ledger:
    return Ledger("cuda:0", driver or Driver(), folder=folder, poll_s=0.05)


def test_a_second_process_waits_until_the_first_lets_go_when_both_do_not_fit(folder):
    """The important one: two real processes on one ledger. 500 MiB measured -> 600 MiB needed
    each; two do not fit in 90% of 1000 MiB, so the second waits for the first to release."""
    ledger(folder).record("big", 500 * MIB)
    holder, _ = start_holder(folder, "big", 1.5)
    try:
        with ledger(folder).admit("big") as admission:
            admitted_at = time.time()
        out = holder.stdout.readline().split()
    finally:
        holder.wait(timeout=30)
    assert out[0] == "out" and admitted_at >= float(out[1])
    assert admission.need_bytes == 600 * MIB and not admission.alone
    assert admission.waited_s > 0.5
    assert ledger(folder).admitted() == {}  # both released


def test_two_that_fit_are_admitted_at_once(folder):
    ledger(folder).record("small", 200 * MIB)
    holder, _ = start_holder(folder, "small", 1.5)
    try:
        with ledger(folder).admit("small") as admission:
            others = [v for v in ledger(folder).admitted().values() if v["pid"] == holder.pid]
            still = holder.poll() is None
    finally:
        holder.wait(timeout=30)
    assert still and len(others) == 1 and others[0]["bytes"] == 240 * MIB
    assert admission.waited_s < 0.5 and admission.need_bytes == 240 * MIB


def test_memory_others_hold_counts(folder):
    """Memory someone else holds (a model server, another user) leaves less room: the driver's
    `used` is compared too, not only our reservations. 700 MiB used by others + 240 needed > 900."""
    driver = Driver(used=700 * MIB)
    ledger(folder, driver).record("t", 200 * MIB)
    entered = threading.Event()

    def second() -> None:
        with ledger(folder, driver).admit("t"):
            entered.set()

    with ledger(folder, driver).admit("t") as first:
        assert first.alone  # did not fit, but nothing else of ours ran
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.5)
        assert not entered.is_set()
        driver.used = 100 * MIB  # the other user let go: max(100, 240) + 240 fits beside the first
        assert entered.wait(timeout=5)
    t.join(timeout=10)


def test_a_task_bigger_than_the_device_runs_alone(folder):
    """Needing more than the device holds is admitted when nothing else of ours is, and then
    keeps every other admission out until it is done."""
    big = ledger(folder)
    big.record("huge", 2000 * MIB)
    entered = threading.Event()

    def second() -> None:
        with ledger(folder).admit("other"):
            entered.set()

    with big.admit("huge") as admission:
        assert admission.alone and admission.need_bytes == 2400 * MIB and admission.waited_s < 0.5
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.6)
        assert not entered.is_set()
    t.join(timeout=10)
    assert entered.is_set()


def test_an_admission_of_a_killed_process_is_dropped(folder):
    holder, _ = start_holder(folder, "big", 60)
    try:
        assert [v["pid"] for v in ledger(folder).admitted().values()] == [holder.pid]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert ledger(folder).admitted() == {}  # the kernel says the process is gone: so is its place
    ledger(folder).record("big", 700 * MIB)  # 840 MiB: fits alone, not beside the dead one's 125
    with ledger(folder).admit("big") as admission:
        assert admission.waited_s < 0.5 and not admission.alone


def test_footprints_are_kept_and_used(folder, fast_cfg):
    led = ledger(folder)
    with led.admit("unmeasured") as first:
        pass
    assert first.need_bytes == 1000 * MIB // 8 and first.footprint_bytes is None  # the first guess
    led.record("t", 500 * MIB)
    led.record("t", 300 * MIB)  # a smaller peak does not lower what the task may need
    assert led.footprint("t") == 500 * MIB
    with led.admit("t") as second:
        assert second.need_bytes == 600 * MIB
    assert json.loads(led.footprints_path.read_text()) == {"t": 500 * MIB}

    from kernelwright.evaluate.evaluator import footprint_key
    from kernelwright.records import Task

    task = Task(id="user/t", name="t", source="x = 1\n")
    gpu = fast_cfg(device="cuda:0")
    assert footprint_key(task, gpu).startswith("user/t|full|")
    assert footprint_key(task, gpu) != footprint_key(task.model_copy(update={"source": "x = 2\n"}), gpu)
    assert footprint_key(task, fast_cfg(device="cuda:0", size="small")).startswith("user/t|small|")


def test_a_corrupt_ledger_costs_nothing(folder, caplog):
    led = ledger(folder)
    folder.mkdir(parents=True)
    led.admitted_path.write_text("{not json")
    led.footprints_path.write_text("[1, 2")
    with led.admit("t") as admission:
        assert admission.need_bytes == 1000 * MIB // 8
        assert list(json.loads(led.admitted_path.read_text())) == [admission.token]
    led.record("t", 10 * MIB)
    assert json.loads(led.footprints_path.read_text()) == {"t": 10 * MIB}
    assert "unreadable" in caplog.text
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]  # writes went through os.replace


def test_no_driver_answer_admits(folder):
    """A driver that does not say (a reading failed) must not stall the evaluation."""

    class Silent(Driver):
        def device_memory(self, device):
            return None

    led = ledger(folder, Silent())
    with led.admit("a"), led.admit("b") as second:
        assert second.waited_s < 0.5


# ---------------------------------------------------------------------------- the driver's text

SMI_MEMORY = "1523, 143771\n"
SMI_APPS = "4012, 1024\n4013, 517\n4100, [N/A]\n"


def test_nvidia_smi_text_is_parsed():
    assert devmem.parse_memory_csv(SMI_MEMORY) == (1523 * MIB, 143771 * MIB)
    assert devmem.parse_apps_csv(SMI_APPS) == {4012: 1024 * MIB, 4013: 517 * MIB}
    assert devmem.parse_apps_csv("") == {} and devmem.parse_apps_csv("No running processes found\n") == {}
    assert devmem.parse_memory_csv("[N/A], [N/A]\n") is None


def test_cuda_visible_devices_maps_to_the_physical_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devmem.physical_id("cuda") == "0" and devmem.physical_id("cuda:3") == "3"
    assert devmem.physical_id("cuda:1", "2,5") == "5" and devmem.physical_id("cuda", "2,5") == "2"
    assert devmem.physical_id("cuda:2", "2,5") is None
    assert devmem.physical_id("cuda:0", "-1") is None and devmem.physical_id("cuda:1", "4,-1,6") is None
    assert devmem.physical_id("cuda:0", "GPU-8f3a,GPU-1b2c") == "GPU-8f3a"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    assert devmem.physical_id("cuda:1") == "7"


def test_locks_and_ledgers_are_the_physical_gpus(tmp_path, monkeypatch):
    """Ray gives every task its GPU as cuda:0: two tasks on two GPUs of a host must not share a
    device lock or a memory ledger, and one GPU must be one lock whatever its index in a process."""
    from kernelwright.device import lock_key, lock_path

    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert lock_key("cuda") == lock_key("cuda:0") == "cuda:0" and lock_key("cpu") == "cpu"
    plain = lock_path("cuda:3", "admission")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert lock_key("cuda:0") == "cuda:3" and lock_path("cuda:0", "admission") == plain
    ledger = Ledger("cuda:0", Driver(), folder=tmp_path)
    assert ledger.admitted_path.name == "cuda:3.memory.json" and ledger.device == "cuda:0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert lock_key("cuda:1") == "cuda:2" and lock_key("cuda:5") == "cuda:5"  # hidden: its own name
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f3a/x")
    assert lock_key("cuda") == "cuda:GPU-8f3a_x"


def test_the_nvidia_smi_reader_asks_for_the_physical_gpu(tmp_path, monkeypatch):
    """A real program in nvidia-smi's place that prints its sample text and logs its arguments."""
    args = tmp_path / "args"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" >> {args}\n"
                   f"case \"$1\" in --query-gpu=*) printf '{SMI_MEMORY}';; *) printf '{SMI_APPS}';; esac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    reader = devmem.SmiReader(str(smi))
    assert reader.device_memory("cuda:1") == (1523 * MIB, 143771 * MIB)
    assert reader.process_memory("cuda") == {4012: 1024 * MIB, 4013: 517 * MIB}
    assert reader.device_memory("cuda:1") == (1523 * MIB, 143771 * MIB)  # read 0.2 s ago: not asked again
    lines = args.read_text().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("--format=csv,noheader,nounits -i 1") and lines[1].endswith("-i 3")
    assert devmem.SmiReader(str(tmp_path / "absent")).device_memory("cuda:0") is None


# ---------------------------------------------------------------------------- the sampler

TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_the_sampler_sums_an_evaluations_process_tree_and_keeps_its_peak():
    worker = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(worker.stdout.readline())
        driver = Driver(processes={worker.pid: 100 * MIB, grandchild: 50 * MIB,
                                   os.getpid(): 900 * MIB})  # this process is not the evaluation's
        sampler = Sampler(driver, interval_s=0.05)
        with sampler.watch("cuda:0", worker.pid) as w, sampler.watch("cuda", worker.pid) as twin:
            for grand in (50, 300, 10):  # the grandchild's memory rises and falls
                driver.processes[grandchild] = grand * MIB
                time.sleep(0.4)
        assert w.peak_bytes == twin.peak_bytes == 400 * MIB and w.samples >= 6
        assert driver.calls <= max(w.samples, twin.samples) + 1  # one driver call per tick for both
        time.sleep(0.2)
        assert sampler._thread is None  # nothing watched: no thread left behind
    finally:
        worker.kill()
        worker.wait()


class Everyone(Driver):
    """1 MiB for every process on the machine: what an evaluation measures is how many are its own."""

    def process_memory(self, device: str) -> Optional[dict[int, int]]:
        self.calls += 1
        return {int(p): MIB for p in os.listdir("/proc") if p.isdigit()}


@pytest.fixture
def driver(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path / "locks"))
    for name in ("_reader", "_reader_known", "_sampler"):  # put back after the test: the real choice
        monkeypatch.setattr(devmem, name, getattr(devmem, name))
    everyone = Everyone()
    devmem.use_reader(everyone)
    return everyone


def test_an_evaluation_on_a_gpu_is_admitted_measured_and_recorded(driver, fast_cfg):
    """The evaluator's wiring, through a real sandbox: the job names a GPU, so its run is admitted
    by the ledger and its processes (its cgroup's, or its tree) are sampled while it runs; the peak
    becomes the task's footprint. (With no GPU here the judge stops at CUDA, after its processes
    have started: a run of about 3 s, sampled several times.)"""
    from kernelwright.errors import InfrastructureError
    from kernelwright.evaluate import evaluator, sandbox
    from kernelwright.tasks import load_task
    from tests.conftest import CANDIDATES, TASKS

    task = load_task(str(TASKS / "bias_relu.py"))
    cfg = fast_cfg(device="cuda:0", time=False, static_checks=False)
    code = (CANDIDATES / "cpu" / "torch_only.py").read_text()
    with pytest.raises(InfrastructureError, match="judge failed"):
        evaluator._run_in_sandbox(task, code, "0" * 64, cfg, sandbox.run_job)
    led = devmem.ledger("cuda:0")
    footprint = led.footprint(evaluator.footprint_key(task, cfg))
    machine = len([p for p in os.listdir("/proc") if p.isdigit()])
    assert footprint is not None and MIB <= footprint < machine * MIB  # its own processes only
    assert led.admitted() == {} and driver.calls >= 2
