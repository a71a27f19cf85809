"""The ceiling of the scaffold approach: each skeleton with a correct region (the test oracle's),
timed against eager PyTorch and torch.compile by the real evaluator. Prints a table.

No model is involved: this is the best any model can reach through the scaffold on this device
(issue #20). Builds run first, in parallel and untimed (--jobs); the timed evaluations then run one
at a time, each finding its extension in the build cache, so no build competes with a clock.

    python benchmarks/skeleton_speed.py --device cuda --target cuda --target triton --out table.md
    python benchmarks/skeleton_speed.py --device cpu --target cpp --size small

`of copy bw` is the timing's floor (the call's input and output bytes at the device's copy
bandwidth) over the skeleton's median: 1.0 is a kernel that only moves its bytes once, at the speed
of a copy. The median is the protocol's whole call (the inputs copied in, the outputs copied out),
so `net x eager` / `net x compile` take the protocol's own cost per call (its null calls) off both
sides: what the kernels alone compare as.

`--device-time` (a GPU) times the kernels themselves instead, in this process (device_time.py: CUDA
events, L2 flushed, the median), every launch variant too, with each side's error against float64:
`of copy bw` is then the kernel's bytes over its time at the copy bandwidth measured in the same run.

    python benchmarks/skeleton_speed.py --device cuda --target cuda --target triton --device-time --jobs 12
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # device_time, beside this file

from kernelwright.device import resolve_size  # noqa: E402
from kernelwright.evaluate import EvalRun, evaluate  # noqa: E402
from kernelwright.scaffold import launch_variants, plan_tasks, with_launch, write  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--target", action="append", choices=["cuda", "triton", "cpp"])
    ap.add_argument("--size", default="auto")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2, help="parallel untimed builds before the timed runs")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--variants", action="store_true",
                    help="also time each correct skeleton under its other launch settings (speed search)")
    ap.add_argument("--device-time", action="store_true",
                    help="time the kernels in this process (CUDA events), not through the judge's protocol")
    args = ap.parse_args()
    targets = args.target or (["cpp"] if args.device == "cpu" else ["cuda", "triton"])
    size = resolve_size(args.device, args.size)
    started = time.monotonic()
    tasks = load_tasks(args.tasks)
    plans = zip(tasks, plan_tasks(tasks, size, device=args.device))  # one planning child for all
    # per target: Triton takes a GEMM into its kernel where the plan has one (plan.gemm)
    jobs = [(t, target, p.for_target(target), write(p, target)) for t, p in plans for target in targets
            if p.for_target(target).available]
    programs = [(t, target, p, sc.program_with(region(sc))) for t, target, p, sc in jobs]
    print(f"{len(programs)} skeletons with their oracle regions; building", flush=True)
    if args.device_time:
        return device_time_table(args, size, programs, started)
    untimed = EvalRun.of(device=args.device, size=size, time=False, trials=1, timeout=600.0)
    with ThreadPoolExecutor(args.jobs) as pool:
        for (t, target, _, _), r in zip(programs, pool.map(lambda j: evaluate(j[0], j[3], untimed), programs)):
            print(f"built {t.id} {target}: {r.verdict.value}" + (f" ({r.error[:300]})" if r.error else ""), flush=True)
    timed = EvalRun.of(device=args.device, size=size, iters=args.iters, compile_baseline=True, timeout=600.0)
    # launch variants: no compile baseline of their own (torch.compile is the default's, chained)
    quick = EvalRun.of(device=args.device, size=size, iters=args.iters, timeout=600.0)
    rows = []
    for t, target, p, program in programs:
        r = evaluate(t, program, timed)
        floor = r.timing.floor_ms if r.timing else None
        row = [t.id, target, p.segment.kind.value if p.segment else "-", r.verdict.value, r.ref_runtime_ms,
               r.compile_runtime_ms, r.runtime_ms, _ratio(r.ref_runtime_ms, r.runtime_ms),
               _ratio(r.compile_runtime_ms, r.runtime_ms), _ratio(floor, r.runtime_ms), "default", None,
               r.net_speedup, r.net_speedup_vs_compile]
        print(f"{t.id} {target}: {r.verdict.value}, {_fmt(row[7])}x eager, {_fmt(row[8])}x torch.compile"
              + (f" ({r.compile_baseline_error})" if r.compile_baseline_error else ""), flush=True)
        best = row[7] if r.verdict.value == "correct" else None
        for knobs in (launch_variants(p.segment, target) if args.variants and best else []):
            v = evaluate(t, with_launch(program, knobs), quick)
            x = _ratio(v.ref_runtime_ms, v.runtime_ms) if v.verdict.value == "correct" else None
            print(f"    {knobs}: {v.verdict.value}, {_fmt(x)}x eager", flush=True)
            if x and x > best:  # the fastest correct launch
                best, row[10] = x, ", ".join(f"{k}={val}" for k, val in knobs.items())
        if args.variants and best:
            row[11] = best
        rows.append(row)
        _write(args, rows, started)
    return 0 if all(r[3] == "correct" for r in rows) else 1


def _write(args, rows: list, started: float) -> None:
    """The table so far (written after every row: a run cut short still leaves what it measured)."""
    variants = args.variants
    head = ["task", "target", "segment", "verdict", "eager ms", "compile ms", "skeleton ms", "x eager", "x compile",
            "of copy bw", "net x eager", "net x compile"] + (
                ["best launch", "best x eager", "best x compile"] if variants else [])
    lines = [f"# Skeleton speed with the oracle's regions ({args.device}, size {resolve_size(args.device, args.size)})",
             "", f"Machine: {platform.machine()}, {len(rows)} rows in {time.monotonic() - started:.0f} s, "
             f"{args.iters} timed calls each.", "", "```",
             " ".join(["python benchmarks/skeleton_speed.py", *sys.argv[1:]]),
             "```", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r[0], r[1], r[2], r[3], _fmt(r[4], 4), _fmt(r[5], 4), _fmt(r[6], 4), _fmt(r[7]), _fmt(r[8]),
                 _fmt(r[9], 2), _fmt(r[12]), _fmt(r[13])]
        if variants:
            # x compile of the best launch: its ratio to eager times the default's eager / compile
            chained = r[11] * r[4] / r[5] if r[11] and r[4] and r[5] else None
            cells += [r[10], _fmt(r[11]), _fmt(chained)]
        lines.append("| " + " | ".join(cells) + " |")
    correct = [r for r in rows if r[3] == "correct"]
    vs_eager = [r[7] for r in correct if r[7]]
    vs_compile = [r[8] for r in correct if r[8]]
    net = [r[13] for r in correct if r[13]]
    lines += ["", f"{len(correct)} of {len(rows)} correct. Geometric mean: {_fmt(_geomean(vs_eager))}x eager, "
                  f"{_fmt(_geomean(vs_compile))}x torch.compile; at or above torch.compile: "
                  f"{sum(v >= 1.0 for v in vs_compile)} of {len(vs_compile)}. Net of the timing protocol's own "
                  f"cost per call (`net`: its null calls' median off both sides): geometric mean "
                  f"{_fmt(_geomean(net))}x torch.compile, at or above it {sum(v >= 1.0 for v in net)} of {len(net)}."]
    if variants:
        best = [r[11] * r[4] / r[5] for r in correct if r[11] and r[4] and r[5]]
        lines.append(f"With each row's best launch: geometric mean {_fmt(_geomean(best))}x torch.compile; at or above "
                     f"torch.compile: {sum(v >= 1.0 for v in best)} of {len(best)}.")
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


def _prebuild(program: str, name: str) -> str:
    """Import the program in a worker process: its load_inline builds into the shared
    TORCH_EXTENSIONS_DIR, where the timing process then finds it."""
    import tempfile

    from device_time import _import_program

    try:
        with tempfile.TemporaryDirectory() as tmp:
            _import_program(program, Path(tmp), name)
        return "built"
    except Exception as e:  # noqa: BLE001 - the timing pass reports it again
        return f"{type(e).__name__}: {str(e)[:200]}"


def device_time_table(args, size: str, programs: list, started: float) -> int:
    """The oracle table from device time (device_time.py), every launch variant timed."""
    import multiprocessing
    import os
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    from device_time import copy_bandwidth, launch_programs, measure

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", tempfile.mkdtemp(prefix="kw-skel-ext-"))
    os.environ["KERNELWRIGHT_SIZE"] = size
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        names = [f"kw_build_{i}" for i in range(len(programs))]
        for (t, target, _, _), said in zip(programs, pool.map(_prebuild, [p[3] for p in programs], names)):
            print(f"built {t.id} {target}: {said}", flush=True)
    bandwidth = copy_bandwidth(args.device)
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    by_task: dict[str, list] = {}
    for job in programs:
        by_task.setdefault(job[0].id, []).append(job)
    rows = []
    for jobs in by_task.values():  # the reference and its torch.compile once for every target
        timed = {}
        for _, target, p, program in jobs:
            timed.update({(target, label): text for label, text in launch_programs(p.segment, target, program).items()})
        t = jobs[0][0]
        labels = list(timed)
        try:
            times, got = measure(t, {f"{tg}: {lb}": timed[(tg, lb)] for tg, lb in labels}, size, device=args.device)
        except Exception as e:  # noqa: BLE001 - the reference itself failed: one line says so
            print(f"{t.id}: {type(e).__name__}: {e}", flush=True)
            continue
        for _, target, p, _ in jobs:
            mine = {lb: got[f"{tg}: {lb}"] for tg, lb in labels if tg == target}
            default = mine["default"]
            best_label, best_ms = "default", default.program_ms
            for label, v in mine.items():
                if v.program_ms and (best_ms is None or v.program_ms < best_ms):
                    best_label, best_ms = label, v.program_ms
            rows.append((t.id, target, p.segment.kind.value if p.segment else "-", times, default, best_label,
                         best_ms))
            print(f"{t.id} {target}: eager {_fmt(times.eager_ms, 4)} compile {_fmt(times.compile_ms, 4)} "
                  f"skeleton {_fmt(default.program_ms, 4)} best {best_label} {_fmt(best_ms, 4)} ms"
                  + "".join(f" ({x.error})" for x in (times, *mine.values()) if x.error), flush=True)
        _write_device(args, size, rows, bandwidth, started)
    return 0 if rows and all(r[4].program_ms for r in rows) else 1


def _write_device(args, size: str, rows: list, bandwidth: float, started: float) -> None:
    head = ["task", "target", "segment", "bound", "eager ms", "compile ms", "skeleton ms", "best launch", "best ms",
            "x eager", "x compile", "of copy bw", "compile of copy bw", "err skeleton", "err eager"]
    lines = [f"# Skeleton speed with the oracle's regions, device time ({args.device}, size {size})", "",
             f"Machine: {platform.machine()}, {len(rows)} rows in {time.monotonic() - started:.0f} s; copy bandwidth "
             f"{bandwidth / 1e12:.2f} TB/s (read + write). Each time is do_bench's median (CUDA events, L2 flushed); "
             "the skeleton's columns are its best launch; errors are max abs diff from float64.", "", "```",
             " ".join(["python benchmarks/skeleton_speed.py", *sys.argv[1:]]), "```", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    vs_compile, memory, gemm = [], [], []
    for tid, target, kind, d, default, label, best in rows:
        bw = d.bytes / (best * 1e-3) / bandwidth if best else None
        cbw = d.bytes / (d.compile_ms * 1e-3) / bandwidth if d.compile_ms else None
        xc = _ratio(d.compile_ms, best)
        if xc:
            vs_compile.append(xc)
        if d.library_flops == 0 and d.bound == "memory" and bw:
            memory.append(bw)
        if kind == "gemm" and xc:
            gemm.append(xc)
        lines.append("| " + " | ".join([
            tid, target, kind, d.bound or "-", _fmt(d.eager_ms, 4), _fmt(d.compile_ms, 4),
            _fmt(default.program_ms, 4), label, _fmt(best, 4), _fmt(_ratio(d.eager_ms, best)), _fmt(xc), _fmt(bw, 2),
            _fmt(cbw, 2), f"{default.errors['program']:.2g}" if "program" in default.errors else "-",
            f"{d.errors['eager']:.2g}" if "eager" in d.errors else "-"]) + " |")
    lines += ["", f"At or above torch.compile: {sum(v >= 1.0 for v in vs_compile)} of {len(vs_compile)} "
                  f"(geometric mean {_fmt(_geomean(vs_compile))}x). Memory-bound rows with no GEMM/conv at 70% of copy "
                  f"bandwidth or more: {sum(v >= 0.7 for v in memory)} of {len(memory)}. GEMM skeletons: geometric "
                  f"mean {_fmt(_geomean(gemm))}x torch.compile over {len(gemm)}."]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    sys.exit(main())
