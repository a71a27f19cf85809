"""What a study pays before and during generation, on this machine: scaffold planning per task,
model load (a GGUF is dequantised once, then read back from the kept copy), and decoding speed
of one request alone versus many in one call (what llm/coalesce.py buys a study).

    python benchmarks/model_throughput.py -m hf:qwen2.5-coder-1.5b --device cuda
    python benchmarks/model_throughput.py -m qwen2.5-coder-0.5b --device cpu --batch 4 --tokens 64

Prints a markdown table. Timings, not assertions: run by hand and on the device.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.device import resolve_size
from kernelwright.llm import make_backend  # noqa: E402
from kernelwright.llm.base import GenerationRequest  # noqa: E402
from kernelwright.scaffold import plan_task  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

PLAN_TASKS = ["builtin/L1/03_softmax", "builtin/L2/01_linear_gelu_scale", "builtin/L3/01_mlp_block"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    size = resolve_size(args.device)
    rows: list[tuple[str, str]] = []
    for tid in PLAN_TASKS:
        start = time.perf_counter()
        plan_task(load_task(tid), size, device=args.device)
        rows.append((f"scaffold plan, {tid} ({size} size)", f"{time.perf_counter() - start:.1f} s"))
    start = time.perf_counter()
    backend = make_backend(args.model)
    rows.append((f"model load ({getattr(backend, 'loaded_from', args.model)})", f"{time.perf_counter() - start:.1f} s"))
    for n in (1, args.batch):
        reqs = [GenerationRequest.chat(f"Write a CUDA kernel that adds {i} to every element of a tensor.",
                                       temperature=0.0, max_tokens=args.tokens) for i in range(n)]
        start = time.perf_counter()
        out = backend.generate(reqs)
        dt = time.perf_counter() - start
        tokens = sum(c.completion_tokens for row in out for c in row)
        rows.append((f"generate {n} request(s) in one call, up to {args.tokens} tokens each",
                     f"{dt:.1f} s, {tokens / dt:.0f} tokens/s"))
    print(f"| step | {args.model} on {args.device} |\n|---|---|")
    for step, value in rows:
        print(f"| {step} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
