"""Work the candidate left running between requests, as the kernel counts it (the judge's side).

The candidate's runner (isolation.py) lives in a PID namespace of its own below a stand-in the
judge started, so everything it starts stays below that stand-in in the box's /proc: native
threads, double forks, clone(CLONE_PARENT) siblings, setsid daemons. Nothing here asks the
runner: between two requests the runner has nothing to do, so the judge reads, from /proc,
- every process below the stand-in other than the namespace's init and the runner: any one
  still running is leftover work;
- the CPU time of every task of the runner and of those processes (/proc/<pid>/task/<tid>/schedstat,
  nanoseconds): what they spent between the reply to one request and the next request beyond a
  runner going back to its socket (IDLE_CPU_MS in one window, IDLE_TOTAL_MS and IDLE_SHARE of the
  time between calls summed) is work done outside every call and every clock.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from kernelwright import confine

# What a runner may spend between its reply and the next request: returning to its socket, and
# an idle OpenMP pool going to sleep. Measured (the 2-core CPU, bias_relu, correct_cpp.py, 3 trials
# and 3 + 20 timed calls, bwrap and unshare): at most 0.09 ms a window; a thread working on after
# forward spends the whole window.
IDLE_CPU_MS = 3.0
# Summed over the evaluation, so that a thread working a little in every window shows too: a fixed
# allowance and a share of the time between calls (an honest runner's total was 0.3 ms).
IDLE_TOTAL_MS, IDLE_SHARE = 10.0, 0.01
# GPU_WINDOWS: on a GPU the runner's process also holds the CUDA driver's and Triton's own threads,
# which wake between calls: on an H200 during a KernelBench study, candidates and fixtures that left
# nothing running spent 4.7-59.5 ms in a single window, 0.06-0.1% of the time between calls. There
# the one window's allowance is not applied; the summed share still is.


def _ns_pids(pid: int) -> list[int]:
    """The process's PID in each namespace from the box's down to its own (NSpid)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(p) for p in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def _cpu_ns(pid: int) -> dict[int, int]:
    """tid -> CPU nanoseconds, for every thread of `pid`."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


class Leftovers:
    """The candidate's process tree below `root` (the process the judge started)."""

    def __init__(self, root: int):
        self.root = root
        self.runner: Optional[int] = None
        self.init: Optional[int] = None
        self.isolated: Optional[bool] = None
        self.cpu: Optional[dict[int, int]] = None
        self.marked = 0.0
        self.idle_cpu_ms = self.idle_wall_ms = 0.0  # summed over every window between a reply and a request

    def _locate(self) -> None:
        """The namespace's init (PID 1) and the runner (PID 2) below the stand-in; where the runner
        could not be isolated, the root is the runner."""
        depth = len(_ns_pids(self.root))
        self.init = self.runner = None  # found afresh: an earlier pass may have come before the namespace
        for pid in confine.descendants(self.root):
            ns = _ns_pids(pid)
            if len(ns) > depth and ns[-1] == 1:
                self.init = pid
            elif len(ns) > depth and ns[-1] == 2:
                self.runner = pid
        self.isolated = self.init is not None and self.runner is not None
        if not self.isolated:
            self.init, self.runner = None, self.root

    def others(self) -> list[int]:
        """Processes below the root still running, other than the init and the runner."""
        if not self.isolated:
            self._locate()
        mine = {self.root, self.init, self.runner}
        return [p for p in confine.descendants(self.root) if p not in mine and confine.alive(p)]

    def located(self) -> int:
        """The runner's PID in the box (the root where it could not be isolated)."""
        if not self.isolated:
            self._locate()
        assert self.runner is not None
        return self.runner

    def _cpu(self, others: list[int]) -> dict[int, int]:
        out: dict[int, int] = {}
        for pid in [self.runner, *others]:
            if pid is not None:
                out.update(_cpu_ns(pid))
        return out

    def mark(self) -> None:
        """After a reply: what every task has spent so far."""
        self.cpu, self.marked = self._cpu(self.others()), time.monotonic()

    def check(self, per_window: bool = True) -> list[str]:
        """Before a request: what was left running since the last mark (reasons; none: idle).
        Nothing before the first mark: the tree is read once the runner has replied, since until
        then its namespaces may not exist yet. `per_window` False: only the summed share counts
        (GPU_WINDOWS)."""
        if self.cpu is None:
            return []
        others = self.others()
        now = self._cpu(others)
        reasons = []
        if others:
            reasons.append(f"{len(others)} child process(es) the candidate started still running between calls "
                           "(found in its PID namespace)")
        spent = sum(max(0, ns - self.cpu.get(tid, 0)) for tid, ns in now.items()) / 1e6
        self.idle_cpu_ms += spent
        self.idle_wall_ms += (time.monotonic() - self.marked) * 1e3
        if (per_window and spent > IDLE_CPU_MS) or self.idle_cpu_ms > IDLE_TOTAL_MS + IDLE_SHARE * self.idle_wall_ms:
            reasons.append(f"threads or processes of the candidate used {spent:.1f} ms of CPU between calls "
                           f"({self.idle_cpu_ms:.1f} ms in {self.idle_wall_ms / 1e3:.2f} s between calls so far): "
                           "work left running after forward returned")
        self.cpu, self.marked = now, time.monotonic()
        return reasons
