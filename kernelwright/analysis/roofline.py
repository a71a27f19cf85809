"""The roofline floor of a reference: least FLOPs and bytes, and the time they need on a device.

FLOPs: matmul/conv-class ops as counted by ``torch.utils.flop_counter.FlopCounterMode`` (recorded
per node while the graph is built), plus the non-library ops counted per element (see
``ops.py``: one per output element for elementwise ops, one per input element for reductions, a
few per element for normalisations). Bytes: every graph input, parameter/buffer and output read
or written exactly once at its dtype's size; a table read only through a gather (embedding) counts
no more than the rows gathered. Intermediates count nothing: the floor assumes perfect fusion.

Floor time = max(FLOPs / peak, bytes / bandwidth), where library FLOPs use the peak of their
operand dtype (fp32 means fp32 without TF32, as the evaluator runs it; ``allow_tf32=True`` uses
the TF32 peak) and the other FLOPs the fp32 vector peak.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kernelwright.analysis import ops
from kernelwright.analysis.types import DevicePeaks, OpGraph, OpKind, Role, Roofline
from kernelwright.device import DeviceLock

log = logging.getLogger(__name__)

_DTYPE_PEAK = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def roofline(subject: OpGraph | nn.Module, device_info: str | DevicePeaks = "h200", *,
             inputs: Sequence[Any] | None = None, measure: bool = True, allow_tf32: bool = False) -> Roofline:
    """Roofline of an ``OpGraph``, or of ``model`` run on ``inputs`` (the graph is built first)."""
    if isinstance(subject, nn.Module):
        if inputs is None:
            raise ValueError("roofline(model, ...) needs inputs=")
        from kernelwright.analysis.graph import build_graph

        subject = build_graph(subject, inputs)
    graph = subject
    peaks = device_peaks(device_info, measure=measure)

    library_flops = sum(n.flops for n in graph.nodes if n.role == Role.COMPUTE)
    elementwise_flops = sum(_elementwise_flops(n) for n in graph.nodes if n.role == Role.COMPUTE and n.flops == 0)
    bytes_inputs = sum(t.meta.nbytes for t in graph.inputs)
    bytes_params = sum(_param_bytes(graph, p.name, p.meta.nbytes) for p in graph.params)
    bytes_outputs = sum(m.nbytes for m in graph.output_meta)
    total_bytes = bytes_inputs + bytes_params + bytes_outputs

    dtype = _library_dtype(graph)
    key = "tf32" if (dtype == "float32" and allow_tf32) else _DTYPE_PEAK.get(dtype, "fp32")
    lib_peak, vec_peak = peaks.flops.get(key, peaks.flops["fp32"]), peaks.flops["fp32"]
    compute_s = library_flops / lib_peak + elementwise_flops / vec_peak
    memory_s = total_bytes / peaks.bandwidth
    flops = library_flops + elementwise_flops
    return Roofline(
        device=peaks.key, flops=flops, library_flops=library_flops, elementwise_flops=elementwise_flops,
        bytes=total_bytes, bytes_inputs=bytes_inputs, bytes_params=bytes_params, bytes_outputs=bytes_outputs,
        intensity=flops / total_bytes if total_bytes else 0.0, compute_dtype=key,
        compute_ms=compute_s * 1e3, memory_ms=memory_s * 1e3, floor_ms=max(compute_s, memory_s) * 1e3,
        bound="compute" if compute_s > memory_s else "memory", ridge=lib_peak / peaks.bandwidth)


def _elementwise_flops(node: Any) -> int:
    out = node.output
    if out is None:
        return 0
    if node.kind == OpKind.ELEMENTWISE:
        return 0 if node.target in ops.ZERO_FLOP_ELEMENTWISE else out.numel
    if node.kind == OpKind.REDUCTION:
        first = next((i for i in node.inputs if i.shape is not None), None)
        return _numel(first.shape) if first else out.numel
    if node.kind == OpKind.NORMALIZATION:
        return ops.NORM_FLOPS_PER_ELEMENT.get(node.target, 5) * out.numel
    return 0


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _param_bytes(graph: OpGraph, name: str, full: int) -> int:
    """A parameter read only by gathers costs at most the bytes those gathers produce."""
    readers = [n for n in graph.nodes if any(i.name == name for i in n.inputs)]
    if readers and all(n.target in ops.GATHERS for n in readers):
        gathered = sum(n.output.nbytes for n in readers if n.output is not None)
        return min(full, gathered)
    return full


def _library_dtype(graph: OpGraph) -> str:
    """Operand dtype of the library op that does most of the FLOPs (float32 when there is none)."""
    heavy = [n for n in graph.nodes if n.role == Role.COMPUTE and n.kind == OpKind.LIBRARY_HEAVY and n.flops]
    if not heavy:
        return "float32"
    top = max(heavy, key=lambda n: n.flops)
    return next((i.dtype for i in top.inputs if i.dtype and i.dtype.startswith(("float", "bfloat"))), "float32")


# ---- device peaks ---------------------------------------------------------------------------
# Dense (no sparsity) peaks. "measured" numbers were measured by us on that device; "datasheet"
# numbers are the vendor's. fp32 means the CUDA-core rate (no tensor cores, no TF32).
DEVICES: dict[str, DevicePeaks] = {
    "h200": DevicePeaks(
        key="h200", name="NVIDIA H200 SXM 141GB", bandwidth=4.3e12,
        flops={"fp32": 67e12, "tf32": 495e12, "bf16": 790e12, "fp16": 989e12},
        sources={"bandwidth": "measured", "fp32": "datasheet", "tf32": "datasheet", "bf16": "measured",
                 "fp16": "datasheet"},
        note="measured: device copy bandwidth, bf16 dense GEMM (datasheet: 4.8 TB/s, 989 TFLOP/s bf16)"),
    "h100_sxm": DevicePeaks(
        key="h100_sxm", name="NVIDIA H100 SXM 80GB", bandwidth=3.35e12,
        flops={"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12},
        sources={"bandwidth": "datasheet", "fp32": "datasheet", "tf32": "datasheet", "bf16": "datasheet",
                 "fp16": "datasheet"}),
    "a100_sxm": DevicePeaks(
        key="a100_sxm", name="NVIDIA A100 SXM 80GB", bandwidth=2.039e12,
        flops={"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
        sources={"bandwidth": "datasheet", "fp32": "datasheet", "tf32": "datasheet", "bf16": "datasheet",
                 "fp16": "datasheet"}),
}
_ALIASES = {"h200": "h200", "h100": "h100_sxm", "h100_sxm": "h100_sxm", "a100": "a100_sxm", "a100_sxm": "a100_sxm"}
# Used when measuring is switched off: below any machine we would run tests on.
CPU_FALLBACK = DevicePeaks(key="cpu", name="CPU (not measured)", bandwidth=5e9,
                           flops={k: 2e10 for k in ("fp32", "tf32", "bf16", "fp16")},
                           sources={k: "assumed" for k in ("bandwidth", "fp32", "tf32", "bf16", "fp16")})


def device_peaks(device: str | DevicePeaks, *, measure: bool = True) -> DevicePeaks:
    """Peaks by table key ("h200", "h100", "a100"), "cpu" (measured, cached), or "cuda[:N]"."""
    if isinstance(device, DevicePeaks):
        return device
    d = device.strip().lower().removeprefix("nvidia ").replace(" ", "_")
    if d == "cpu":
        return cpu_peaks() if measure else CPU_FALLBACK
    if d in _ALIASES:
        return DEVICES[_ALIASES[d]]
    if d == "cuda" or d.startswith("cuda:"):
        name = torch.cuda.get_device_name(int(d[5:]) if ":" in d else None)
        for marker, key in (("H200", "h200"), ("H100", "h100_sxm"), ("A100", "a100_sxm")):
            if marker in name:
                return DEVICES[key]
        log.warning("no peak table for %r; using H100 SXM datasheet numbers", name)
        base = DEVICES["h100_sxm"]
        return base.model_copy(update={"name": name, "sources": {k: "assumed" for k in base.sources}})
    raise ValueError(f"unknown device {device!r}: use cpu, cuda[:N] or one of {sorted(_ALIASES)}")


PEAKS_FILE = "device_peaks.json"  # in the cache root: measured once per machine


def cpu_peaks(cache_dir: Path | None = None) -> DevicePeaks:
    """This CPU's copy bandwidth and fp32 matmul rate, measured once per machine and cached."""
    root = cache_dir or Path(os.environ.get("KERNELWRIGHT_CACHE") or Path.home() / ".cache" / "kernelwright")
    path = root / PEAKS_FILE
    key = _cpu_fingerprint()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if key in cached:
        try:
            return DevicePeaks.model_validate(cached[key])
        except ValueError:
            pass
    with DeviceLock("cpu"):  # a peak is what the machine does when nothing else is timed on it
        peaks = _measure_cpu()
    cached[key] = peaks.model_dump()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=1))
        os.replace(tmp, path)  # atomic: concurrent runs never read half a file
    except OSError as e:
        log.warning("could not cache device peaks in %s: %s", path, e)
    return peaks


def floor_bandwidth(device: str, cache_dir: Path | None = None) -> float | None:
    """Memory bandwidth (bytes/s) for the evaluator's physical floor on `device`: measured on this
    CPU (cached per machine under `cache_dir`), the table's figure for a known GPU, and None for a
    GPU we have no figure for (an assumed figure must not call a real kernel a cheat)."""
    if device.startswith("cuda"):
        peaks = device_peaks(device)
        return peaks.bandwidth if peaks.sources.get("bandwidth") != "assumed" else None
    return cpu_peaks(cache_dir).bandwidth


def _cpu_fingerprint() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu|{model}|{os.cpu_count()} cores|{torch.get_num_threads()} threads|torch {torch.__version__}"


def _best_seconds(fn: Any, reps: int) -> float:
    fn()  # warm: page faults and thread-pool start-up are not the machine's peak
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _measure_cpu() -> DevicePeaks:
    # Best-of rather than median: a peak is what the machine can do when nothing interferes.
    src = torch.ones(16 * 2**20)  # 64 MB: past the last-level cache of the machines we use
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / _best_seconds(lambda: dst.copy_(src), 5)  # read + write
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    flops = 2 * 1024**3 / _best_seconds(lambda: torch.mm(a, b), 3)
    log.info("measured CPU peaks: %.1f GB/s, %.1f GFLOP/s fp32", bandwidth / 1e9, flops / 1e9)
    return DevicePeaks(key="cpu", name=_cpu_fingerprint().split("|")[1], bandwidth=bandwidth,
                       flops={k: flops for k in ("fp32", "tf32", "bf16", "fp16")},
                       sources={"bandwidth": "measured", "fp32": "measured", "tf32": "assumed",
                                "bf16": "assumed", "fp16": "assumed"},
                       note="64 MB copy and 1024^3 fp32 matmul, best of a few; other dtypes assumed equal to fp32")
