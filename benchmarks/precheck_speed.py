"""How long a pre-check call takes, per target, for 1 and for 8 new regions (nothing cached but the
precompiled header): what a search loop pays per step.

    KERNELWRIGHT_CONFINE=none python benchmarks/precheck_speed.py --repeat 3

(KERNELWRIGHT_CONFINE=none: a child in bwrap's PID namespace is not counted in this process's
children's CPU time; unconfined, the CPU column is complete. The regions here are the oracle's.)

New regions are the oracle's with a unique comment, so every call compiles (C++/CUDA) or runs a
child (Triton) as a new answer would. Prints one table row per target and batch size: wall time,
and CPU time (this process and its children: compiler, harness, confinement), which is what the
call costs when the machine is not shared.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.scaffold import plan_tasks, precheck_many, write  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402

TASKS = ["builtin/L2/06_channel_affine_hardswish_residual", "builtin/L2/05_linear_softmax_scale"]


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tasks = [t for t in load_tasks("builtin") if t.id in TASKS]
    plans = plan_tasks(tasks)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| target | layout | regions a call | median wall s a call | wall s a region | median CPU s a call |\n"
          "|---|---|---|---|---|---|")
    for target in ("cpp", "cuda", "triton"):
        for plan in plans:
            sc = write(plan, target)
            good = region(sc)
            comment = "#" if target == "triton" else "//"
            precheck_many(plan, target, [good])  # the precompiled header, once per machine
            for k in (1, 8):
                times, cpu = [], []
                for _ in range(args.repeat):
                    regions = [f"{comment} {uuid.uuid4().hex}\n{good}" for _ in range(k)]
                    started, cpu0 = time.perf_counter(), _cpu()
                    results = precheck_many(plan, target, regions)
                    times.append(time.perf_counter() - started)
                    cpu.append(_cpu() - cpu0)
                    assert all(r.passed for r in results), [r.render() for r in results]
                med = statistics.median(times)
                print(f"| {target} | {plan.segment.kind.value} | {k} | {med:.2f} | {med / k:.2f} | "
                      f"{statistics.median(cpu):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
