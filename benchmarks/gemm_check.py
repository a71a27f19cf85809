"""The Triton gemm skeleton on a GPU: for each task whose Triton plan takes its GEMM into the kernel,
the oracle program through the real evaluator (timed against eager PyTorch and torch.compile), and
the kernels' own device time (device_time.py) under each way of multiplying fp32 operands: the
skeleton's policy (writers.triton_gemm.FP32_PRODUCTS) and the others of triton_gemm.PRODUCTS: "split3"
(3xTF32 on operands split once), "ieee" (fp32 FMA), "tf32x3" (Triton's own 3xTF32, split inside
the loop) and "tf32" (one TF32 pass, Triton's default for fp32 `tl.dot`), each with its error
against the reference in float64. The TF32 twin also goes through the evaluator: on fp32 tasks it
should be wrong_output (outside the tolerance and far less accurate than the reference against
float64), the reason for the policy (docs/scaffold.md, "Numerics").

    python benchmarks/gemm_check.py --device cuda --out gemm-check.md builtin/L1/10_matmul examples/gemm_bias_gelu.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # device_time, beside this file

from device_time import measure  # noqa: E402

from kernelwright.device import resolve_size  # noqa: E402
from kernelwright.evaluate import EvalRun, evaluate  # noqa: E402
from kernelwright.scaffold import SegmentKind, plan_tasks, write  # noqa: E402
from kernelwright.scaffold.writers.triton_gemm import FP32_PRODUCTS, PRODUCTS, write_triton_gemm  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

OTHERS = tuple(p for p in PRODUCTS if p != FP32_PRODUCTS)


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def _ms(v: float | None) -> str:
    return f"{v:.3f}" if v else "-"


def _err(errors: dict, key: str) -> str:
    return f"{errors[key]:.2g}" if key in errors else "-"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", default="auto")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-judge", action="store_true", help="device time only (no evaluator runs)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    size = resolve_size(args.device, args.size)
    tasks = [load_task(t) for t in args.tasks]
    timed = EvalRun.of(device=args.device, size=size, iters=args.iters, compile_baseline=True, timeout=600.0)
    untimed = EvalRun.of(device=args.device, size=size, time=False, timeout=600.0)
    others = " / ".join(OTHERS)
    rows = [f"fp32 products: {FP32_PRODUCTS} (the skeleton's policy), beside {others}. Device times are "
            "do_bench medians (CUDA events, L2 flushed); errors are max abs diff from the reference in float64.", "",
            f"| task | judge: verdict | judge ms | x eager | x compile | TF32 twin (judge) | device ms eager / compile / "
            f"{FP32_PRODUCTS} / {others} | device x compile | error eager / {FP32_PRODUCTS} / {others} |",
            "|---|---|---|---|---|---|---|---|---|"]
    started = time.monotonic()
    for t, p in zip(tasks, plan_tasks(tasks, size, device=args.device)):
        sc = write(p, "triton")
        if not sc.available or sc.segment.kind != SegmentKind.GEMM:
            rows.append(f"| {t.id} | {sc.reason} | | | | | | | |")
            continue
        program = sc.program_with(region(sc))
        chosen = p.for_target("triton")
        fp32 = sc.segment.gemm is not None and sc.segment.gemm.a.dtype == "float32"
        twins = {o: write_triton_gemm(chosen, chosen.segment, o).program_with(region(sc)) for o in OTHERS} if fp32 else {}
        verdict = ms = xe = xc = twin = "-"
        if not args.no_judge:
            r = evaluate(t, program, timed)
            # the tf32 twin is the one whose verdict the policy rests on
            verdict, ms = r.verdict.value, _ms(r.runtime_ms)
            xe, xc = _x(r.ref_runtime_ms, r.runtime_ms), _x(r.compile_runtime_ms, r.runtime_ms)
            if "tf32" in twins:
                tr = evaluate(t, twins["tf32"], untimed)
                twin = tr.verdict.value + (f" ({tr.mismatch.max_abs_diff:.3g})" if tr.mismatch else "")
            if r.error:
                print(f"{t.id}: {r.error[:400]}", flush=True)
            if r.accuracy:
                print(f"{t.id}: judged against float64 in {r.accuracy.comparisons} checks: "
                      f"{r.accuracy.model_dump()}", flush=True)
        d, v = measure(t, {FP32_PRODUCTS: program, **twins}, size, device=args.device)
        mine = v[FP32_PRODUCTS]
        device = " / ".join([_ms(d.eager_ms), _ms(d.compile_ms), _ms(mine.program_ms)]
                            + [_ms(v[o].program_ms) if o in v else "-" for o in OTHERS])
        errors = " / ".join([_err(d.errors, "eager"), _err(mine.errors, "program")]
                            + [_err(v[o].errors, "program") if o in v else "-" for o in OTHERS])
        rows.append(f"| {t.id} | {verdict} | {ms} | {xe} | {xc} | {twin} | {device} | "
                    f"{_x(d.compile_ms, mine.program_ms)} | {errors} |")
        print(f"{time.monotonic() - started:5.0f} s {rows[-1]}"
              + "".join(f" [{x.error}]" for x in (d, *v.values()) if x.error), flush=True)
        if args.out:
            args.out.write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
