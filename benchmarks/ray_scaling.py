"""A study's evaluations spread over one host's GPUs through the ray executor (issue #21).

The built-in suite's scaffolds with the oracle's region and with a wrong one (the same candidates
in every run), as study cells (one cell a task and target, its two candidates its attempts),
evaluated through a Ray cluster started for each run: with one GPU, then with all of them. In the
run on all GPUs the Ray workers evaluating on one GPU are killed once some evaluations are done
(`--kill`): Ray runs their tasks again elsewhere, and the study log must still hold every cell and
attempt exactly once. Prints, per run, wall time, candidates a minute and the evaluations each GPU
returned, and whether every verdict equals the one-GPU run's; exits 1 where a verdict differs or a
cell or attempt is missing or doubled, or where an oracle region is not judged correct or a wrong
one is.

    python benchmarks/ray_scaling.py --device cuda --target cuda --target triton --kill --out docs/results/scaling.md
    python benchmarks/ray_scaling.py --device cpu --target cpp --units 1 --units 2 --kill  # CPUs for GPUs

On a CPU the "units" are Ray CPUs (one evaluation each); on GPUs, GPUs (`--slots` evaluations each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.device import resolve_size  # noqa: E402
from kernelwright.evaluate import EvalRun  # noqa: E402
from kernelwright.executors.ray import RayExecutor, host_gpus  # noqa: E402
from kernelwright.scaffold import plan_task, write  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.study.log import ATTEMPTS, CELLS  # noqa: E402
from kernelwright.study.runner import CellJob, DeviceSlots, fixed_cell, run_jobs  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402


def candidates(tasks: str, device: str, targets: list[str], size: str) -> list[tuple]:
    """(task, target, [(variant, program)]) for every task with a scaffold in a target."""
    loaded = load_tasks(tasks)
    with ThreadPoolExecutor(4) as pool:
        plans = list(pool.map(lambda t: plan_task(t, size, device=device), loaded))
    out = []
    for t, p in zip(loaded, plans):
        for target in targets:
            if p.for_target(target).available:
                sc = write(p, target)
                out.append((t, target, [("correct", sc.program_with(region(sc))),
                                        ("wrong", sc.program_with(region(sc, wrong=True)))]))
    return out


def jobs_for(cands: list[tuple], cfg: EvalRun) -> list[CellJob]:
    return [fixed_cell(f"scaling/{target}/{t.id}", "scaling", t, programs, cfg) for t, target, programs in cands]


def _evaluating_workers(gpu: str | None) -> list[int]:
    """Ray workers running an evaluation now (their process title), on GPU `gpu` where given."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if b"ray::_evaluate" not in (proc / "cmdline").read_bytes():
                continue
            env = dict(e.split(b"=", 1) for e in (proc / "environ").read_bytes().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if gpu is None or env.get(b"CUDA_VISIBLE_DEVICES", b"").decode() == gpu:
            found.append(int(proc.name))
    return found


def killer(executor: RayExecutor, after: int, gpu: str | None, killed: list[int], stop: threading.Event) -> None:
    """Once `after` evaluations are back, SIGKILL the workers evaluating on `gpu` (any one on a CPU)."""
    while not stop.is_set() and executor.stats.evaluated < after:
        time.sleep(0.2)
    while not stop.is_set() and not killed:
        pids = _evaluating_workers(gpu)
        for pid in pids if gpu is not None else pids[:1]:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def one_run(units: int, args, cands: list[tuple], cfg: EvalRun, kill: bool) -> dict:
    gpu = args.device != "cpu"
    options = {"gpus": host_gpus()[:units], "slots_per_gpu": args.slots} if gpu else {"cpus": units}
    executor = RayExecutor(max_retries=3, **options)
    folder = Path(tempfile.mkdtemp(prefix=f"kw-scaling-{units}-"))
    cfg = cfg.but(cache_dir=str(folder / "cache"))  # every run builds from nothing: builds are what spread
    killed: list[int] = []
    stop = threading.Event()
    n = sum(len(p) for _, _, p in cands)
    victim = (host_gpus()[:units] or [None])[-1] if gpu else None
    watcher = threading.Thread(target=killer, args=(executor, n // 4, victim, killed, stop), daemon=True)
    try:
        print(executor.layout(), flush=True)
        if kill:
            watcher.start()
        started = time.monotonic()
        summary = run_jobs(jobs_for(cands, cfg), folder, DeviceSlots([args.device]), 2 * units * args.slots + 2,
                           executor)
        wall = time.monotonic() - started
    finally:
        stop.set()
        executor.close()
    cells = [json.loads(line) for line in (folder / CELLS).read_text().splitlines()]
    attempts = [json.loads(line) for line in (folder / ATTEMPTS).read_text().splitlines()]
    ids = [a["id"] for a in attempts]
    return {"units": units, "wall_s": wall, "candidates": n, "failed_cells": summary.failed,
            "cells_once": sorted(c["key"] for c in cells) == sorted(f"scaling/{t}/{task.id}" for task, t, _ in cands),
            "attempts_once": len(ids) == len(set(ids)) == n, "killed": len(killed), "victim": victim,
            "verdicts": {a["id"]: a["eval"]["verdict"] for a in attempts},
            # the oracle's region correct and the wrong one not (the label is the attempt's response)
            "as_expected": all((a["eval"]["verdict"] == "correct") == (a["raw_response"] == "correct")
                               for a in attempts),
            "by_unit": dict(sorted(executor.stats.by_gpu.items() if gpu else executor.stats.by_node.items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (all the host's GPUs)")
    ap.add_argument("--target", action="append", choices=["cuda", "triton", "cpp"])
    ap.add_argument("--units", type=int, action="append",
                    help="GPUs (or CPUs) per run, repeatable; default 1 and all the host's GPUs (on a CPU: 1 and 2)")
    ap.add_argument("--slots", type=int, default=1, help="evaluations at once per GPU")
    ap.add_argument("--kill", action="store_true", help="in the last run, kill the workers on one GPU mid-run")
    ap.add_argument("--size", default="auto")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    targets = args.target or (["cpp"] if args.device == "cpu" else ["cuda", "triton"])
    units = args.units or ([1, len(host_gpus())] if args.device != "cpu" else [1, 2])
    size = resolve_size(args.device, args.size)
    cfg = EvalRun.of(device=args.device, trials=3, timeout=600.0, size=size)
    cands = candidates(args.tasks, args.device, targets, size)
    print(f"{len(cands)} cells, {sum(len(p) for _, _, p in cands)} candidates", flush=True)
    runs = [one_run(u, args, cands, cfg, args.kill and i == len(units) - 1) for i, u in enumerate(units)]
    base = runs[0]["verdicts"]
    unit = "GPU" if args.device != "cpu" else "CPU"
    lines = [f"| {unit}s | candidates | wall s | candidates / min | x the first run | verdicts = first run | "
             f"oracle correct, wrong not | cells once | attempts once | workers killed | "
             f"evaluations per {unit if unit == 'GPU' else 'node'} |", "|---" * 11 + "|"]
    bad = 0
    for r in runs:
        same = r["verdicts"] == base
        bad += (not same) + (not r["as_expected"]) + (not r["cells_once"]) + (not r["attempts_once"]) + r["failed_cells"]
        per_min = 60 * r["candidates"] / r["wall_s"]
        spread = ", ".join(f"{k.rsplit('/', 1)[-1] if '/' in k else k[:8]}: {v}" for k, v in r["by_unit"].items())
        killed = f"{r['killed']} (on {r['victim']})" if r["killed"] and r["victim"] else str(r["killed"])
        lines.append(f"| {r['units']} | {r['candidates']} | {r['wall_s']:.0f} | {per_min:.1f} | "
                     f"{runs[0]['wall_s'] / r['wall_s']:.2f} | {'yes' if same else 'NO'} | "
                     f"{'yes' if r['as_expected'] else 'NO'} | "
                     f"{'yes' if r['cells_once'] else 'NO'} | {'yes' if r['attempts_once'] else 'NO'} | {killed} | {spread} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        cmd = "python benchmarks/ray_scaling.py " + " ".join(sys.argv[1:])
        args.out.write_text(f"# Ray scaling ({args.device}, {', '.join(targets)}, size {size})\n\nMachine: "
                            f"{platform.machine()}, {os.cpu_count()} cores.\n\n```\n{cmd}\n```\n\n{table}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
