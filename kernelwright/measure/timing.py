"""The timing protocol, the same for the reference and the candidate.

`time_served_pair` times a candidate against the reference, each served by its own runner process
(remote.Served), with the judge's clock: the candidate cannot reach the clock, the draws or the
checks. Every call gets freshly drawn values at a fresh place of the arena (drawn outside the timed
interval, copied in inside it); the candidate and the reference alternate call by call, so load
that drifts hits both; the reference runs on its own copy; after each pair of calls, outside the
interval, the candidate's inputs must equal the reference's (nothing rewritten in place) and its
output must match the reference's. The L2 (GPU) or last-level (CPU) cache is flushed before every
call. On the CPU both run with the same thread count, chosen from the cores that are free, and the
machine's load is recorded. On a GPU the interval ends with a device-wide synchronize in the judge,
after the runner synchronized its own device, so side-stream work is inside it.

`time_calls` is the plain in-process loop over fixed inputs (CUDA events on a GPU), for trusted
modules only: profiles and the optimizer's probe.

The clock functions are captured when this module is imported, before anything else runs in the
process that imports it.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from kernelwright.device import DeviceLock
from kernelwright.measure import footprint
from kernelwright.records import TimingStats, measured

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize

# The cores this process may run on, read when it is imported: in the judge, before any runner exists.
# A later read would report an affinity another process of the same uid could have narrowed.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

CPU_FLUSH_BYTES = 64 * 2**20  # larger than the last-level cache of the machines we run on
MIN_GPU_FLUSH_BYTES = 256 * 2**20  # H200 L2 is 60 MB; flush with several times that


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 10
    iters: int = 100
    flush_cache: bool = True


class _Flusher:
    def __init__(self, device: torch.device, enabled: bool):
        self.enabled = enabled
        self.buf = None
        if not enabled:
            return
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            l2 = int(getattr(props, "L2_cache_size", 0) or 0)
            nbytes = max(MIN_GPU_FLUSH_BYTES, 4 * l2)
        else:
            nbytes = CPU_FLUSH_BYTES
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.fill_(1)  # a write pass evicts whatever the previous call left in cache


def _stats(samples_ms: list[float], protocol: str, **conditions: Any) -> TimingStats:
    q = statistics.quantiles(samples_ms, n=4, method="inclusive") if len(samples_ms) > 1 else [samples_ms[0]] * 3
    return TimingStats(
        median_ms=statistics.median(samples_ms),
        p25_ms=q[0],
        p75_ms=q[2],
        mean_ms=statistics.fmean(samples_ms),
        calls=len(samples_ms),
        protocol=protocol,
        **conditions,
    )


class _Clock:
    """One timed call: flush, then the device's clock around `fn(*args)` (milliseconds)."""

    def __init__(self, device: torch.device, flush_cache: bool):
        self.cuda = device.type == "cuda"
        self.flush = _Flusher(device, flush_cache)

    def __call__(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, float]:
        self.flush()
        if self.cuda:
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _synchronize()
            _record(start)
            out = fn(*args)
            _synchronize()  # device-wide: side-stream work is inside the interval
            _record(end)
            _event_sync(end)
            return out, _elapsed(start, end)
        t0 = _perf_counter()
        out = fn(*args)
        return out, (_perf_counter() - t0) * 1e3

    @property
    def name(self) -> str:
        return "cuda-events+device-sync" if self.cuda else "wall-clock"


def time_calls(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], device: torch.device,
               cfg: TimingConfig) -> TimingStats:
    """Median and IQR of `fn(*inputs)` over `cfg.iters` calls after `cfg.warmup` calls, holding
    the device (device.py) so no other timing or model runs on it meanwhile."""
    with DeviceLock(str(device)):
        return _time_calls(fn, input_sets, device, cfg)


def _time_calls(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], device: torch.device,
                cfg: TimingConfig) -> TimingStats:
    clock = _Clock(device, cfg.flush_cache)
    n = len(input_sets)
    with torch.no_grad():
        for i in range(cfg.warmup):
            fn(*input_sets[i % n])
        if clock.cuda:
            _synchronize()
        samples = [clock(fn, input_sets[i % n])[1] for i in range(cfg.iters)]
    protocol = (f"{clock.name}, {cfg.warmup} warm-up, {cfg.iters} timed calls, "
                f"{'cache flushed per call' if cfg.flush_cache else 'no cache flush'}, {n} rotating input sets")
    return _stats(samples, protocol)


def faster_beyond_noise(cand: TimingStats, ref: TimingStats) -> bool:
    """Faster only if the interquartile ranges do not overlap: candidate p75 below reference p25."""
    return cand.p75_ms < ref.p25_ms


# --- the candidate against the reference ------------------------------------------------------

class TimedCallRejected(Exception):
    """A check between timed calls failed: the candidate gamed (or broke) the timed calls."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass
class PairTiming:
    candidate: TimingStats
    reference: TimingStats


# A side's forward must be at least this share of the protocol's own cost per call (and 1 us) for a
# net ratio: below it the difference of two medians is mostly the protocol's noise.
NET_MIN_SHARE = 0.05
NET_MIN_MS = 0.001


def net_ratio(base_ms: Optional[float], cand_ms: Optional[float], protocol_ms: Optional[float],
              base_protocol_ms: Optional[float] = None) -> Optional[float]:
    """base / candidate with the protocol's cost per call taken off both; None where it cannot be
    separated (no null calls, or a forward too small beside the protocol). `base_protocol_ms`: the
    base's own, where it was timed in another loop (torch.compile's); else the two share one."""
    base_protocol_ms = protocol_ms if base_protocol_ms is None else base_protocol_ms
    if base_ms is None or cand_ms is None or protocol_ms is None:
        return None
    base, cand = base_ms - base_protocol_ms, cand_ms - protocol_ms
    least = max(NET_MIN_MS, NET_MIN_SHARE * max(protocol_ms, base_protocol_ms))
    return base / cand if base >= least and cand >= least else None


# torch.compile slower than eager by more than this is a baseline that misbehaves on this machine
# (a recompile, a graph break per call, a slow first backend): a user would run eager instead, so
# a ratio against it is no speedup to report
COMPILE_SUSPECT_RATIO = 2.0


def compile_misbehaves(eager_ms: Optional[float], compiled_ms: Optional[float]) -> Optional[str]:
    """Why torch.compile(reference) is no baseline to beat here, or None: slower than eager by more
    than COMPILE_SUSPECT_RATIO, both timed in one loop or one process."""
    if not eager_ms or not compiled_ms or compiled_ms <= COMPILE_SUSPECT_RATIO * eager_ms:
        return None
    return (f"torch.compile ran {compiled_ms:.4g} ms, {compiled_ms / eager_ms:.3g}x eager's {eager_ms:.4g} ms "
            f"(more than {COMPILE_SUSPECT_RATIO:g}x): a misbehaving baseline, not a speedup to report")


def against_compile(cand: TimingStats, comp: TimingStats, eager: Optional[TimingStats] = None) -> dict:
    """The EvalResult fields of a candidate's timing against torch.compile(reference)'s, each side
    net of the null calls of its own loop: the judge's, and a search's launch variants, which take
    the compile baseline their cell's verified kernel measured rather than compiling it again.
    `eager`: the reference timed beside torch.compile, which flags a misbehaving baseline."""
    return {"compile_timing": comp.model_dump(), "compile_runtime_ms": comp.median_ms,
            "faster_than_compile": bool(cand.median_ms < comp.median_ms and faster_beyond_noise(cand, comp)),
            "net_speedup_vs_compile": net_ratio(comp.median_ms, cand.median_ms, cand.protocol_ms, comp.protocol_ms),
            "compile_baseline_suspect": compile_misbehaves(eager.median_ms, comp.median_ms) if eager else None}


@dataclass(frozen=True)
class MachineLoad:
    load: Optional[float]  # 1-minute load average
    others_runnable: Optional[int]  # runnable tasks on the machine other than this one


def machine_load() -> MachineLoad:
    """/proc/loadavg's 1-minute average and runnable-task count (this process's one excluded)."""
    try:
        with open("/proc/loadavg") as f:
            fields = f.read().split()
        return MachineLoad(float(fields[0]), max(0, int(fields[3].split("/")[0]) - 1))
    except (OSError, ValueError, IndexError):
        try:
            return MachineLoad(os.getloadavg()[0], None)
        except OSError:
            return MachineLoad(None, None)


def free_cpu_threads(load: MachineLoad) -> int:
    """Intra-op threads to time with: torch's count, but no more than the cores nobody else is
    running on. A multithreaded reference whose threads wait for a busy core spins at every
    OpenMP barrier (measured here: 100x slower) while a single-threaded candidate barely notices,
    so timing both on the free cores keeps the comparison honest."""
    busy = load.others_runnable or 0
    return max(1, min(torch.get_num_threads(), _CORES - busy))


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """A private copy of an input set: tensors cloned, anything else deep-copied."""
    import copy

    return [x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def _check_call(i: int, cfg: TimingConfig, inputs_unchanged: bool, problem: Optional[str]) -> None:
    """Raise TimedCallRejected when call `i`'s inputs changed or its output was wrong."""
    which = f"timed call {i - cfg.warmup + 1}" if i >= cfg.warmup else f"warm-up call {i + 1}"
    if not inputs_unchanged:
        raise TimedCallRejected(
            "modified its inputs in place during timing",
            f"the candidate resized or rewrote its inputs in place ({which}); the reference's "
            "inputs after its call differ")
    if problem:
        raise TimedCallRejected(
            "wrong output on timed calls",
            f"correct in the trials, wrong in the timing loop ({which}): {problem}")


def _pair_timing(samples_c: list[float], samples_r: list[float], clock: str, cfg: TimingConfig,
                 threads: Optional[int], before: MachineLoad, floor_bytes: int,
                 bandwidth: Optional[float], samples_null: Optional[list[float]] = None,
                 fresh_place: bool = True) -> PairTiming:
    after = machine_load()
    floor = floor_bytes / bandwidth * 1e3 if bandwidth else None
    conditions = dict(checked_calls=cfg.warmup + cfg.iters, threads=threads, load_before=before.load,
                      load_after=after.load, runnable_before=before.others_runnable,
                      runnable_after=after.others_runnable, floor_ms=floor,
                      protocol_ms=statistics.median(samples_null) if samples_null else None,
                      fresh_place=fresh_place)
    place = "" if fresh_place else f" at one place of the arena (a call over {footprint.ONE_PLACE_ABOVE_BYTES >> 30} GiB)"
    protocol = (f"{clock}, candidate and reference alternating, {cfg.warmup} warm-up, {cfg.iters} timed "
                f"calls, {'cache flushed per call' if cfg.flush_cache else 'no cache flush'}, fresh inputs "
                f"per call{place}, every output checked" + (f", {threads} thread(s)" if threads else "")
                + (", a null call (the same copies and round trip, no forward) after each pair"
                   if samples_null else ""))
    return PairTiming(_stats(samples_c, protocol, **conditions), _stats(samples_r, protocol, **conditions))


def pair_fields(pair: PairTiming, cuda: bool) -> dict[str, Any]:
    """The record's fields for a candidate timed against the reference (timing, runtime_ms, speedup,
    faster, flags). Raises TimedCallRejected when the candidate's median is below the physical floor:
    every output was right and yet no memory system moves those bytes that fast, so the work
    happened outside the interval (a thread or stream the checks missed)."""
    from kernelwright.measure.timing_policy import (
        CPU_FLOOR_MARGIN,
        CPU_MIN_FLOOR_MS,
        GPU_FLOOR_MARGIN,
        GPU_MIN_FLOOR_MS,
    )

    cand, ref = pair.candidate, pair.reference
    margin = GPU_FLOOR_MARGIN if cuda else CPU_FLOOR_MARGIN
    if below_floor(cand, ref, margin, GPU_MIN_FLOOR_MS if cuda else CPU_MIN_FLOOR_MS):
        raise TimedCallRejected(
            "time below the physical floor",
            f"median {measured(cand.median_ms, 4)} ms is below {margin:g}x the physical floor of a call "
            f"({measured(cand.floor_ms, 4)} ms: its input and output bytes over the memory bandwidth)")
    speedup = ref.median_ms / cand.median_ms if cand.median_ms > 0 else None
    fields: dict[str, Any] = {
        "timing": cand.model_dump(), "ref_timing": ref.model_dump(), "runtime_ms": cand.median_ms,
        "ref_runtime_ms": ref.median_ms, "speedup": speedup,
        "net_speedup": net_ratio(ref.median_ms, cand.median_ms, cand.protocol_ms),
        "faster": bool(speedup and speedup > 1 and faster_beyond_noise(cand, ref)),
        "flags": ["speedup_above_10x: review before trusting"] if speedup and speedup > 10 else []}
    return fields


def below_floor(cand: TimingStats, ref: TimingStats, margin: float = 0.5, min_floor_ms: float = 0.0) -> bool:
    """The candidate's median is below `margin` x the physical floor of a call. Only where the floor
    means something: at least `min_floor_ms` (below that, call overheads dominate) and the trusted
    reference itself above it (a task whose output is a view of its input moves no bytes at all)."""
    floor = cand.floor_ms
    if floor is None or floor < min_floor_ms or ref.median_ms < floor:
        return False
    return cand.median_ms < margin * floor


# --- the candidate against the reference, each in its own runner process (judge.py) -------------

def _timed_call(served: Any, staged: Any, flush: _Flusher, cuda: bool, run_null: bool = False) -> tuple[Any, float]:
    """One served call under the judge's clock: from writing the inputs into the arena to the
    outputs copied out (on a GPU: synchronized in the judge too, so side-stream work is inside)."""
    served.before_call()  # outside the clock: the runner's process tree idle since its last reply
    flush()
    if cuda:
        _synchronize()
    t0 = _perf_counter()
    out = served.run_null(staged) if run_null else served.run(staged)
    if cuda:
        _synchronize()  # the judge's copies of the outputs are done
    ms = (_perf_counter() - t0) * 1e3
    served.after_call()
    return out, ms


@contextmanager
def _threads_set(threads: Optional[int], *served: Any) -> Iterator[None]:
    """Every runner at `threads` threads for the pair's calls (None: as they are), back after."""
    if threads is not None:
        for runner in served:
            runner.threads(threads)
    try:
        yield
    finally:
        if threads is not None:
            for runner in served:
                runner.threads(None)


def time_served_pair(candidate: Any, reference: Any, draw: Callable[[], list[Any]],
                     check: Callable[[Any, Any, list[Any]], Optional[str]], device: torch.device, cfg: TimingConfig,
                     bandwidth: Optional[float] = None, threads: Optional[int] = None,
                     null: Optional[Any] = None) -> PairTiming:
    """time_pair's protocol for models served by runner processes (remote.Served): the judge's
    clock, the judge's cache flush, the judge's draws and checks; the runners only compute.

    Per call, outside the interval: draw (shared by both), stage (room in each runner's arena,
    output buffers pre-filled with NaN), flush. Inside: write the inputs into the arena, request,
    reply, copy the outputs out. So a call's inputs are nowhere the runner can read before the
    clock starts, and every output byte checked was in place before it stopped. Both runners pay
    the same copies and round trip, which dilutes a speedup towards 1, never away from it: on a
    memory-bound task the copies are several times the kernel (docs/results/skeleton-speed-h200.md).

    `check(reference's outputs, candidate's outputs, inputs)` judges every call, warm-up included
    (None: right; else what is wrong); the inputs let it run the reference in float64 too.

    `null` (a trusted runner: the reference's) adds a third timed call per round with the same
    copies and round trip and no forward (link.Echo), after the pair; its median is the protocol's
    cost per call (TimingStats.protocol_ms), from which pair_fields states a net ratio beside the
    gross one. The verdict (`faster`) stays on the gross times.
    """
    from kernelwright.measure.compare import identical

    cuda = device.type == "cuda"
    flush = _Flusher(device, cfg.flush_cache)
    before = machine_load()
    threads = (threads or free_cpu_threads(before)) if not cuda else None
    samples_c: list[float] = []
    samples_r: list[float] = []
    samples_n: list[float] = []
    floor_bytes = 0
    fresh_place = True

    def timed(served: Any, staged: Any, run_null: bool = False) -> tuple[Any, float]:
        return _timed_call(served, staged, flush, cuda, run_null)

    with DeviceLock(str(device)), torch.no_grad(), _threads_set(threads, candidate, reference):
        for i in range(cfg.warmup + cfg.iters):
            inputs = draw()
            staged_c, staged_r = candidate.stage(inputs), reference.stage(inputs)
            # who goes first alternates: a call that follows the judge's own work (draw, stage,
            # check) and one that follows the other's call are not alike on a busy machine
            if i % 2 == 0:
                out_c, ms_c = timed(candidate, staged_c)
                out_r, ms_r = timed(reference, staged_r)
            else:
                out_r, ms_r = timed(reference, staged_r)
                out_c, ms_c = timed(candidate, staged_c)
            if i >= cfg.warmup:
                samples_c.append(ms_c)
                samples_r.append(ms_r)
            same = identical(candidate.inputs_after(staged_c), reference.inputs_after(staged_r))
            _check_call(i, cfg, same, check(out_r, out_c, inputs))
            floor_bytes = footprint.tensor_bytes(inputs) + footprint.tensor_bytes(out_r)
            if null is not None:  # after the checks: it writes the reference's inputs again
                _, ms_n = timed(null, staged_r, run_null=True)
                if i >= cfg.warmup:
                    samples_n.append(ms_n)
            # let this call's inputs and outputs go before the next draw: at KernelBench's
            # sizes two calls' sets at once are gigabytes more on the device (footprint.py)
            fresh_place = fresh_place and staged_c.fresh_place and staged_r.fresh_place
            del inputs, staged_c, staged_r, out_c, out_r
    clock = (f"{'wall-clock+device-sync' if cuda else 'wall-clock'} in the judge around each runner's request "
             "and reply (inputs copied in, outputs copied out)")
    return _pair_timing(samples_c, samples_r, clock, cfg, threads, before, floor_bytes, bandwidth, samples_n,
                        fresh_place)
