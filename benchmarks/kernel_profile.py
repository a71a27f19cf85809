"""Hardware counters of the oracle skeletons beside torch.compile's kernels, through Nsight Compute:
where a skeleton that trails torch.compile spends its time (DRAM and L2 bytes, instructions,
registers and occupancy), which device time alone cannot say.

    python benchmarks/kernel_profile.py --tasks builtin:1:8 --target cuda --target triton

runs itself under `ncu` (with `--child`): each task's torch.compile module and its skeletons with
the oracle region at each launch variant, called twice unprofiled (builds, autotuning) and once
inside an NVTX range named for it, which ncu profiles (`--clock-control none`: the device's clocks
are left alone). Prints one table row per profiled kernel. Needs ncu on PATH and a GPU that lets
it read the counters (the device tool's Firecracker machines; see its H200.md).
"""

from __future__ import annotations

import argparse
import copy
import csv
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# what each column is, in ncu's metric names
METRICS = {
    "us": "gpu__time_duration.sum",
    "DRAM MB": "dram__bytes.sum",
    "L2 MB": "lts__t_bytes.sum",
    "DRAM %peak": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "Minst": "smsp__inst_executed.sum",
    "regs": "launch__registers_per_thread",
    "smem KB": "launch__shared_mem_per_block_dynamic",
    "block": "launch__block_size",
    "grid": "launch__grid_size",
    "occ limit": "launch__occupancy_limit_registers",
    "occ %": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
SCALE = {"DRAM MB": 1e-6, "L2 MB": 1e-6, "Minst": 1e-6, "us": 1e-3, "smem KB": 1 / 1024}


def _programs(plan, target: str) -> dict[str, str]:
    """label -> the skeleton with the oracle region, at its default launch and each variant."""
    from device_time import launch_programs
    from kernelwright.scaffold import write
    from kernelwright.scaffold.oracle import region

    tp = plan.for_target(target)
    if not tp.available or tp.segment is None:
        return {}
    sc = write(plan, target)
    return {f"{target} {label}": text
            for label, text in launch_programs(tp.segment, target, sc.program_with(region(sc))).items()}


def run_child(tasks: str, targets: list[str]) -> int:
    import torch

    from device_time import _import_program, reference
    from kernelwright.measure.draw import SEED, seed_all
    from kernelwright.scaffold import plan_tasks
    from kernelwright.tasks import load_tasks

    os.environ["KERNELWRIGHT_SIZE"] = "full"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    chosen = load_tasks(tasks)
    with tempfile.TemporaryDirectory(prefix="kw-profile-") as tmp, torch.no_grad():
        for n, (task, plan) in enumerate(zip(chosen, plan_tasks(chosen, "full", device="cuda"))):
            init, model, inputs = reference(task, dev, f"kw_pr_ref_{n}")
            sides = {"torch.compile": torch.compile(model)}
            for target in targets:
                for label, text in _programs(plan, target).items():
                    mod = _import_program(text, Path(tmp), f"kw_pr_{n}_{len(sides)}")
                    seed_all(SEED)
                    sides[label] = mod.ModelNew(*copy.deepcopy(init)).to(dev).eval()
            short = task.id.split("/")[-1][:14]
            for label, fn in sides.items():
                fn(*inputs)
                fn(*inputs)
                torch.cuda.synchronize()
                torch.cuda.profiler.start()  # ncu runs with --profile-from-start off
                torch.cuda.nvtx.range_push(f"{short} {label}")
                fn(*inputs)
                torch.cuda.nvtx.range_pop()
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
            print(f"profiled {task.id}: {len(sides)} sides", file=sys.stderr, flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin:1:8")
    ap.add_argument("--target", action="append", choices=["cuda", "triton"])
    ap.add_argument("--child", action="store_true", help="run the kernels (under ncu)")
    args = ap.parse_args()
    targets = args.target or ["cuda", "triton"]
    if args.child:
        return run_child(args.tasks, targets)
    with tempfile.TemporaryDirectory(prefix="kw-ncu-") as tmp:
        rep = Path(tmp) / "profile"
        cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--nvtx",
               "--metrics", ",".join(METRICS.values()), "-o", str(rep),
               sys.executable, __file__, "--child", "--tasks", args.tasks] + [f"--target={t}" for t in targets]
        subprocess.run(cmd, check=True)
        tables = [_rows(subprocess.run(["ncu", "-i", f"{rep}.ncu-rep", "--csv", "--page", "raw", "--print-units",
                                        "base"] + extra, check=True, capture_output=True, text=True).stdout)
                  for extra in ([], ["--print-nvtx-rename", "kernel"])]
    print("| side (NVTX range) | kernel | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for r, named in zip(*tables):
        name = f"{named.get('Kernel Name', '')[:40]} | {r.get('Kernel Name', '')[:50]}"
        cells = []
        for col, metric in METRICS.items():
            v = r.get(metric, "")
            try:
                x = float(v.replace(",", "")) * SCALE.get(col, 1.0)
                cells.append(f"{x:.3g}" if col not in ("regs", "block", "grid", "occ limit") else f"{x:.0f}")
            except ValueError:
                cells.append(v)
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


def _rows(raw: str) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(raw[raw.index('"ID"'):])))
    return [r for r in rows if r["ID"].isdigit()]  # the first row may hold units


if __name__ == "__main__":
    sys.exit(main())
