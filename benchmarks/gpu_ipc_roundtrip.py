"""Where a split GPU call's fixed cost goes: two processes on one GPU, one round trip per call.

The judge (evaluate/judge.py) times each call from another process than the one that runs the
kernels, and pays per call a fixed cost on top of the kernels (benchmarks/gpu_split_timing.py
measures it). This isolates its parts with plain torch: a parent and a spawned child sharing two
CUDA buffers, one message each way per call, median over the calls, for these modes:

- socket: the message only, no GPU work on either side;
- child:  the child copies buffer a -> b and synchronizes its device (the runner's share);
- parent: the parent writes a, sends, and after the reply copies b out, synchronizing (the judge's);
- both:   parent and child, as a split call does.

    python3 benchmarks/gpu_ipc_roundtrip.py [--numel 1024 --numel 67108864] [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.multiprocessing as mp

MODES = ("socket", "child", "parent", "both")


def _child(conn, a, b, gpu: bool) -> None:  # noqa: ANN001 - a multiprocessing Connection
    torch.cuda.init()
    while conn.recv():
        if gpu:
            b.copy_(a)
            torch.cuda.synchronize()
        conn.send(1)


def _one(mode: str, numel: int, calls: int) -> float:
    ctx = mp.get_context("spawn")
    a, b = torch.zeros(numel, device="cuda"), torch.zeros(numel, device="cuda")
    src = torch.randn(numel, device="cuda")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(theirs, a, b, mode in ("child", "both")))
    proc.start()
    parent_gpu = mode in ("parent", "both")
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if parent_gpu:
            a.copy_(src)
            torch.cuda.synchronize()
        ours.send(1)
        ours.recv()
        if parent_gpu:
            b.clone()
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    ours.send(0)
    proc.join()
    return statistics.median(samples[calls // 10:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, action="append", help="fp32 elements per buffer (repeatable)")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args(argv)
    print("| elements | " + " | ".join(f"{m} ms" for m in MODES) + " |")
    print("|---:|" + "---:|" * len(MODES))
    for numel in args.numel or [1024, 64 * 1024 * 1024]:
        times = [_one(m, numel, args.calls) for m in MODES]
        print(f"| {numel} | " + " | ".join(f"{t:.3f}" for t in times) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
