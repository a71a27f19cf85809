"""Print a digest of the programs the scaffold writes for the built-in suite, per target, and one
line per task and target: compare two checkouts' outputs to see which programs a planner change
altered (the probes are the pre-check's and are not part of a program).

    PYTHONPATH=$PWD python benchmarks/plan_digest.py [--size small] [--tasks builtin] > digest.txt
"""

from __future__ import annotations

import argparse
import hashlib

from kernelwright.scaffold import plan_tasks, write
from kernelwright.tasks import load_tasks

TARGETS = ("cpp", "cuda", "triton")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin")
    ap.add_argument("--size", default="small")
    args = ap.parse_args()
    tasks = load_tasks(args.tasks)
    plans = plan_tasks(tasks, args.size)
    total = {t: hashlib.sha256() for t in TARGETS}
    for task, plan in zip(tasks, plans, strict=True):
        for target in TARGETS:
            sc = write(plan, target)
            text = sc.program if sc.available else f"none: {sc.reason}"
            twin = sc.library_twin.program if sc.library_twin is not None else ""
            h = hashlib.sha256(f"{text}\0{twin}".encode()).hexdigest()[:16]
            total[target].update(f"{task.id}\0{h}\n".encode())
            print(f"{task.id} {target} {h}")
    for target in TARGETS:
        print(f"ALL {target} {total[target].hexdigest()[:16]}")


if __name__ == "__main__":
    main()
