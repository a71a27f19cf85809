"""One device, one timed thing at a time: across the threads of a process and across processes.

Timing a kernel while something else runs on the same device (another evaluation, a profile, a
model generating) skews it. Inside a process the owner's `threading.Lock` orders the work; across
processes (two studies side by side, a study and an `optimize` run) an flock on a file under the
build cache does. The kernel drops an flock when its process dies, so a killed run never leaves
a device locked.
"""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path
from typing import IO, Optional


def device_key(device: str) -> str:
    """`cuda` and `cuda:0` are one GPU."""
    device = device.strip().lower()
    return "cuda:0" if device == "cuda" else device


class DeviceLock:
    """A reusable context manager: the in-process lock (if any), then the device's lock file."""

    def __init__(self, device: str, cache_root: Path, lock: Optional[threading.Lock] = None) -> None:
        self.path = Path(cache_root) / "device-locks" / f"{device_key(device)}.lock"
        self.lock = lock
        self._held = threading.local()

    def __enter__(self) -> DeviceLock:
        if self.lock is not None:
            self.lock.acquire()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            f: IO[str] = open(self.path, "a")
            fcntl.flock(f, fcntl.LOCK_EX)
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise
        self._held.file = f
        return self

    def __exit__(self, *exc: object) -> None:
        self._held.file.close()  # closing the descriptor drops the flock
        self._held.file = None
        if self.lock is not None:
            self.lock.release()
