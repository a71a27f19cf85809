"""The derived CPU size of every KernelBench problem of the chosen levels (tasks/sizing.py), as a
markdown table: which constants changed, the inputs, the bytes and FLOPs before and after, and the
second shape a correct candidate is checked at.

With --evaluate, each problem's reference is also evaluated as its own candidate (`ModelNew =
Model`, renamed) at the derived size, through the real evaluator on this machine (sandbox, correctness,
timing, the second-shape check), and the wall time of each evaluation is added: the size is usable
when every problem evaluates in seconds and none is killed at the memory limit.

    python benchmarks/derived_sizes.py --root ../shared/kernelbench --levels 1,2 [--evaluate] [--size small]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.evaluate.config import EVAL_DEFAULTS  # noqa: E402
from kernelwright.evaluate.evaluator import EvalRun, evaluate  # noqa: E402
from kernelwright.records import Task  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402
from kernelwright.tasks.sizing import SizingError, sized_tasks  # noqa: E402


def _mb(n: float | None) -> str:
    return "" if n is None else f"{n / 2**20:.3g}"


def _flops(n: float | None) -> str:
    return "" if not n else f"{n:.2g}"


def _row(task: Task | SizingError, original: Task, result=None, wall: float | None = None) -> list[str]:
    if isinstance(task, SizingError):
        return [original.id.removeprefix("kernelbench/"), original.name, f"refused: {task}", "", "", "", "", ""] + (
            ["", "", "", ""] if result is not None or wall is not None else [])
    s = task.sizing
    if s is None:
        return [task.id.removeprefix("kernelbench/"), task.name, "not sized", "", "", "", "", ""]
    changed = ", ".join(f"{c.name} {c.original}→{c.value}" for c in s.changed) or "none"
    total = s.input_bytes + s.output_bytes + s.param_bytes
    row = [task.id.removeprefix("kernelbench/"), task.name, changed, "; ".join(s.input_shapes),
           f"{_mb(s.original_bytes)} → {_mb(total)}", f"{_flops(s.original_flops)} → {_flops(s.flops)}",
           "; ".join(s.second_shapes) or s.second_why, s.forward_error or ""]
    if result is not None:
        gen = {True: "yes", False: "no", None: "-"}[result.generalises]
        wait = "" if result.device_lock_wait_s is None else f"{result.device_lock_wait_s:.1f}"
        row += [result.verdict.value, f"{wall:.1f}", wait, gen]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "kernelbench"))
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--ids", default="21-")
    ap.add_argument("--size", default="small")
    ap.add_argument("--evaluate", action="store_true", help="evaluate each reference as its own candidate")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--iters", type=int, default=EVAL_DEFAULTS.iters, help="timed calls per module")
    ap.add_argument("--warmup", type=int, default=EVAL_DEFAULTS.warmup)
    ap.add_argument("--input-sets", type=int, default=EVAL_DEFAULTS.input_sets)
    ap.add_argument("--device", default="cpu", help="where the references are evaluated (cpu, cuda)")
    args = ap.parse_args()

    ids = args.ids if not args.ids.endswith("-") else f"{args.ids}999"
    tasks = load_tasks(f"kernelbench:{args.root}:{args.levels}:{ids}")
    started = time.monotonic()
    sized = sized_tasks(tasks, args.size, args.device)
    sizing_s = time.monotonic() - started
    head = ["problem", "name", "constants changed", "inputs", "MB (in+out+params) full → derived",
            "FLOPs full → derived", "second shape (inputs)", "forward on meta failed"]
    if args.evaluate:
        head += ["verdict (reference as candidate)", "evaluation s", "of which waiting for the CPU's timing lock s",
                 "generalises"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    walls: list[float] = []
    for original, task in zip(tasks, sized):
        result = wall = None
        if args.evaluate and isinstance(task, Task):
            cfg = EvalRun.of(device=args.device, size=args.size, timeout=args.timeout, iters=args.iters,
                             warmup=args.warmup, input_sets=args.input_sets)
            t0 = time.monotonic()
            # the reference under the candidate's name (a subclass or an alias of Model is refused)
            result = evaluate(task, re.sub(r"\bModel\b", "ModelNew", task.source), cfg)
            wall = time.monotonic() - t0
            walls.append(wall)
        print("| " + " | ".join(c.replace("|", "/") for c in _row(task, original, result, wall)) + " |", flush=True)
    refused = sum(isinstance(t, SizingError) for t in sized)
    print(f"\n{len(tasks)} problem(s) sized in {sizing_s:.0f} s (one child process), {refused} refused.")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} core(s)")
    if walls:
        print(f"evaluations: {len(walls)}, wall s median {sorted(walls)[len(walls) // 2]:.1f}, max {max(walls):.1f}, "
              f"total {sum(walls):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
