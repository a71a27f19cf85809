"""The timing protocol, the same for the reference and the candidate, in the same process.

GPU: one CUDA event pair per call, with a *device-wide* synchronize before the end event, so
work a candidate pushed onto another stream is inside the measured interval; the L2 cache is
flushed before every call (a write over a buffer larger than L2) so a candidate cannot win by
re-reading cached inputs; inputs rotate over several sets so results cannot be keyed on pointers.
CPU: the same loop with a monotonic wall clock and a last-level-cache flush.

The clock functions are captured when this module is imported — in the worker, before any
candidate code runs — so a candidate that rebinds `torch.cuda.Event` or `time.perf_counter`
does not change what we measure (and the tamper check reports it as a cheat).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from kernelwright.evaluate.device_lock import DeviceLock
from kernelwright.records import TimingStats

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize

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


def _stats(samples_ms: list[float], protocol: str) -> TimingStats:
    q = statistics.quantiles(samples_ms, n=4, method="inclusive") if len(samples_ms) > 1 else [samples_ms[0]] * 3
    return TimingStats(
        median_ms=statistics.median(samples_ms),
        p25_ms=q[0],
        p75_ms=q[2],
        mean_ms=statistics.fmean(samples_ms),
        calls=len(samples_ms),
        protocol=protocol,
    )


def time_calls(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], device: torch.device,
               cfg: TimingConfig) -> TimingStats:
    """Median and IQR of `fn(*inputs)` over `cfg.iters` calls after `cfg.warmup` calls, holding
    the device (evaluate/device_lock.py) so no other timing or model runs on it meanwhile."""
    with DeviceLock(str(device)):
        return _time_calls(fn, input_sets, device, cfg)


def _time_calls(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], device: torch.device,
                cfg: TimingConfig) -> TimingStats:
    flush = _Flusher(device, cfg.flush_cache)
    n = len(input_sets)
    cuda = device.type == "cuda"
    with torch.no_grad():
        for i in range(cfg.warmup):
            fn(*input_sets[i % n])
        if cuda:
            _synchronize()
        samples: list[float] = []
        for i in range(cfg.iters):
            inputs = input_sets[i % n]
            flush()
            if cuda:
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                _synchronize()
                _record(start)
                fn(*inputs)
                _synchronize()  # device-wide: side-stream work is inside the interval
                _record(end)
                _event_sync(end)
                samples.append(_elapsed(start, end))
            else:
                t0 = _perf_counter()
                fn(*inputs)
                samples.append((_perf_counter() - t0) * 1e3)
    clock = "cuda-events+device-sync" if cuda else "wall-clock"
    protocol = (f"{clock}, {cfg.warmup} warm-up, {cfg.iters} timed calls, "
                f"{'cache flushed per call' if cfg.flush_cache else 'no cache flush'}, {n} rotating input sets")
    return _stats(samples, protocol)


def faster_beyond_noise(cand: TimingStats, ref: TimingStats) -> bool:
    """Faster only if the interquartile ranges do not overlap: candidate p75 below reference p25."""
    return cand.p75_ms < ref.p25_ms
