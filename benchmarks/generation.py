"""Generation speed per backend and batch size: load time, prompt and generated tokens/s, memory.

    python benchmarks/generation.py -m gguf:qwen2.5-coder-0.5b -m gguf:qwen2.5-coder-1.5b \
        -b 1 -b 4 --repeat 2 --out docs/results/generation-cpu.md

Each model runs in its own child process, so that peak RSS and load time are its own. Per model:
a warm-up call; one call with max_tokens=1, whose latency is the prompt time (the backends reset
their cache, so every call evaluates the prompt again); then, per batch size b, one request with
n=b. With --repeat R each of these runs R times and the fastest counts (the least disturbed by
other work on the machine; the load average before and after is written down too).
"decode tok/s" is per sequence, (tokens - 1) / (latency - prompt time); "throughput" is all
generated tokens of the batch over its wall time. For an openai: spec, memory is the client's,
not the server's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelwright.cli.model import load_prompt  # noqa: E402
from kernelwright.llm import GenerationRequest, make_backend  # noqa: E402

# A KernelBench-style prompt of typical length (~300 tokens), written for this benchmark.
PROMPT_SYSTEM = "You are an expert CUDA kernel engineer. You write custom CUDA kernels that replace PyTorch operators."
PROMPT_USER = '''Here is a PyTorch module:

```python
import torch
import torch.nn as nn


class Model(nn.Module):
    """Scales the input, adds a bias and applies GELU."""

    def __init__(self, features: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * self.scale + self.bias)


def get_inputs():
    return [torch.randn(64, 4096)]


def get_init_inputs():
    return [4096, 0.5]
```

Write ModelNew, with the same constructor arguments and outputs, whose forward runs one fused
CUDA kernel (scale, bias add and GELU) compiled with torch.utils.cpp_extension.load_inline.
Answer with one ```python code block.'''

COLUMNS = ["model", "backend", "load s", "prompt tok", "prompt tok/s", "n", "gen tok", "wall s",
           "decode tok/s", "throughput tok/s", "finish", "peak RSS MB", "peak CUDA MB"]  # fmt: skip


def _peak_cuda_mb() -> str:
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return "-"
    return f"{torch.cuda.max_memory_allocated() / 2**20:,.0f}"


def worker(spec: str, batches: list[int], max_tokens: int, prompt_file: str | None, seed: int, repeat: int) -> None:
    """Runs in the child; prints one JSON object per batch size."""
    messages = load_prompt(Path(prompt_file)) if prompt_file else None
    base = (
        GenerationRequest(messages=messages, max_tokens=max_tokens, seed=seed)
        if messages
        else GenerationRequest.chat(PROMPT_USER, system=PROMPT_SYSTEM, max_tokens=max_tokens, seed=seed)
    )
    start = time.perf_counter()
    backend = make_backend(spec)
    load_s = time.perf_counter() - start
    backend.generate([base.model_copy(update={"max_tokens": 4})])  # warm-up: first-call costs
    prompt_only = min(
        (backend.generate([base.model_copy(update={"max_tokens": 1})])[0][0] for _ in range(repeat)),
        key=lambda c: c.latency_s,
    )
    prompt_s = prompt_only.latency_s
    for n in batches:
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            (done,) = backend.generate([base.model_copy(update={"n": n})])
            runs.append((time.perf_counter() - start, done))
        wall, done = min(runs, key=lambda run: run[0])
        tokens = sum(c.completion_tokens for c in done)
        decode = [(c.completion_tokens - 1) / (c.latency_s - prompt_s) for c in done if c.latency_s > prompt_s]
        finishes = sorted({c.finish_reason for c in done})
        row = {
            "model": backend.model, "backend": type(backend).__name__, "load s": f"{load_s:.1f}",
            "prompt tok": prompt_only.prompt_tokens, "prompt tok/s": f"{prompt_only.prompt_tokens / prompt_s:.1f}",
            "n": n, "gen tok": tokens, "wall s": f"{wall:.1f}",
            "decode tok/s": f"{statistics.mean(decode):.1f}" if decode else "-",
            "throughput tok/s": f"{tokens / wall:.1f}", "finish": ",".join(finishes),
            "peak RSS MB": f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f}",
            "peak CUDA MB": _peak_cuda_mb(),
        }  # fmt: skip
        print(json.dumps(row), flush=True)


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--model", action="append", help="model spec (repeatable); default: both embedded models")
    p.add_argument("-b", "--batch", action="append", type=int, help="samples per request (repeatable); default 1 and 4")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1, help="runs of each measurement; the fastest counts")
    p.add_argument("--prompt-file", help="a prompt file as for `kernelwright generate`; default: a built-in prompt")
    p.add_argument("--out", type=Path, help="also write the table, with the command and machine, to this markdown file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    batches = args.batch or [1, 4]
    if args.worker:
        logging.basicConfig(level=logging.WARNING)
        worker(args.worker, batches, args.max_tokens, args.prompt_file, args.seed, args.repeat)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows: list[dict] = []
    load_before = os.getloadavg()[0]
    for spec in args.model or ["gguf:qwen2.5-coder-0.5b", "gguf:qwen2.5-coder-1.5b"]:
        cmd = [sys.executable, __file__, "--worker", spec, "--max-tokens", str(args.max_tokens)]
        cmd += ["--seed", str(args.seed), "--repeat", str(args.repeat)] + [a for b in batches for a in ("-b", str(b))]
        cmd += ["--prompt-file", args.prompt_file] if args.prompt_file else []
        logging.info("benchmarking %s ...", spec)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            why = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode} (negative: killed by a signal)"]
            logging.error("%s failed: %s", spec, why[-1])
            continue
        rows += [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    table = markdown(rows)
    print(table)
    if args.out:
        command = "python benchmarks/generation.py " + " ".join(sys.argv[1:])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            f"# Generation speed\n\nMachine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. "
            f"max_tokens {args.max_tokens}, seed {args.seed}, fastest of {args.repeat} runs. "
            f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after.\n\n"
            f"```\n{command}\n```\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
