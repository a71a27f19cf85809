"""Where the reference spends its time: self time per op under torch.profiler.

Self time (an op's time minus its children's) is aggregated per op name, so ``aten::linear`` ->
``aten::addmm`` -> ``aten::copy_`` is never counted twice. On CUDA the clock is each op's self
*device* time (the kernels it launched itself); on the CPU it is self CPU time. Per-op numbers are
medians over the profiled calls, so one call the OS descheduled does not dominate.

Three forward times are reported, because they answer different questions:

* ``forward_ms`` - the evaluator's protocol (``measure.timing.time_calls``: synchronise, cache
  flush, median over calls), no profiler. Speedups are measured against this.
* ``window_ms`` - one forward's wall time *inside* the profiled run: each call sits in a
  ``record_function`` range, minus what an empty range costs (calibrated in the same session).
  ``host_gap_ms`` = window - summed self time: Python, module calls, dispatch and the profiler's
  per-op bookkeeping, i.e. time a fused kernel would also remove.
* ``span_ms`` - from the start of the call's first op to the end of its last op.

The consistency check (``coverage``, ``consistent``) needs a like-for-like pair. Against
``forward_ms`` it cannot work on small CPU problems: ops take microseconds and the profiler adds
microseconds per op (row-sum of 64x999: 6 us plain, 22 us profiled), so no subtraction makes them
agree within 10%. Even inside the window, 5-25 us of host time per call sits before the first op
and after the last (module call, range enter/exit); measured on this 2-core CPU at small size,
self time / window is 0.3-0.9. So on the CPU ``coverage`` = summed self time / ``span_ms``, per
call, median over calls: it catches double counting (>1) and missed ops (<1) while the Python
around the forward stays out of it; the host time is still reported (``host_gap_ms``,
``window_coverage``). On CUDA ``coverage`` = summed self device time / the synchronised window:
kernel time against wall time, the comparison that matters on the GPU.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

from kernelwright.analysis.ops import canonical
from kernelwright.analysis.types import OpTime, ProfileReport
from kernelwright.device import DeviceLock
from kernelwright.measure.timing import MIN_GPU_FLUSH_BYTES, TimingConfig, time_calls

MARK = "kernelwright::forward"
IDLE = "kernelwright::idle"
CALIBRATION_RANGES = 5


def profile_reference(model: nn.Module, inputs: Sequence[Any], device: str | torch.device = "cpu",
                      warmup: int = 3, iters: int = 10, *, top_k: int = 8, tolerance: float = 0.10,
                      flush_cache: bool = True) -> ProfileReport:
    """Profile ``model(*inputs)`` (already on ``device``) and time it the evaluator's way."""
    with DeviceLock(str(device)):  # the profiled calls skew others' timings as much as a timing does
        return _profile(model, inputs, device, warmup, iters, top_k=top_k, tolerance=tolerance,
                        flush_cache=flush_cache)


def _profile(model: nn.Module, inputs: Sequence[Any], device: str | torch.device, warmup: int, iters: int, *,
             top_k: int, tolerance: float, flush_cache: bool) -> ProfileReport:
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    inputs = list(inputs)
    forward = time_calls(model, [inputs], dev, TimingConfig(warmup=warmup, iters=iters, flush_cache=flush_cache))
    # On a GPU the profiled calls get the evaluator's L2 flush too; it runs on the device and leaves
    # the host alone. On the CPU a 64 MB write evicts the interpreter's own working set, and the
    # cold host code then shows up as time outside every op, so profiled CPU calls run warm.
    flush = torch.empty(MIN_GPU_FLUSH_BYTES // 4, dtype=torch.int32, device=dev) if (flush_cache and cuda) else None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    last: Any = None
    with torch.no_grad(), torch.profiler.profile(activities=activities) as prof:
        model(*inputs)  # the first call under a fresh profiler pays its start-up; it is not marked
        for _ in range(CALIBRATION_RANGES):
            with record_function(IDLE):
                pass  # what a range costs by itself: profiler overhead inside every window
        for _ in range(iters):
            if flush is not None:
                flush.fill_(1)
            if cuda:
                torch.cuda.synchronize(dev)
            with record_function(MARK):
                out = model(*inputs)
                if cuda:
                    torch.cuda.synchronize(dev)  # inside the range: the window ends when the GPU is done
            last = out  # the previous output is freed here, outside any window: freeing is not an op
            del out
    del last
    # With CUDA activity a range also appears as a GPU-side annotation; the CPU-side one owns the ops.
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    marks = [e for e in events if e.name == MARK]
    if not marks:
        raise RuntimeError("the profiler recorded no forward ranges")
    idle_us = statistics.median([float(e.cpu_time_total) for e in events if e.name == IDLE] or [0.0])

    self_of = _self_device_us if cuda else (lambda e: float(e.self_cpu_time_total))
    per_call: list[dict[str, list[float]]] = []
    windows, spans, totals = [], [], []
    for mark in marks:
        ops: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for e in _descendants(mark):
            ops[e.name][0] += self_of(e)
            ops[e.name][1] += 1
        per_call.append(ops)
        totals.append(sum(v[0] for v in ops.values()))
        windows.append(max(float(mark.cpu_time_total) - idle_us, 1e-3))
        spans.append(_span_us(mark) or windows[-1])

    n = len(marks)
    names = {name for ops in per_call for name in ops}
    op_ms = {name: statistics.median(ops.get(name, [0.0])[0] for ops in per_call) / 1e3 for name in names}
    op_calls = {name: statistics.median(ops.get(name, [0.0, 0.0])[1] for ops in per_call) for name in names}
    shares_base = sum(op_ms.values())
    ranked = sorted(op_ms.items(), key=lambda kv: kv[1], reverse=True)
    top = [OpTime(op=name, target=canonical(name), self_ms=ms, share=ms / shares_base if shares_base else 0.0,
                  calls=op_calls[name]) for name, ms in ranked[:top_k]]
    self_total_ms = statistics.median(totals) / 1e3
    window_ms = statistics.median(windows) / 1e3
    reference = windows if cuda else spans
    coverage = statistics.median(t / r for t, r in zip(totals, reference))
    return ProfileReport(
        device=str(dev), clock="self_device" if cuda else "self_cpu", warmup=warmup, iters=n, top=top,
        ops_total=len(names), self_total_ms=self_total_ms, window_ms=window_ms,
        span_ms=statistics.median(spans) / 1e3, range_cost_ms=idle_us / 1e3, forward_ms=forward.median_ms,
        profiler_overhead_ms=window_ms - forward.median_ms, host_gap_ms=max(0.0, window_ms - self_total_ms),
        coverage=coverage, window_coverage=statistics.median(t / w for t, w in zip(totals, windows)),
        ratio_to_forward=self_total_ms / forward.median_ms if forward.median_ms else 0.0,
        tolerance=tolerance, consistent=abs(coverage - 1.0) <= tolerance,
        protocol=(f"torch.profiler self {'device' if cuda else 'CPU'} time, median of {n} calls each in a "
                  f"{MARK!r} range{', L2 flushed before each' if flush is not None else ''}; coverage against "
                  f"the {'synchronised window' if cuda else 'first-op-to-last-op span'}; "
                  f"forward_ms: {forward.protocol}"))


def _span_us(mark: Any) -> float:
    children = [c for c in mark.cpu_children if c.device_type == DeviceType.CPU]
    if not children:
        return 0.0
    return float(max(c.time_range.end for c in children) - min(c.time_range.start for c in children))

def _descendants(event: Any) -> list[Any]:
    """CPU-side op events under ``event`` (kernels are attributed to the op that launched them)."""
    found, stack = [], list(event.cpu_children)
    while stack:
        e = stack.pop()
        if e.device_type == DeviceType.CPU:
            found.append(e)
            stack.extend(e.cpu_children)
    return found


def _self_device_us(event: Any) -> float:
    # torch >= 2.4 names it self_device_time_total; older releases self_cuda_time_total.
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, attr, None)
        if value is not None:
            return float(value)
    return 0.0

