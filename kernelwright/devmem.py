"""Device memory as the driver counts it, and GPU work admitted by it.

Three parts, each passed in where it is used, so a test can stand in for the driver (there is no
GPU on the development machine) while everything else stays real:

- A *reader* (`MemoryReader`): a device's used and total memory, and each process's share of it,
  asked of the driver by the evaluating process, outside any sandbox: pynvml when importable, else
  `nvidia-smi`, else none. Without a reader admission is off (logged once) and evaluations run as
  they did before it: the out-of-memory re-run alone (evaluator.run_prepared) still catches what
  did not fit.
- A *sampler*: while an evaluation's worker runs on a GPU, one background thread per process reads
  the driver's per-process memory about twice a second (one driver call per device and tick, however
  many evaluations run: a study runs up to 34 at once) and keeps each evaluation's peak, the sum
  over its processes (its cgroup's, else the process tree under its worker). That peak is the
  measured footprint. It is trusted: the driver's accounting, read outside the sandbox, CUDA
  contexts and everything the candidate allocated included; the candidate cannot report it.
- A *ledger* per device in the device-lock folder (device.lock_dir(), one per machine, so every
  kernelwright process on the machine shares it): the evaluations admitted now, and each task's
  largest footprint seen. An evaluation is admitted when

      max(device memory used now, sum of the admitted evaluations' needs) + its need <= HEADROOM * total

  or when no other evaluation of ours is admitted (a task larger than the device still runs,
  alone); otherwise it waits and asks again. Its need is MARGIN times the task's footprint when one
  was measured, else an eighth of the device: a conservative first guess, replaced by the
  measurement once the task has been evaluated. Used memory counts what others (a model server,
  other users) hold; the needs count what admitted evaluations have not allocated yet.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Protocol

from kernelwright.confine import Cgroup, children_map, descendants
from kernelwright.device import device_key, lock_dir, lock_key, open_lock_file, physical_id

log = logging.getLogger(__name__)

HEADROOM = 0.9  # of the device's total: what fragmentation and the driver's own use leave usable
MARGIN = 1.2  # on a measured footprint: sampling twice a second can miss a short peak
FIRST_GUESS_SHARE = 8  # an unmeasured task is assumed to need total / 8
POLL_S = 0.25  # how often a waiting admission asks again
SAMPLE_S = 0.5  # the sampler's tick
MIB = 1 << 20


# ---------------------------------------------------------------------------- the driver's readings


class MemoryReader(Protocol):
    def device_memory(self, device: str) -> Optional[tuple[int, int]]:
        """(used bytes, total bytes) of `device`, or None when the driver does not say."""

    def process_memory(self, device: str) -> Optional[dict[int, int]]:
        """{host pid: bytes} of the processes using `device`, or None when the driver does not say."""


def parse_memory_csv(text: str) -> Optional[tuple[int, int]]:
    """`nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits` (MiB) -> bytes."""
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            return int(parts[0]) * MIB, int(parts[1]) * MIB
    return None


def parse_apps_csv(text: str) -> dict[int, int]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` (MiB) ->
    {pid: bytes}. Lines without numbers (`[N/A]` where the driver hides a process's use, the
    "No running processes found" of older drivers) are skipped."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            pid = int(parts[0])
            out[pid] = out.get(pid, 0) + int(parts[1]) * MIB  # a process listed twice (MIG): both count
    return out


@dataclass
class SmiReader:
    """The driver through `nvidia-smi`: one process per reading, about 50 ms. A device's memory is
    read at most once per `reuse_s`: a study's waiting evaluations (up to 34 threads) each ask four
    times a second, and one reading serves them all."""

    program: str = "nvidia-smi"
    timeout_s: float = 10.0
    reuse_s: float = 0.2
    _recent: dict[str, tuple[float, Optional[tuple[int, int]]]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _query(self, device: str, query: str) -> Optional[str]:
        ident = physical_id(device)
        if ident is None:
            return None
        try:
            out = subprocess.run([self.program, query, "--format=csv,noheader,nounits", "-i", ident],
                                 capture_output=True, text=True, timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout if out.returncode == 0 else None

    def device_memory(self, device: str) -> Optional[tuple[int, int]]:
        with self._lock:  # one reading at a time: the others then find it fresh
            at, found = self._recent.get(device, (-1.0, None))
            if time.monotonic() - at > self.reuse_s:
                text = self._query(device, "--query-gpu=memory.used,memory.total")
                found = parse_memory_csv(text) if text is not None else None
                self._recent[device] = (time.monotonic(), found)
            return found

    def process_memory(self, device: str) -> Optional[dict[int, int]]:
        text = self._query(device, "--query-compute-apps=pid,used_memory")
        return parse_apps_csv(text) if text is not None else None


class NvmlReader:
    """The driver through pynvml (package nvidia-ml-py): a library call, no process."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml

    def _handle(self, device: str) -> Any:
        ident = physical_id(device)
        if ident is None:
            return None
        try:
            if ident.isdigit():
                return self.nvml.nvmlDeviceGetHandleByIndex(int(ident))
            return self.nvml.nvmlDeviceGetHandleByUUID(ident)
        except self.nvml.NVMLError:
            return None

    def device_memory(self, device: str) -> Optional[tuple[int, int]]:
        handle = self._handle(device)
        try:
            info = self.nvml.nvmlDeviceGetMemoryInfo(handle) if handle is not None else None
        except self.nvml.NVMLError:
            return None
        return (int(info.used), int(info.total)) if info is not None else None

    def process_memory(self, device: str) -> Optional[dict[int, int]]:
        handle = self._handle(device)
        if handle is None:
            return None
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except self.nvml.NVMLError:
            return None
        out: dict[int, int] = {}
        for p in procs:
            out[int(p.pid)] = out.get(int(p.pid), 0) + int(p.usedGpuMemory or 0)  # None: hidden by the driver
        return out


_chosen = threading.Lock()
_reader: Optional[MemoryReader] = None
_reader_known = False
_sampler: Optional[Sampler] = None


def reader() -> Optional[MemoryReader]:
    """This process's reader of the driver (pynvml, else nvidia-smi, else None), chosen once."""
    global _reader, _reader_known
    with _chosen:
        if not _reader_known:
            _reader_known = True
            try:
                _reader = NvmlReader()
            except Exception:  # not installed, or no driver behind it
                program = shutil.which("nvidia-smi")
                _reader = SmiReader(program) if program else None
            if _reader is None:
                log.warning("no reader of device memory here (neither pynvml nor nvidia-smi): GPU evaluations "
                            "are not admitted by memory and their footprints are not measured")
        return _reader


def use_reader(chosen: Optional[MemoryReader]) -> None:
    """Replace this process's reader (and so its sampler): a test's stand-in for the driver."""
    global _reader, _reader_known, _sampler
    with _chosen:
        _reader, _reader_known, _sampler = chosen, True, None


def sampler() -> Optional[Sampler]:
    """This process's one sampler, on its reader; None without a reader."""
    global _sampler
    found = reader()
    with _chosen:
        if found is not None and (_sampler is None or _sampler.reader is not found):
            _sampler = Sampler(found)
        return _sampler if found is not None else None


# ---------------------------------------------------------------------------- the sampler


@dataclass
class Watch:
    """One evaluation's processes on one device, and the largest sum of their memory seen."""

    device: str
    root_pid: int
    cgroup: Optional[Cgroup] = None  # when the worker has one: every process of it, daemons included
    peak_bytes: int = 0
    samples: int = 0  # ticks that found the driver answering

    def pids(self, children: Optional[dict[int, list[int]]]) -> set[int]:
        if self.cgroup is not None:
            return self.cgroup.pids()
        return {self.root_pid, *descendants(self.root_pid, children)}


class Sampler:
    """One background thread for every evaluation of this process (module docstring). It runs
    while something is watched and ends when nothing is, so an idle process holds no thread."""

    def __init__(self, reader: MemoryReader, interval_s: float = SAMPLE_S) -> None:
        self.reader = reader
        self.interval_s = interval_s
        self._watches: list[Watch] = []
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._failed = False

    @contextlib.contextmanager
    def watch(self, device: str, root_pid: int, cgroup: Optional[Cgroup] = None) -> Iterator[Watch]:
        w = Watch(device=device_key(device), root_pid=root_pid, cgroup=cgroup)
        with self._cond:
            self._watches.append(w)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="kw-device-memory", daemon=True)
                self._thread.start()
        try:
            yield w
        finally:
            with self._cond:
                self._watches.remove(w)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._watches:
                    self._thread = None  # under the lock: a new watch starts a new thread
                    return
                watches = list(self._watches)
            try:
                self._tick(watches)
            except Exception:  # a sampler that broke must not take an evaluation down: its peak stays
                if not self._failed:
                    self._failed = True
                    log.exception("device memory sampling failed")
            time.sleep(self.interval_s)

    def _tick(self, watches: list[Watch]) -> None:
        devices = {w.device for w in watches}
        children = children_map() if any(w.cgroup is None for w in watches) else None  # one /proc pass
        for device in devices:
            usage = self.reader.process_memory(device)
            if usage is None:
                continue
            for w in watches:
                if w.device == device:
                    w.samples += 1
                    w.peak_bytes = max(w.peak_bytes, sum(usage.get(p, 0) for p in w.pids(children)))


# ---------------------------------------------------------------------------- the ledger


def footprint_key(task_id: str, size: str, task_source: str) -> str:
    """A task's footprint is keyed by what decides its memory: the task, its size, its source (a
    task file edited under the same id is another problem)."""
    return f"{task_id}|{size}|{hashlib.sha256(task_source.encode()).hexdigest()[:12]}"


def _start_ticks(pid: int) -> Optional[int]:
    """When `pid` started (clock ticks since boot): with the pid, it names one process (pids are
    reused)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def _alive(entry: dict[str, Any]) -> bool:
    try:
        pid = int(entry["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    started = _start_ticks(pid)
    return started is not None and entry.get("started") in (None, started)


@dataclass
class Admission:
    token: str
    need_bytes: int
    waited_s: float = 0.0
    alone: bool = False  # admitted because nothing else of ours was, not because it fit
    footprint_bytes: Optional[int] = None  # the task's measured footprint the need came from


@dataclass
class Ledger:
    """The admitted evaluations and the tasks' footprints on one device (module docstring). Every
    read and write holds an flock on `<device>.memory.lock`; a file that cannot be read counts as
    empty (logged), so a damaged ledger costs admission, never an evaluation."""

    device: str
    reader: MemoryReader
    folder: Path = field(default_factory=lock_dir)
    headroom: float = HEADROOM
    poll_s: float = POLL_S

    def __post_init__(self) -> None:
        self.device = device_key(self.device)
        # files named by the GPU the machine sees (device.lock_key), the reader asked by this process's name
        name = lock_key(self.device)
        self.admitted_path = self.folder / f"{name}.memory.json"
        self.footprints_path = self.folder / f"{name}.footprints.json"
        self.lock_path = self.folder / f"{name}.memory.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open_lock_file(self.lock_path) as f:  # made shared by every user of the machine, like the device locks
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("device memory ledger %s unreadable (%s): taken as empty", path, e)
            return {}
        if not isinstance(data, dict):
            log.warning("device memory ledger %s holds no object: taken as empty", path)
            return {}
        return data

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            with contextlib.suppress(OSError):
                os.chmod(tmp, 0o666)  # another user's kernelwright shares the device
            os.replace(tmp, path)  # readers see the old file or the new one, never half of one
        except OSError as e:
            log.warning("device memory ledger %s not written (%s)", path, e)
            with contextlib.suppress(OSError):
                tmp.unlink()

    def admitted(self) -> dict[str, dict[str, Any]]:
        """The live admissions: entries whose process has died are dropped (and the file rewritten)."""
        with self._locked():
            return self._live()

    def _live(self) -> dict[str, dict[str, Any]]:
        found = self._read(self.admitted_path)
        live = {k: v for k, v in found.items() if isinstance(v, dict) and _alive(v)}
        if len(live) != len(found):
            self._write(self.admitted_path, live)
        return live

    def footprint(self, key: str) -> Optional[int]:
        with self._locked():
            return self._footprint(key)

    def _footprint(self, key: str) -> Optional[int]:
        value = self._read(self.footprints_path).get(key)
        return int(value) if isinstance(value, (int, float)) and value > 0 else None

    def record(self, key: str, peak_bytes: int) -> None:
        """Keep the task's largest measured footprint."""
        if peak_bytes <= 0:
            return
        with self._locked():
            prints = self._read(self.footprints_path)
            old = prints.get(key)
            if not isinstance(old, (int, float)) or peak_bytes > old:
                prints[key] = int(peak_bytes)
                self._write(self.footprints_path, prints)

    def _try(self, token: str, key: str) -> Optional[Admission]:
        """One attempt, under the flock: the entry is written before another process can look."""
        memory = self.reader.device_memory(self.device)  # before the flock: a reading may take 50 ms
        with self._locked():
            live = self._live()
            footprint = self._footprint(key)
            if memory is None:
                need, fits = 0, True  # the driver does not say: nothing to admit by (logged by the caller)
            else:
                used, total = memory
                need = int(footprint * MARGIN) if footprint else total // FIRST_GUESS_SHARE
                reserved = sum(int(v.get("bytes", 0)) for v in live.values())
                fits = max(used, reserved) + need <= self.headroom * total
            if not fits and live:
                return None  # wait: it does not fit beside what runs, and something of ours runs
            live[token] = {"pid": os.getpid(), "started": _start_ticks(os.getpid()), "bytes": need,
                           "since": time.time(), "key": key}
            self._write(self.admitted_path, live)
            return Admission(token=token, need_bytes=need, alone=not fits, footprint_bytes=footprint)

    @contextlib.contextmanager
    def admit(self, key: str) -> Iterator[Admission]:
        """Hold a place on the device for an evaluation of the task `key` (footprint_key), waiting
        until it fits; released on exit, exceptions included."""
        token = secrets.token_hex(8)
        start = time.monotonic()
        said = False
        while (admission := self._try(token, key)) is None:
            if not said:
                said = True
                log.info("%s: waiting for device memory on %s", key, self.device)
            time.sleep(self.poll_s)
        admission.waited_s = time.monotonic() - start
        try:
            yield admission
        finally:
            with self._locked():
                live = self._live()
                if live.pop(token, None) is not None:
                    self._write(self.admitted_path, live)


def ledger(device: str) -> Optional[Ledger]:
    """`device`'s ledger in the device-lock folder, on this process's reader; None without one."""
    found = reader()
    return Ledger(device, found) if found is not None else None
