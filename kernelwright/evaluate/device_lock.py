"""Whoever measures time on a device, or runs a model on it, holds that device meanwhile.

A time measured while something else runs on the same device (another candidate's timing, a
profile, a model generating) is skewed. So every timing (`evaluate.timing.time_calls`: the
evaluator's worker, the analysis profile, optimize's baselines), the profiler run, the CPU peak
measurement, and a study's model while it generates, hold an flock on
`<lock dir>/<device>.lock`. The folder is one per machine (KERNELWRIGHT_LOCK_DIR, default
/tmp/kernelwright-device-locks), so threads, sandboxed workers and separate kernelwright runs (two
studies, a study and an optimize run) all take turns on a device. The kernel drops an flock when
its holder dies, so a killed run never leaves a device locked. Within one thread the lock is
re-entrant (a worker holds it across the candidate's and the reference's timing, each of which
takes it again).

Only measurements and generation take it: builds, correctness checks and scaffold planning do not
(they time nothing, and a study plans before it evaluates anything).
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import IO

_held = threading.local()  # path -> [open file, depth], per thread


def device_key(device: str) -> str:
    """`cuda` and `cuda:0` are one GPU (validate_device keeps `cuda` as is in compile-only mode)."""
    device = str(device).strip().lower()
    return "cuda:0" if device == "cuda" else device


def lock_dir() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_LOCK_DIR") or "/tmp/kernelwright-device-locks")


def lock_path(device: str) -> Path:
    return lock_dir() / f"{device_key(device)}.lock"


def _open(path: Path) -> IO[str]:
    fresh = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    if fresh:
        try:  # shared by every user of the machine, like /tmp itself
            os.chmod(path.parent, 0o1777)
        except OSError:
            pass
    try:
        f = open(path, "a")
    except OSError:
        # a confined worker sees the lock folder read-only (evaluate/confine.py): flock needs no
        # write access, and the file was made by the evaluating process before the worker started
        return open(path, "r")
    try:
        os.chmod(path, 0o666)
    except OSError:
        pass  # another user's file: we can still lock it
    return f


def prepare(device: str) -> Path:
    """Make `device`'s lock file now, so a worker that sees the folder read-only can still lock it;
    returns the folder, which the sandbox binds into the worker's view."""
    path = lock_path(device)
    _open(path).close()
    return path.parent


class DeviceLock:
    """A reusable context manager holding `device` (see the module docstring)."""

    def __init__(self, device: str) -> None:
        self.path = lock_path(device)

    def __enter__(self) -> DeviceLock:
        held = _held.__dict__.setdefault("files", {})
        entry = held.get(self.path)
        if entry is not None:
            entry[1] += 1
            return self
        f = _open(self.path)
        fcntl.flock(f, fcntl.LOCK_EX)
        held[self.path] = [f, 1]
        return self

    def __exit__(self, *exc: object) -> None:
        held = _held.__dict__["files"]
        entry = held[self.path]
        entry[1] -= 1
        if entry[1] == 0:
            del held[self.path]
            entry[0].close()  # closing the descriptor drops the flock
