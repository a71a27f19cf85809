"""Evaluation throughput: the simple way versus kernelwright's pool, on a fixed candidate set.

    .venv/bin/python benchmarks/eval_throughput.py --set cpu --device cpu --out docs/results/eval-throughput-cpu.md
    .venv/bin/python benchmarks/eval_throughput.py --set gpu --device cuda --out docs/results/eval-throughput-h200.md
    # or in sittings: --pass pool --save p.json; --pass simple --part 1/2 --save s1.json; ...; then
    .venv/bin/python benchmarks/eval_throughput.py --set gpu --merge p.json s1.json s2.json --out ...

The simple way is what KernelBench's scripts do: one candidate at a time, a fresh process each
(the evaluator's sandbox), compile then evaluate, with an empty build cache every time and no
deduplication. The pool (kernelwright.evaluate.pool) gets the same candidates at once, with its
own empty build cache. Both use the same evaluator settings. Prints candidates per minute for
each and the ratio; exits 1 if any verdict differs between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelwright.evaluate.evaluator import EvalConfig, evaluate_direct  # noqa: E402
from kernelwright.evaluate.pool import EvalPool, PoolConfig, available_cores  # noqa: E402
from kernelwright.records import Task  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

SETS = ROOT / "benchmarks" / "candidates"


@dataclass
class Candidate:
    file: str
    task: Task
    kind: str
    expected: str
    text: str


@dataclass
class Run:
    mode: str
    verdicts: list[str]
    wall_s: float

    def per_minute(self, n: int) -> float:
        return 60.0 * n / self.wall_s if self.wall_s > 0 else float("inf")


def load_set(name: str) -> list[Candidate]:
    folder = SETS / name
    tasks: dict[str, Task] = {}
    out = []
    for entry in json.loads((folder / "manifest.json").read_text()):
        task = tasks.setdefault(entry["task"], load_task(entry["task"]))
        out.append(Candidate(entry["file"], task, entry["kind"], entry["expected"], (folder / entry["file"]).read_text()))
    return out


def run_simple(cands: list[Candidate], cfg: EvalConfig, log) -> Run:
    verdicts = []
    start = time.monotonic()
    for i, c in enumerate(cands):
        cache = tempfile.mkdtemp(prefix="kw-bench-simple-")
        try:
            t0 = time.monotonic()
            r = evaluate_direct(c.task, c.text, replace(cfg, cache_dir=cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        verdicts.append(r.verdict.value)
        log(f"simple {i + 1:>2}/{len(cands)} {c.file:<40} {r.verdict.value:<18} {time.monotonic() - t0:6.1f} s")
    return Run("simple", verdicts, time.monotonic() - start)


def run_pool(cands: list[Candidate], cfg: EvalConfig, pool_cfg: PoolConfig, log) -> tuple[Run, object]:
    cache = tempfile.mkdtemp(prefix="kw-bench-pool-")
    try:
        start = time.monotonic()
        with EvalPool(pool_cfg) as pool:
            futures = [pool.submit(c.task, c.text, replace(cfg, cache_dir=cache)) for c in cands]
            verdicts = []
            for i, (c, f) in enumerate(zip(cands, futures, strict=True)):
                verdicts.append(f.result().verdict.value)
                log(f"pool   {i + 1:>2}/{len(cands)} {c.file:<40} {verdicts[-1]:<18} at {time.monotonic() - start:6.1f} s")
            stats = pool.snapshot()
        return Run("pool", verdicts, time.monotonic() - start), stats
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return f"{available_cores()} cores ({cpu}), GPU: {gpu}, torch {torch.__version__}, Python {platform.python_version()}"


def markdown(args, cands, simple: Run, pool: Run, stats, command: str) -> str:
    n = len(cands)
    ratio = pool.per_minute(n) / simple.per_minute(n)
    same = sum(a == b for a, b in zip(simple.verdicts, pool.verdicts, strict=True))
    lines = [
        f"# Evaluation throughput: set `{args.set}`, device `{args.device}`", "",
        f"Run {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} on {machine()}.", "",
        "```", command, "```", "",
        "| mode | candidates | wall time (s) | candidates / minute |", "|---|---:|---:|---:|",
        f"| simple: one at a time, fresh process and empty build cache each | {n} | {simple.wall_s:.1f} | {simple.per_minute(n):.2f} |",
        f"| kernelwright pool | {n} | {pool.wall_s:.1f} | {pool.per_minute(n):.2f} |", "",
        f"**Ratio (pool / simple): {ratio:.2f}x.** Verdicts identical: {same}/{n}.", "",
        f"Pool: {stats}.", "",
        "| candidate | what it is | expected | simple | pool |", "|---|---|---|---|---|",
    ]
    for c, a, b in zip(cands, simple.verdicts, pool.verdicts, strict=True):
        mark = "" if a == b else " **DIFFERS**"
        exp = c.expected if c.expected == a else f"{c.expected} (got {a})"
        lines.append(f"| {c.file} | {c.kind} | {exp} | {a} | {b}{mark} |")
    return "\n".join(lines) + "\n"


def save_run(path: Path, run: Run, cands: list[Candidate], command: str) -> None:
    """One pass (or part of the simple pass) as JSON, for --merge: a pass that outlasts one sitting
    (the simple way on the H200 is ~40 min) is run in parts and put together afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mode": run.mode, "files": [c.file for c in cands], "verdicts": run.verdicts,
                                "wall_s": run.wall_s, "machine": machine(), "command": command}, indent=1) + "\n")
    print(f"wrote {path}")


def merge_runs(paths: list[Path], cands: list[Candidate]) -> tuple[Run, Run, list[str]]:
    """The simple pass from its parts (wall times add up: it is one-at-a-time by definition) and
    the pool pass (whole: its point is running the set at once)."""
    by_file: dict[str, dict[str, str]] = {"simple": {}, "pool": {}}
    wall = {"simple": 0.0, "pool": 0.0}
    notes = []
    for path in paths:
        data = json.loads(path.read_text())
        mode = data["mode"]
        if mode == "pool" and by_file["pool"]:
            raise SystemExit(f"{path}: a second pool pass; the pool pass is run whole")
        for f, v in zip(data["files"], data["verdicts"], strict=True):
            if f in by_file[mode]:
                raise SystemExit(f"{path}: {f} is in two {mode} parts")
            by_file[mode][f] = v
        wall[mode] += data["wall_s"]
        notes.append(f"{path.name}: {mode}, {len(data['files'])} candidates, {data['wall_s']:.1f} s, {data['machine']}")
    runs = []
    for mode in ("simple", "pool"):
        missing = [c.file for c in cands if c.file not in by_file[mode]]
        if missing:
            raise SystemExit(f"the {mode} pass lacks {len(missing)} candidate(s), e.g. {missing[0]}")
        runs.append(Run(mode, [by_file[mode][c.file] for c in cands], wall[mode]))
    return runs[0], runs[1], notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--out", type=Path, help="write the markdown table here")
    ap.add_argument("--compile-workers", type=int, default=0, help="pool compile slots (0: the pool's default)")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--limit", type=int, default=0, help="only the first N candidates (a quick look)")
    ap.add_argument("--pass", dest="which", choices=["both", "simple", "pool"], default="both",
                    help="run one pass only (with --save), e.g. when both do not fit one sitting")
    ap.add_argument("--part", default="1/1", help="K/N: the simple pass's K-th of N contiguous parts")
    ap.add_argument("--save", type=Path, help="write the pass's verdicts and wall time as JSON (for --merge)")
    ap.add_argument("--merge", type=Path, nargs="+", help="build the table from saved passes instead of running")
    args = ap.parse_args(argv)

    cands = load_set(args.set)
    if args.limit:
        cands = cands[: args.limit]
    command = shlex.join([".venv/bin/python", "benchmarks/eval_throughput.py", *(argv if argv is not None else sys.argv[1:])])
    if args.merge:
        simple, pool, notes = merge_runs(args.merge, cands)
        return report(args, cands, simple, pool, "merged: " + "; ".join(notes), command)

    cfg = EvalConfig(device=args.device, timeout=args.timeout)
    pool_cfg = PoolConfig(devices=[cfg.device if ":" in cfg.device or cfg.device == "cpu" else "cuda:0"],
                          compile_workers=args.compile_workers)
    if cfg.device == "cuda":
        cfg.device = "cuda:0"

    def log(msg: str) -> None:
        print(msg, flush=True)

    log(f"{len(cands)} candidates from benchmarks/candidates/{args.set}, device {cfg.device}")
    if args.which == "simple":
        k, n = (int(x) for x in args.part.split("/"))
        per = -(-len(cands) // n)
        part = cands[(k - 1) * per : k * per]
        run = run_simple(part, cfg, log)
        if args.save:
            save_run(args.save, run, part, command)
        return 0
    if args.which == "pool":
        run, stats = run_pool(cands, cfg, pool_cfg, log)
        log(f"pool: {run.wall_s:.1f} s ({stats})")
        if args.save:
            save_run(args.save, run, cands, command)
        return 0
    simple = run_simple(cands, cfg, log)
    pool, stats = run_pool(cands, cfg, pool_cfg, log)
    return report(args, cands, simple, pool, stats, command)


def report(args, cands: list[Candidate], simple: Run, pool: Run, stats, command: str) -> int:
    n = len(cands)
    differ = [c.file for c, a, b in zip(cands, simple.verdicts, pool.verdicts, strict=True) if a != b]
    print(f"\nsimple: {simple.wall_s:.1f} s, {simple.per_minute(n):.2f} candidates/min")
    print(f"pool:   {pool.wall_s:.1f} s, {pool.per_minute(n):.2f} candidates/min   ({stats})")
    print(f"ratio:  {pool.per_minute(n) / simple.per_minute(n):.2f}x")
    print("verdicts: identical" if not differ else f"verdicts DIFFER for: {', '.join(differ)}")
    if args.out:
        # run from the repository root
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown(args, cands, simple, pool, stats, command))
        print(f"wrote {args.out}")
    return 1 if differ else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
