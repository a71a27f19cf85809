"""Plan every task of a spec (KernelBench by default) the way a study's planning child does, one
task after another in this process, and print a Markdown table: problem, outcome (the segment's
kind, the Triton GEMM alternative, or none and why), seconds, and the process's peak memory.

    KERNELWRIGHT_SIZE=full PYTHONPATH=$PWD python benchmarks/plan_kernelbench.py \
        [--tasks kernelbench:/work/shared/kernelbench:1-3]

The size is what the task sources see (KernelBench's own constants); planning runs on the CPU
and allocates no full-size tensor (scaffold/reduce.py), so this shows what a GPU study plans.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from kernelwright.scaffold.__main__ import plan_one
from kernelwright.scaffold.planner_job import PlanJob
from kernelwright.scaffold.types import ScaffoldPlan
from kernelwright.tasks import load_tasks


def outcome(reply: dict) -> str:
    if not reply.get("ok"):
        return f"failed: {reply.get('stage')}: {reply.get('error')}"
    plan = ScaffoldPlan.model_validate(reply["plan"])
    if not plan.available:
        return f"none: {plan.reason}"
    text = plan.segment.kind.value
    if plan.gemm is not None and plan.gemm.available:
        text += " (+ triton gemm)"
    return f"{text}: {' -> '.join(plan.segment.targets)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="kernelbench:/work/shared/kernelbench:1-3")
    args = ap.parse_args()
    os.environ.setdefault("KERNELWRIGHT_SIZE", "full")
    tasks = load_tasks(args.tasks)
    print("| problem | plan | seconds |")
    print("|---|---|---|")
    total = time.monotonic()
    counts: dict[str, int] = {}
    for task in tasks:
        start = time.monotonic()
        try:
            reply = plan_one(PlanJob(task_id=task.id, source=task.source, path=task.path,
                                     size=os.environ["KERNELWRIGHT_SIZE"]))
        except Exception as e:  # what the planning child would answer as `internal`
            reply = {"ok": False, "stage": "internal", "error": f"{type(e).__name__}: {e}"[:300]}
        text = outcome(reply).replace("|", "\\|").replace("\n", " ")
        counts[text.split(":")[0]] = counts.get(text.split(":")[0], 0) + 1
        print(f"| {task.id} | {text[:700]} | {time.monotonic() - start:.1f} |", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\n{len(tasks)} tasks in {time.monotonic() - total:.0f} s, peak memory {peak:.1f} GiB; "
          + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
