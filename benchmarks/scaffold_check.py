"""Every scaffold of the built-in suite through the real evaluator, in parallel; prints a table.

For each task with a scaffold and each target: the skeleton with a correct region (from the
test oracle, kernelwright/scaffold/oracle.py) must be `correct` with a custom kernel; with an empty
region and with a wrong one it must not be. This is the unit test of tests/scaffold run for the
GPU targets on a GPU (the CPU test covers C++ and Triton-interpreted):

    python benchmarks/scaffold_check.py --device cuda --target cuda --target triton --jobs 8 --out docs/results/scaffold-gpu.md

Builds run in parallel (--jobs); nothing is timed (time=False), so parallel runs cannot skew a
measurement. Exit status 1 if any row disagrees with what it must be.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.device import resolve_size
from kernelwright.evaluate import EvalRun, evaluate  # noqa: E402
from kernelwright.records import Verdict  # noqa: E402
from kernelwright.scaffold import plan_task, write  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--target", action="append", choices=["cuda", "triton", "cpp"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--size", default="auto")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    targets = args.target or ["cpp"]
    size = resolve_size(args.device, args.size)
    tasks = load_tasks(args.tasks)
    started = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        plans = dict(zip([t.id for t in tasks], pool.map(lambda t: plan_task(t, size, device=args.device), tasks)))
    print(f"planned {len(tasks)} tasks in {time.monotonic() - started:.0f} s", flush=True)
    extra_env = {"TRITON_INTERPRET": "1"} if args.device == "cpu" and "triton" in targets else {}
    cfg = EvalRun.of(device=args.device, time=False, trials=3, timeout=600.0, size=size, extra_env=extra_env)
    jobs = []
    for t in tasks:
        p = plans[t.id]
        for target in targets:
            if not p.for_target(target).available:  # Triton takes a lone GEMM in (plan.gemm)
                continue
            sc = write(p, target)
            for variant, text in (("correct", region(sc)), ("empty", ""), ("wrong", region(sc, wrong=True))):
                jobs.append((t, target, variant, sc.program_with(text)))

    def run(job):
        t, target, variant, code = job
        result = evaluate(t, code, cfg)
        print(f"{time.monotonic() - started:5.0f} s  {t.id} {target} {variant}: {result.verdict.value}", flush=True)
        return job[:3], result

    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run, jobs))
    rows, bad = [], 0
    by_key = {(t.id, target, variant): r for (t, target, variant), r in results}
    for t in tasks:
        for target in targets:
            p = plans[t.id].for_target(target)
            if not p.available:
                rows.append(f"| {t.id} | {target} | no scaffold: {p.reason} | | | |")
                continue
            good, empty, wrong = (by_key[(t.id, target, v)] for v in ("correct", "empty", "wrong"))
            # a lone GEMM's empty region is its correct one (the epilogue is the identity)
            empty_ok = empty.verdict != Verdict.CORRECT or p.segment.pass_through
            ok = (good.verdict == Verdict.CORRECT and good.custom_kernel and empty_ok
                  and wrong.verdict != Verdict.CORRECT)
            bad += not ok
            rows.append(f"| {t.id} | {target} | {p.segment.kind.value}: {' -> '.join(p.segment.targets)} | "
                        f"{good.verdict.value}{'' if good.custom_kernel else ' (no custom kernel)'} | "
                        f"{empty.verdict.value} | {wrong.verdict.value} | {'ok' if ok else '**FAIL**'} |")
    elapsed = time.monotonic() - started
    import torch

    gpu = torch.cuda.get_device_name(0) if args.device != "cpu" and torch.cuda.is_available() else "none"
    header = [
        "# Scaffold check",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, GPU {gpu}, torch "
        f"{torch.__version__}, size {size}. {len(jobs)} evaluations in {elapsed:.0f} s with {args.jobs} jobs.",
        "",
        "```",
        "python benchmarks/scaffold_check.py " + " ".join(sys.argv[1:]),
        "```",
        "",
        "| task | target | region | correct region | empty region | wrong region | |",
        "|---|---|---|---|---|---|---|",
    ]
    summary = f"\n{sum(1 for r in rows if r.endswith('| ok |'))} of {sum(1 for r in rows if ' | - | ' not in r)} " \
              f"task x target rows as they must be."
    text = "\n".join(header + rows) + "\n" + summary + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
