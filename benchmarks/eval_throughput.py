"""Evaluation throughput: the simple way versus kernelwright's pool, on a fixed candidate set.

    .venv/bin/python benchmarks/eval_throughput.py --set cpu --device cpu --out docs/results/eval-throughput-cpu.md
    .venv/bin/python benchmarks/eval_throughput.py --set gpu --device cuda --out docs/results/eval-throughput-h200.md
    # or in sittings: --pass pool --save p.json; --pass simple --save s.json (stop it any time and run
    # the same command again later: it continues); then
    .venv/bin/python benchmarks/eval_throughput.py --set gpu --merge p.json s.json --out ...

The simple way is what KernelBench's scripts do: one candidate at a time, a fresh process each
(the evaluator's sandbox), compile then evaluate, with an empty build cache every time and no
deduplication. The pool (kernelwright.executors.pool) gets the same candidates at once, with its
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
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelwright.device import available_cores
from kernelwright.evaluate.evaluator import EvalRun, evaluate_direct  # noqa: E402
from kernelwright.executors.pool import EvalPool, PoolConfig
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


def run_simple(cands: list[Candidate], cfg: EvalRun, log, on_each=None) -> Run:
    """One at a time. The pass's wall time is the sum of the candidates' times (nothing overlaps
    by definition), so `on_each(file, verdict, seconds)` lets a caller save after every candidate
    and a pass cut short be continued later (--save)."""
    verdicts = []
    total = 0.0
    for i, c in enumerate(cands):
        cache = tempfile.mkdtemp(prefix="kw-bench-simple-")
        t0 = time.monotonic()
        try:
            r = evaluate_direct(c.task, c.text, cfg.but(cache_dir=cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        took = time.monotonic() - t0
        total += took
        verdicts.append(r.verdict.value)
        log(f"simple {i + 1:>2}/{len(cands)} {c.file:<40} {r.verdict.value:<18} {took:6.1f} s  {stage_times(r)}")
        if on_each is not None:
            on_each(c.file, r.verdict.value, took)
    return Run("simple", verdicts, total)


def stage_times(result) -> str:
    """Where a candidate's time went, e.g. `prebuild 52.1 setup 0.9 correctness 2.3 timing 2.9`."""
    return " ".join(f"{st.name} {st.seconds:.1f}" for st in result.stages if st.seconds >= 0.05)


def run_pool(cands: list[Candidate], cfg: EvalRun, pool_cfg: PoolConfig, log) -> tuple[Run, object]:
    """All candidates submitted at once; each line is logged when that candidate is decided (not in
    submission order), with its stages' times, so a slow stretch shows where it went."""
    cache = tempfile.mkdtemp(prefix="kw-bench-pool-")
    try:
        start = time.monotonic()
        done_lock = threading.Lock()
        done = [0]

        def report(c: Candidate, f) -> None:
            with done_lock:
                done[0] += 1
                n = done[0]
            if f.cancelled():
                return
            e = f.exception()
            what = f"{type(e).__name__}: {e}" if e is not None else f"{f.result().verdict.value:<18} {stage_times(f.result())}"
            log(f"pool   {n:>2}/{len(cands)} {c.file:<40} at {time.monotonic() - start:6.1f} s  {what}")

        with EvalPool(pool_cfg) as pool:
            futures = [pool.submit(c.task, c.text, cfg.but(cache_dir=cache)) for c in cands]
            for c, f in zip(cands, futures, strict=True):
                f.add_done_callback(lambda f, c=c: report(c, f))
            verdicts = [f.result().verdict.value for f in futures]
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


def markdown(args, cands, simple: Run, pool: Run, stats, command: str, notes: list[str] | None = None,
             host: str | None = None) -> str:
    n = len(cands)
    ratio = pool.per_minute(n) / simple.per_minute(n)
    same = sum(a == b for a, b in zip(simple.verdicts, pool.verdicts, strict=True))
    lines = [
        f"# Evaluation throughput: set `{args.set}`, device `{args.device}`", "",
        # a merged table is written where the passes were copied to, not where they ran
        (f"Pool pass run on {host}." if notes else
         f"Run {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} on {machine()}."), "",
        "```", command, "```", "",
        "| mode | candidates | wall time (s) | candidates / minute |", "|---|---:|---:|---:|",
        f"| simple: one at a time, fresh process and empty build cache each | {n} | {simple.wall_s:.1f} | {simple.per_minute(n):.2f} |",
        f"| kernelwright pool | {n} | {pool.wall_s:.1f} | {pool.per_minute(n):.2f} |", "",
        f"**Ratio (pool / simple): {ratio:.2f}x.** Verdicts identical: {same}/{n}.", "",
        f"Pool: {stats}.", "",
        *([f"Merged from saved passes: {'; '.join(notes)}.", ""] if notes else []),
        "| candidate | what it is | expected | simple | pool |", "|---|---|---|---|---|",
    ]
    for c, a, b in zip(cands, simple.verdicts, pool.verdicts, strict=True):
        mark = "" if a == b else " **DIFFERS**"
        exp = c.expected if c.expected == a else f"{c.expected} (got {a})"
        lines.append(f"| {c.file} | {c.kind} | {exp} | {a} | {b}{mark} |")
    return "\n".join(lines) + "\n"


def save_run(path: Path, run: Run, cands: list[Candidate], command: str, seconds: list[float] | None = None,
             host: str | None = None, stats: object = None) -> None:
    """A pass (or the part of the simple pass run so far) as JSON, for --merge and for continuing:
    the simple way on the H200 is ~40 min, more than one sitting of device time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"mode": run.mode, "files": [c.file for c in cands], "verdicts": run.verdicts,
            "wall_s": run.wall_s, "machine": host or machine(), "command": command}
    if seconds is not None:
        data["seconds"] = seconds
    if stats is not None:
        data["pool"] = str(stats)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)  # a pass killed mid-write keeps its previous save


def simple_resumed(path: Path, cands: list[Candidate], cfg: EvalRun, command: str, log) -> Run:
    """The simple pass, saved to `path` after every candidate; candidates already in `path` (from
    an earlier sitting, on this kind of machine) are not run again."""
    files: list[str] = []
    verdicts: list[str] = []
    seconds: list[float] = []
    host = machine()
    if path.is_file():
        data = json.loads(path.read_text())
        if data["mode"] != "simple":
            raise SystemExit(f"{path}: holds a {data['mode']} pass, not the simple one")
        files, verdicts = list(data["files"]), list(data["verdicts"])
        seconds = list(data.get("seconds") or [])
        # sittings may land on different hosts of one kind: the record names every one of them
        if host not in data["machine"].split(" | "):
            host = f"{data['machine']} | {host}"
        else:
            host = data["machine"]
        log(f"continuing {path}: {len(files)} candidates done, {sum(seconds):.1f} s")
    by_name = {c.file: c for c in cands}
    todo = [c for c in cands if c.file not in set(files)]

    def save_one(file: str, verdict: str, took: float) -> None:
        files.append(file)
        verdicts.append(verdict)
        seconds.append(took)
        save_run(path, Run("simple", verdicts, sum(seconds)), [by_name[f] for f in files], command, seconds, host)

    run_simple(todo, cfg, log, on_each=save_one)
    return Run("simple", verdicts, sum(seconds))


@dataclass
class Merged:
    """Saved passes put together: the two runs, and what the pool pass's save says of itself."""
    simple: Run
    pool: Run
    stats: str  # the pool's counters
    host: str  # where the pool pass ran
    device: str  # the --device it ran with
    notes: list[str]  # one line per save


def merge_runs(paths: list[Path], cands: list[Candidate]) -> Merged:
    """The simple pass from its parts (wall times add up: it is one-at-a-time by definition) and
    the pool pass (whole: its point is running the set at once)."""
    by_file: dict[str, dict[str, str]] = {"simple": {}, "pool": {}}
    wall = {"simple": 0.0, "pool": 0.0}
    notes = []
    stats, host, device = "not recorded", "unknown", "cpu"
    for path in paths:
        data = json.loads(path.read_text())
        mode = data["mode"]
        if mode == "pool":
            words = shlex.split(data["command"])
            device = words[words.index("--device") + 1] if "--device" in words else device
            stats, host = data.get("pool", stats), data["machine"]
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
    return Merged(runs[0], runs[1], stats, host, device, notes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--device", help="cpu (default), cuda or cuda:N; with --merge, the pool pass's own")
    ap.add_argument("--out", type=Path, help="write the markdown table here")
    ap.add_argument("--compile-workers", type=int, default=0, help="pool compile slots (0: the pool's default)")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--limit", type=int, default=0, help="only the first N candidates (a quick look)")
    ap.add_argument("--pass", dest="which", choices=["both", "simple", "pool"], default="both",
                    help="run one pass only (with --save), e.g. when both do not fit one sitting")
    ap.add_argument("--save", type=Path, help="write the pass's verdicts and times as JSON (for --merge); "
                    "the simple pass saves after every candidate and continues an existing file")
    ap.add_argument("--part", default="1/1", metavar="K/N",
                    help="simple pass only: every N-th candidate from the K-th (parts are saved apart and merged; "
                    "their times add up, so parts may run side by side on a machine with cores and a GPU to spare)")
    ap.add_argument("--merge", type=Path, nargs="+", help="build the table from saved passes instead of running")
    args = ap.parse_args(argv)

    cands = load_set(args.set)
    if args.limit:
        cands = cands[: args.limit]
    part, parts = parse_part(args.part)
    if parts > 1 and args.which != "simple":
        ap.error("--part is for --pass simple (the pool pass is run whole)")
    command = shlex.join([".venv/bin/python", "benchmarks/eval_throughput.py", *(argv if argv is not None else sys.argv[1:])])
    if args.merge:
        merged = merge_runs(args.merge, cands)
        args.device = args.device or merged.device
        return report(args, cands, merged.simple, merged.pool, merged.stats, command, merged.notes, merged.host)

    args.device = args.device or "cpu"
    cfg = EvalRun.of(device=args.device, timeout=args.timeout)
    pool_cfg = PoolConfig(devices=[cfg.device if ":" in cfg.device or cfg.device == "cpu" else "cuda:0"],
                          compile_workers=args.compile_workers)
    if cfg.device == "cuda":
        cfg = cfg.but(device="cuda:0")

    def log(msg: str) -> None:
        print(msg, flush=True)

    log(f"{len(cands)} candidates from benchmarks/candidates/{args.set}, device {cfg.device}")
    if args.which == "simple":
        cands = cands[part - 1 :: parts]
        if parts > 1:
            log(f"part {part}/{parts}: {len(cands)} candidates")
        if args.save:
            run = simple_resumed(args.save, cands, cfg, command, log)
            log(f"simple: {len(run.verdicts)}/{len(cands)} candidates, {run.wall_s:.1f} s, saved in {args.save}")
        else:
            run_simple(cands, cfg, log)
        return 0
    if args.which == "pool":
        run, stats = run_pool(cands, cfg, pool_cfg, log)
        log(f"pool: {run.wall_s:.1f} s ({stats})")
        if args.save:
            save_run(args.save, run, cands, command, stats=stats)
        return 0
    simple = run_simple(cands, cfg, log)
    pool, stats = run_pool(cands, cfg, pool_cfg, log)
    return report(args, cands, simple, pool, stats, command)


def parse_part(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--part {text}: expected K/N, e.g. 2/3") from None
    if not 1 <= k <= n:
        raise SystemExit(f"--part {text}: K must be between 1 and N")
    return k, n


def report(args, cands: list[Candidate], simple: Run, pool: Run, stats, command: str,
           notes: list[str] | None = None, host: str | None = None) -> int:
    n = len(cands)
    differ = [c.file for c, a, b in zip(cands, simple.verdicts, pool.verdicts, strict=True) if a != b]
    print(f"\nsimple: {simple.wall_s:.1f} s, {simple.per_minute(n):.2f} candidates/min")
    print(f"pool:   {pool.wall_s:.1f} s, {pool.per_minute(n):.2f} candidates/min   ({stats})")
    print(f"ratio:  {pool.per_minute(n) / simple.per_minute(n):.2f}x")
    print("verdicts: identical" if not differ else f"verdicts DIFFER for: {', '.join(differ)}")
    if args.out:
        # run from the repository root
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown(args, cands, simple, pool, stats, command, notes, host))
        print(f"wrote {args.out}")
    return 1 if differ else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
