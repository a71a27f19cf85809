"""A judge's clock on the device: the fixed cost of timing another process's kernels with the
judge's own CUDA events, measured before the judge is built on it.

Today's judge (evaluate/judge.py) times a GPU call from the CPU: its interval holds a socket round
trip and two synchronizes, 1.4-1.9 ms per call (docs/evaluator.md, "What that costs"). This tries
the handshake on the device instead, with plain torch and the driver API, in two processes that
share an input and an output buffer:

- the judge's stream first waits on a gate (cuStreamWaitValue32 on a pinned host word, no SM held),
  then records its start event t0, copies call k's inputs in (they exist nowhere before t0), records
  tc and an interprocess event e_in, and sends "call k";
- the runner's stream waits on e_in, runs the forward, records an interprocess event e_out, and
  answers "enqueued" before it synchronizes anything;
- the judge's stream waits on e_out and records t1, and only then does the judge open the gate.

So the judge's events bracket the runner's device work with no CPU round trip inside. A forward
that synchronizes before answering (it would wait on the closed gate) is caught by a timeout: the
judge opens the gate and the call is timed with the round trip in it (slower, never faster), and
counted in the `late` column. The runner synchronizes after its answer, so work on a side stream
is still over before the next call.

Per forward, median ms over the calls: `dev` = t0..t1 (copy in + forward), `fwd` = tc..t1 (the
forward and the switches between the two contexts), `e2e` = the judge's wall time of the call as
today's protocol measures it, and `inproc` = the same forward timed in one process with CUDA events
(KernelBench's way). `fwd - inproc` is the handshake's fixed cost.

    python3 benchmarks/gpu_event_handshake.py [--calls 200] [--numel 67108864] [--n 4096]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.multiprocessing as mp

FORWARDS = ("null", "relu", "matmul", "relu_sync")
WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ: go on once (int32)(*addr - value) >= 0
GATE_TIMEOUT_S = 0.05


class Gate:
    """A pinned host word a stream waits on (the driver's stream memory operations): the judge's
    stream holds at `hold(k)` until the host writes k, without a kernel spinning on an SM."""

    def __init__(self) -> None:
        cuda = ctypes.CDLL("libcuda.so.1")
        self._wait = getattr(cuda, "cuStreamWaitValue32_v2", None) or cuda.cuStreamWaitValue32
        self._wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self._wait.restype = ctypes.c_int
        self.word = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        dev = ctypes.c_uint64()
        get = cuda.cuMemHostGetDevicePointer_v2
        get.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
        rc = get(ctypes.byref(dev), ctypes.c_void_p(self.word.data_ptr()), 0)
        if rc != 0:
            raise RuntimeError(f"cuMemHostGetDevicePointer failed ({rc})")
        self.addr = dev.value

    def hold(self, stream: torch.cuda.Stream, k: int) -> None:
        rc = self._wait(ctypes.c_void_p(stream.cuda_stream), self.addr, k, WAIT_GEQ)
        if rc != 0:
            raise RuntimeError(f"cuStreamWaitValue32 failed ({rc}): stream memory operations unsupported here")

    def open(self, k: int) -> None:
        self.word[0] = k


def _forward(name: str, x: torch.Tensor, out: torch.Tensor, w: torch.Tensor | None) -> None:
    if name == "null":
        return
    if name.startswith("relu"):
        torch.relu(x, out=out)
    else:
        torch.mm(x, w, out=out)
    if name.endswith("_sync"):
        torch.cuda.synchronize()


def _runner(conn: Any, name: str, x: torch.Tensor, out: torch.Tensor, w: torch.Tensor | None,
            e_in_handle: bytes, e_out_handle: bytes) -> None:
    dev = x.device
    e_in = torch.cuda.Event.from_ipc_handle(dev, e_in_handle)
    e_out = torch.cuda.Event.from_ipc_handle(dev, e_out_handle)
    stream = torch.cuda.current_stream(dev)
    while conn.recv():
        stream.wait_event(e_in)
        _forward(name, x, out, w)
        e_out.record(stream)
        conn.send("enqueued")
        torch.cuda.synchronize()  # nothing of this call outlives it (a side stream included)
        conn.send("done")


@dataclass
class Row:
    forward: str
    dev: float
    fwd: float
    e2e: float
    inproc: float
    late: int


def _buffers(name: str, numel: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, Callable]:
    if name == "matmul":
        x, out, w = torch.empty(n, n, device="cuda"), torch.empty(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        return x, out, w, lambda: torch.randn(n, n, device="cuda")
    x, out = torch.empty(numel, device="cuda"), torch.empty(numel, device="cuda")
    return x, out, None, lambda: torch.randn(numel, device="cuda")


def _inproc(name: str, x: torch.Tensor, out: torch.Tensor, w: torch.Tensor | None, fresh: Callable,
            calls: int) -> float:
    times = []
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(calls):
        x.copy_(fresh())
        torch.cuda.synchronize()
        a.record()
        _forward(name.removesuffix("_sync"), x, out, w)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times[calls // 10:])


def _one(name: str, numel: int, n: int, calls: int) -> Row:
    x, out, w, fresh = _buffers(name, numel, n)
    e_in = torch.cuda.Event(interprocess=True)
    e_out = torch.cuda.Event(interprocess=True)
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(
        target=_runner, args=(theirs, name, x, out, w, e_in.ipc_handle(), e_out.ipc_handle()))
    proc.start()
    gate, stream = Gate(), torch.cuda.Stream()
    t0, tc, t1 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    dev, fwd, e2e, late = [], [], [], 0
    for k in range(1, calls + 1):
        src = fresh()
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            gate.hold(stream, k)
            t0.record(stream)
            x.copy_(src)
            tc.record(stream)
            e_in.record(stream)
        start = time.perf_counter()
        ours.send(1)
        if not ours.poll(GATE_TIMEOUT_S):  # the forward waits on the device: open, time it the slow way
            gate.open(k)
            late += 1
        assert ours.recv() == "enqueued"
        stream.wait_event(e_out)
        t1.record(stream)
        with torch.cuda.stream(stream):
            kept = out.clone()
        gate.open(k)
        assert ours.recv() == "done"
        t1.synchronize()
        del kept
        e2e.append((time.perf_counter() - start) * 1e3)
        dev.append(t0.elapsed_time(t1))
        fwd.append(tc.elapsed_time(t1))
    ours.send(0)
    proc.join()
    skip = calls // 10
    med = lambda xs: statistics.median(xs[skip:])  # noqa: E731
    return Row(name, med(dev), med(fwd), med(e2e), _inproc(name, x, out, w, fresh, calls), late)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--numel", type=int, default=64 * 1024 * 1024, help="fp32 elements for relu")
    ap.add_argument("--n", type=int, default=4096, help="matmul size")
    ap.add_argument("--forward", action="append", choices=FORWARDS)
    args = ap.parse_args(argv)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print("| forward | dev ms | fwd ms | e2e ms | inproc ms | fwd - inproc ms | late calls |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.forward or FORWARDS:
        r = _one(name, args.numel, args.n, args.calls)
        print(f"| {r.forward} | {r.dev:.4f} | {r.fwd:.4f} | {r.e2e:.4f} | {r.inproc:.4f} | "
              f"{r.fwd - r.inproc:.4f} | {r.late} of {args.calls} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
