"""Test tiers by cost, and a watch that keeps them honest.

Plain `pytest` runs the fast tier only: tests marked `build` (C++/CUDA compiles), `slow` (the real
model, a browser, a Ray cluster, long studies) or `gpu` are opt-in. Any `-m` expression replaces the
default (`.ci/run` uses `-m "not gpu"`, i.e. every tier this machine can run).

With KERNELWRIGHT_TIER_WATCH=1 (set by `.ci/run`) a thread watches this process's descendants and
names, per test, the costly programs it started: compilers, the model server, Chromium, Ray. A test
that starts one of them without the marker of its tier fails and says which marker it needs, so the
fast tier cannot silently grow a build again. Watching descendants through /proc is the operating
system's record of what ran; no test has to remember to declare it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator, Optional

import pytest

TIERS = ("build", "slow", "gpu")

# program name (first word of the command line, without its folder) -> the tier it costs
_PROGRAMS = {
    "cc1plus": "build", "cc1": "build", "nvcc": "build", "cicc": "build", "ptxas": "build",
    "ninja": "build", "cudafe++": "build",
    "chromium": "slow", "chrome": "slow", "chromedriver": "slow",
    "raylet": "slow", "gcs_server": "slow",
}
# substrings of a command line that mark a tier when the program itself is Python
_COMMANDS = {"llama_cpp.server": "slow", "ray/_private/workers": "slow", "ray::": "slow"}


def _tier_of(cmdline: str) -> Optional[str]:
    args = cmdline.split("\0")
    head = args[0].rsplit("/", 1)[-1]
    if head in ("cc1plus", "cc1") and "-E" in args:
        # preprocessing only, a query of milliseconds: grounding asks the compiler once per process
        # for its include search list (`c++ -E -x c++ - -v`); whichever test asks first is not a build
        return None
    if head == "nvcc" and ("--version" in args or "-V" in args):
        return None  # a version query (`kernelwright doctor`), milliseconds: it builds nothing
    if head in _PROGRAMS:
        return _PROGRAMS[head]
    text = cmdline[:400]
    for needle, tier in _COMMANDS.items():
        if needle in text:
            return tier
    return None


_TICKS = os.sysconf("SC_CLK_TCK")


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def _processes(since: float = 0.0) -> Iterator[tuple[int, int, Optional[str], float]]:
    """(pid, parent pid, command line, start in seconds since boot) of every process we may read;
    the command line only of those started at `since` or later (None for the others): five scans a
    second in each worker, so the older processes, most of them, cost one read each, not two."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            # the command name in stat is parenthesised and may hold spaces: fields 4 (ppid) and 22
            # (start time, in clock ticks since boot) counted from there
            fields = stat.rsplit(")", 1)[1].split()
            started = int(fields[19]) / _TICKS
            cmd = None
            if started >= since:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        yield int(name), int(fields[1]), cmd, started


class Watch:
    """Records, for the test running now, which tiers its descendants belong to."""

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.root = os.getpid()
        self.current: Optional[str] = None
        self.since = 0.0  # when the current test began, in seconds since boot
        self.seen: dict[str, dict[str, str]] = {}  # nodeid -> tier -> an example program
        threading.Thread(target=self._loop, name="tier-watch", daemon=True).start()

    def _loop(self) -> None:
        while True:
            nodeid = self.current
            if nodeid is not None:
                self._scan(nodeid)
            time.sleep(self.interval)

    def _scan(self, nodeid: str) -> None:
        # what an earlier test started and left running (a session's model server, Ray's idle
        # workers) is not this test's cost: its command line is not even read
        procs = list(_processes(self.since - 1.0))
        parent = {pid: ppid for pid, ppid, _, _ in procs}
        for pid, _, cmd, _ in procs:
            tier = None if cmd is None else _tier_of(cmd)
            if cmd is None or tier is None or not self._descends(pid, parent):
                continue
            self.seen.setdefault(nodeid, {}).setdefault(tier, cmd.split("\0", 1)[0].rsplit("/", 1)[-1])

    def _descends(self, pid: int, parent: dict[int, int]) -> bool:
        for _ in range(64):
            pid = parent.get(pid, 0)
            if pid == self.root:
                return True
            if pid <= 1:
                return False
        return False


_watch: Optional[Watch] = None


def pytest_configure(config: pytest.Config) -> None:
    global _watch
    if os.environ.get("KERNELWRIGHT_TIER_WATCH") == "1" and _watch is None:
        _watch = Watch()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.markexpr:
        return  # the caller chose the tiers
    kept, opt_in = [], []
    for item in items:
        (opt_in if any(item.get_closest_marker(t) for t in TIERS) else kept).append(item)
    if opt_in:
        config.hook.pytest_deselected(items=opt_in)
        items[:] = kept
        config._kw_opt_in = len(opt_in)  # type: ignore[attr-defined]


# A test's likely cost by its tier, in seconds (the two-worker CI run's typical figures): enough to put
# the costly files first, which is all the order is for
_COST = {"slow": 60.0, "build": 30.0}
_FAST_COST = 0.3


def _cost(item: pytest.Item) -> float:
    return next((c for t, c in _COST.items() if item.get_closest_marker(t)), _FAST_COST)


@pytest.hookimpl(specname="pytest_collection_modifyitems", trylast=True)
def pytest_collection_modifyitems_costliest_first(items: list[pytest.Item]) -> None:
    """The costliest files first, each file's tests in their own order. Under `--dist loadfile
    --no-loadscope-reorder` (.ci/run) pytest-xdist hands out whole files in this order, so a file
    of a few long builds (the replays, Ray, the model) never starts last and leaves one worker
    running alone while the other has finished; the cheap files fill in at the end. (xdist's own
    reorder puts the files with the most tests first, which sends exactly those few-test costly
    files to the end.)"""
    cost: dict[str, float] = {}
    for item in items:
        cost[item.path] = cost.get(item.path, 0.0) + _cost(item)
    items.sort(key=lambda item: -cost[item.path])  # stable: each file's own order is kept


_file_seconds: dict[str, float] = {}  # test file -> seconds of its tests (every phase), as reported


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # under xdist the controller sees every worker's reports: the whole run's picture in one place
    path = report.nodeid.split("::", 1)[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    n = getattr(config, "_kw_opt_in", 0)
    if n:
        terminalreporter.write_line(
            f"fast tier only: {n} build/slow/gpu tests not run; `pytest -m 'not gpu'` runs every tier "
            "this machine can (what .ci/run does)")
    shown = config.option.durations or 0
    if shown > 0 and _file_seconds:
        # beside --durations' slowest tests, the costliest files: the units a worker takes under
        # --dist loadfile, and what the order above estimates from the tiers
        top = sorted(_file_seconds.items(), key=lambda kv: -kv[1])[:shown]
        terminalreporter.write_sep("=", f"costliest {len(top)} files of {sum(_file_seconds.values()):.0f} s")
        for path, seconds in top:
            terminalreporter.write_line(f"{seconds:8.1f}s {path}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem) -> Iterator[None]:
    if _watch is not None:
        _watch.since = _uptime()
        _watch.current = item.nodeid
    yield
    if _watch is not None:
        _watch.current = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call) -> Iterator[None]:
    outcome = yield
    if _watch is None:
        return
    report = outcome.get_result()
    item._kw_seconds = getattr(item, "_kw_seconds", 0.0) + report.duration  # type: ignore[attr-defined]
    if call.when != "teardown":
        return
    _watch._scan(item.nodeid)  # a last look: a short build may fall between two scans
    seen = _watch.seen.get(item.nodeid, {})
    _dump(item, seen)
    if seen and report.passed and not any(item.get_closest_marker(t) for t in TIERS):
        what = ", ".join(f"{prog} (mark it `{tier}`)" for tier, prog in sorted(seen.items()))
        report.outcome = "failed"
        report.longrepr = f"tier watch: this test started {what}; unmarked tests must stay in the fast tier"


def _dump(item: pytest.Item, seen: dict[str, str]) -> None:
    """KERNELWRIGHT_TIER_DUMP=FILE: one JSON line per test (its tiers, what it started, its seconds),
    appended as it ends, so a re-tiering works from data even if the run is cut short."""
    path = os.environ.get("KERNELWRIGHT_TIER_DUMP")
    if not path:
        return
    import json

    line = {"test": item.nodeid, "seconds": round(getattr(item, "_kw_seconds", 0.0), 2), "started": seen,
            "marked": [t for t in TIERS if item.get_closest_marker(t)]}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
