"""The Triton gemm skeleton on a GPU: for each task whose Triton plan takes its GEMM into the kernel,
the oracle program timed against eager PyTorch and torch.compile by the real evaluator, and the same
program with its fp32 products in TF32 (Triton's default for fp32 `tl.dot`, which the skeleton
overrides with input_precision="ieee"): on fp32 tasks that variant should be wrong_output, which
is the reason for the policy (docs/scaffold.md, "GEMM layout").

    python benchmarks/gemm_check.py --device cuda --out gemm-check.md builtin/L1/10_matmul examples/gemm_bias_gelu.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.device import resolve_size  # noqa: E402
from kernelwright.evaluate import EvalConfig, evaluate  # noqa: E402
from kernelwright.scaffold import SegmentKind, plan_tasks, write  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

IEEE = 'input_precision="ieee"'


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", default="auto")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    size = resolve_size(args.device, args.size)
    tasks = [load_task(t) for t in args.tasks]
    timed = EvalConfig(device=args.device, size=size, iters=args.iters, compile_baseline=True, timeout=600.0)
    untimed = EvalConfig(device=args.device, size=size, time=False, timeout=600.0)
    rows = ["| task | plan | oracle | ms | x eager | x torch.compile | TF32 products |", "|---|---|---|---|---|---|---|"]
    started = time.monotonic()
    for t, p in zip(tasks, plan_tasks(tasks, size, device=args.device)):
        sc = write(p, "triton")
        if not sc.available or sc.segment.kind != SegmentKind.GEMM:
            rows.append(f"| {t.id} | {sc.reason} | | | | | |")
            continue
        program = sc.program_with(region(sc))
        r = evaluate(t, program, timed)
        tf32 = evaluate(t, program.replace(IEEE, 'input_precision="tf32"'), untimed) if IEEE in program else None
        tf32_text = "-" if tf32 is None else tf32.verdict.value + (
            f" (max abs diff {tf32.mismatch.max_abs_diff:.3g})" if tf32.mismatch else "")
        ms = f"{r.runtime_ms:.4f}" if r.runtime_ms else "-"
        rows.append(f"| {t.id} | {sc.reason} | {r.verdict.value} | {ms} | {_x(r.ref_runtime_ms, r.runtime_ms)} | "
                    f"{_x(r.compile_runtime_ms, r.runtime_ms)} | {tf32_text} |")
        print(f"{time.monotonic() - started:5.0f} s {rows[-1]}" + (f" {r.error[:400]}" if r.error else ""), flush=True)
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
