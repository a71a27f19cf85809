"""Whoever measures time on a device, or runs a model on it, holds that device meanwhile.

A time measured while something else runs on the same device (another candidate's timing, a
profile, a model generating) is skewed. So every timing (`measure.timing.time_calls`: the
evaluator's worker, the analysis profile, optimize's baselines), the profiler run, the CPU peak
measurement, and a study's model while it generates, hold an flock on
`<lock dir>/<device>.lock`, the device named as the machine numbers it (`lock_key`: behind
CUDA_VISIBLE_DEVICES, as under Ray, a process's `cuda:0` may be the host's GPU 3). The folder is
one per machine (KERNELWRIGHT_LOCK_DIR, default /tmp/kernelwright-device-locks), so threads,
sandboxed judges and separate kernelwright runs (two studies, a study and an optimize run) all
take turns on a device. The folder is not in a sandbox's box: the judge there reaches its
device's lock and gate through descriptors it inherited (`adopt`), so no candidate can take them. The kernel drops an flock when
its holder dies, so a killed run never leaves a device locked. Within one thread the lock is
re-entrant (a worker holds it across the candidate's and the reference's timing, each of which
takes it again).

A reader-writer lock: measurements hold it exclusively; an evaluation's correctness, re-check and
work stages and a model generating (work on the device, but no clock) hold it shared
(`shared=True`), so they run side by side with each other but never during another process's
timing, and a timing waits until they are done. Builds and scaffold planning take nothing (a study
plans before it evaluates anything). `waited` says how long the last acquisition waited (recorded with timings).

Waiting for the exclusive hold is first come, first served against later shared requests: flock
alone prefers readers, so a stream of overlapping correctness runs (two studies on one GPU) kept a
timing waiting until its evaluation timed out (seen on an H200). A gate file beside the lock
(`<lock>.gate`) is taken exclusively by every acquirer only while it waits: a timing waiting for
the lock holds the gate, so a later shared request queues behind it instead of slipping past.

A second lock per device, `kind="admission"`, is about memory, not time: every evaluation holds it
shared from start to end (in the evaluating process, outside the sandbox), and a candidate that ran
out of memory beside others is re-run holding it exclusively, so with nothing else of ours on the
device (evaluator.run_prepared). Inside it, the sandboxed run is admitted by memory: a ledger in this
folder (`<device>.memory.json`, devmem.py) holds the evaluations admitted now and each task's
measured footprint, and a run starts only when its need fits beside what runs (or nothing of ours
runs).
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import IO, Optional

from kernelwright.errors import EvaluatorError, GPUUnavailableError

_held = threading.local()  # path -> [open file, stack of modes (True: exclusive)], per thread
# lock path -> a descriptor of it this process inherited: the sandboxed judge, whose box holds no
# lock folder (confine.py), reaches its device's locks only through these (`adopt`)
_adopted: dict[str, int] = {}


def adopt(fds: dict[str, int]) -> None:
    """Take the locks named by path through inherited descriptors instead of the lock folder."""
    for path, fd in fds.items():
        os.set_inheritable(fd, False)  # never passed on: a child of this process gets no lock
        _adopted[str(path)] = fd


def device_key(device: str) -> str:
    """`cuda` and `cuda:0` are one GPU (validate_device keeps `cuda` as is in compile-only mode)."""
    device = str(device).strip().lower()
    return "cuda:0" if device == "cuda" else device


def physical_id(device: str, visible: Optional[str] = None) -> Optional[str]:
    """The driver's name for `device` (`cuda`, `cuda:N`): N itself, or the N-th entry of
    CUDA_VISIBLE_DEVICES when that is set (an index or a UUID, both of which nvidia-smi's `-i` and
    pynvml accept); None when CUDA_VISIBLE_DEVICES hides it. `visible` defaults to this process's
    CUDA_VISIBLE_DEVICES, which the evaluator's workers inherit."""
    index = int(device_key(device).split(":")[1])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is None:
        return str(index)
    entries = visible_devices(visible)
    return entries[index] if index < len(entries) else None


def visible_devices(visible: str) -> list[str]:
    """The GPUs a CUDA_VISIBLE_DEVICES value lets CUDA see, in CUDA's order (indices or UUIDs)."""
    entries: list[str] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry or entry.lstrip("-").isdigit() and int(entry) < 0:
            break  # CUDA stops at the first invalid entry; -1 hides all that follow
        entries.append(entry)
    return entries


def lock_key(device: str) -> str:
    """`device` as the machine names it, for what every process on it shares (the device locks,
    the memory ledger): a GPU by its driver index (or UUID) behind CUDA_VISIBLE_DEVICES. Ray gives
    each task its GPU as `cuda:0` (CUDA_VISIBLE_DEVICES=<the GPU>): keyed by `cuda:0`, evaluations
    on two GPUs of a host would wait for each other's timings and share one memory ledger."""
    key = device_key(device)
    if not key.startswith("cuda:"):
        return key
    ident = physical_id(key)
    return key if ident is None else "cuda:" + re.sub(r"[^\w.-]", "_", ident)


def lock_dir() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_LOCK_DIR") or "/tmp/kernelwright-device-locks")


def lock_path(device: str, kind: str = "") -> Path:
    return lock_dir() / f"{lock_key(device)}{'.' + kind if kind else ''}.lock"


def open_lock_file(path: Path) -> IO[str]:
    if str(path) in _adopted:
        # a fresh open file of the same lock (flock is per open file, as from the path itself)
        return open(f"/proc/self/fd/{_adopted[str(path)]}", "r")
    fresh = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    if fresh:
        try:  # shared by every user of the machine, like /tmp itself
            os.chmod(path.parent, 0o1777)
        except OSError:
            pass
    f = open(path, "a")
    try:
        os.chmod(path, 0o666)
    except OSError:
        pass  # another user's file: we can still lock it
    return f


def gate_path(path: Path) -> Path:
    return path.with_name(path.name + ".gate")


def prepare(device: str) -> tuple[Path, Path]:
    """Make `device`'s lock file and its gate now; returns both, whose descriptors the sandboxed
    judge inherits (its box does not hold the lock folder)."""
    path = lock_path(device)
    open_lock_file(path).close()
    open_lock_file(gate_path(path)).close()
    return path, gate_path(path)


class DeviceLock:
    """A reusable context manager holding `device`, exclusively or `shared` (module docstring)."""

    def __init__(self, device: str, shared: bool = False, kind: str = "") -> None:
        self.path = lock_path(device, kind)
        self.exclusive = not shared
        self.waited = 0.0

    def _flock(self, f: IO[str], exclusive: bool) -> None:
        """Take the lock through its gate (module docstring): whoever waits holds the gate."""
        start = time.monotonic()
        with open_lock_file(gate_path(self.path)) as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self.waited = time.monotonic() - start  # closing the gate's descriptor let the next one in

    def __enter__(self) -> DeviceLock:
        held = _held.__dict__.setdefault("files", {})
        entry = held.get(self.path)
        if entry is None:
            f = open_lock_file(self.path)
            self._flock(f, self.exclusive)
            held[self.path] = [f, [self.exclusive]]
            return self
        f, modes = entry
        now = modes[-1]
        want = now or self.exclusive  # within a thread an exclusive hold covers a shared request
        if want and not now:
            # shared -> exclusive: let go first, as flock's conversion would, so that two holders
            # upgrading at once cannot each wait for the other behind the gate
            fcntl.flock(f, fcntl.LOCK_UN)
            self._flock(f, True)
        else:
            self.waited = 0.0
        modes.append(want)
        return self

    def __exit__(self, *exc: object) -> None:
        held = _held.__dict__["files"]
        f, modes = held[self.path]
        mode = modes.pop()
        if not modes:
            del held[self.path]
            f.close()  # closing the (only) descriptor of its open file drops the flock
        elif mode and not modes[-1]:
            fcntl.flock(f, fcntl.LOCK_SH)  # back to the shared hold this thread had


def validate_device(device: str, compile_only: bool = False) -> str:
    d = device.strip().lower()
    if d == "cpu":
        return d
    if d == "cuda" or (d.startswith("cuda:") and d[5:].isdigit()):
        if compile_only:
            return d
        import torch

        if not torch.cuda.is_available():
            raise EvaluatorError(f"device {device!r}: no CUDA GPU is visible here (use --device cpu; "
                                 "`kernelwright eval --compile-only` builds CUDA sources without a GPU)")
        index = int(d[5:]) if ":" in d else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise EvaluatorError(f"device {device!r}: only {torch.cuda.device_count()} GPU(s) visible")
        return f"cuda:{index}"
    raise EvaluatorError(f"unknown device {device!r}: use cpu, cuda or cuda:N")


def resolve_size(device: str, size: str = "auto") -> str:
    """The KERNELWRIGHT_SIZE a task's source runs with: `auto` is full size on a GPU and small on
    the CPU; a factor (`1/8`) scales the full size (tasks/sizing.py writes the scaled constants into
    the source). The one place for this rule: the evaluator, analysis, scaffold planning and
    optimize's baselines must agree, or they measure different problems."""
    if size in ("small", "full"):
        return size
    if size == "auto":
        return "small" if device == "cpu" else "full"
    from fractions import Fraction

    try:
        factor = Fraction(size)
    except (ValueError, ZeroDivisionError):
        factor = Fraction(0)
    if not 0 < factor <= 1:
        raise ValueError(f"size must be small, full, auto or a factor in (0, 1] such as 1/8, not {size!r}")
    return "full"


def cuda_arch(device: str) -> str:
    """The capability of `device` as the worker writes it ("9.0" on an H200), asked of a child
    process so this one never creates a CUDA context."""
    import subprocess

    index = int(device.split(":")[1]) if ":" in device else 0
    code = f"import torch; print('%d.%d' % torch.cuda.get_device_capability({index}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise GPUUnavailableError(device)
    return out.stdout.strip().splitlines()[-1]


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def device_kind(device: str) -> str:
    return "cpu" if device == "cpu" else "cuda"

