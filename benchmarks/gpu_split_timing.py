"""What the split judge costs on a GPU: the same honest candidates evaluated by the in-process worker
and by the split judge (EvalConfig.gpu_split: judge.py + a CUDA IPC arena), side by side.

Prints a table: per candidate and mode, the verdict, the candidate's and the reference's median
call time, the speedup, and the evaluation's wall time. The split times each call with the judge's
clock around a request to another process (a socket round trip and device synchronizes on both
sides), so its times are higher by a constant per call and its speedups closer to 1 for short
calls; this table says by how much. Run on a GPU machine:

    python3 benchmarks/gpu_split_timing.py [--device cuda:0] [--repeat 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kernelwright.evaluate import EvalConfig, evaluate
from kernelwright.tasks import load_task

ROOT = Path(__file__).resolve().parent.parent
CASES = [  # (task, candidate): the bundled honest GPU examples
    ("builtin/L2/01_linear_gelu_scale", ROOT / "examples" / "candidates" / "linear_gelu_scale_cuda.py"),
    ("builtin/L2/01_linear_gelu_scale", ROOT / "examples" / "candidates" / "linear_gelu_scale_triton.py"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--repeat", type=int, default=2, help="evaluations per candidate and mode (the first builds)")
    args = ap.parse_args(argv)

    rows = []
    for task_id, path in CASES:
        task, code = load_task(task_id), path.read_text()
        for split in (False, True):
            for k in range(args.repeat):
                start = time.perf_counter()
                r = evaluate(task, code, EvalConfig(device=args.device, gpu_split=split))
                wall = time.perf_counter() - start
                rows.append((path.name, "split" if split else "in-process", k, r.verdict.value, r.runtime_ms,
                             r.ref_runtime_ms, r.speedup, wall, r.judge))
                print(f"{path.name} {rows[-1][1]} #{k}: {r.verdict.value} {r.error or ''}", flush=True)

    print("\n| candidate | judge | run | verdict | candidate ms | reference ms | speedup | eval wall s | record says |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|")
    for name, mode, k, verdict, ms, ref_ms, speedup, wall, judge in rows:
        def f(v: float | None, digits: int = 4) -> str:
            return "-" if v is None else f"{v:.{digits}g}"

        print(f"| {name} | {mode} | {k} | {verdict} | {f(ms)} | {f(ref_ms)} | {f(speedup, 3)} | {wall:.1f} | {judge} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
