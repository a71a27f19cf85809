"""Timing that holds on a shared device: a plain PyTorch copy of each reference, timed by the real
evaluator against the reference, must come out at 1.0x within noise. Prints a table.

The copy is the task's own source with `Model` renamed `ModelNew`: the same code, so any speedup
far from 1.0 is the timing's error (others' work on the device leaking into one side's clock, the
device lock not held, drift between the interleaved calls). Run it beside whatever load the
question is about (two studies on one GPU, issue #19), repeating the suite with `--rounds`:

    python benchmarks/copy_timing.py --device cuda --rounds 3 --out copy.md

Exit status 1 if any copy is timed outside --low..--high.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.evaluate import EvalRun, evaluate  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402


def copy_of(source: str) -> str:
    """The reference itself as the candidate: `class Model(` becomes `class ModelNew(` (and the
    references to the name inside the class, such as `super(Model, self)`)."""
    return re.sub(r"\bModel\b", "ModelNew", source)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", default="auto")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=1, help="times through the task list")
    ap.add_argument("--low", type=float, default=0.9)
    ap.add_argument("--high", type=float, default=1.1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cfg = EvalRun.of(device=args.device, size=args.size, iters=args.iters)
    tasks = load_tasks(args.tasks)
    rows: list[tuple[str, int, str, float | None, float]] = []
    outside, text = [], ""
    started = time.monotonic()
    for rnd in range(args.rounds):
        for task in tasks:
            r = evaluate(task, copy_of(task.source), cfg)
            waited = r.device_lock_wait_s or 0.0
            rows.append((task.id, rnd, r.verdict.value, r.speedup, waited))
            print(f"{task.id} round {rnd}: {r.verdict.value} {r.speedup if r.speedup is None else round(r.speedup, 3)}x"
                  f" (waited {waited:.1f} s for the device) {r.error[:120] if r.error else ''}", flush=True)
            # the table kept after every row: a run cut short still says what it measured
            outside, text = table(rows, args, time.monotonic() - started)
    print(text)
    return 1 if outside else 0


def table(rows: list[tuple[str, int, str, float | None, float]], args: argparse.Namespace,
          seconds: float) -> tuple[list, str]:
    """The rows outside the band, and the table so far (written to --out)."""
    speedups = [s for _, _, _, s, _ in rows if s is not None]
    outside = [(t, k, s) for t, k, _, s, _ in rows if s is None or not args.low <= s <= args.high]
    lines = [f"# Plain copies of the reference, timed ({args.device}, size {args.size}, {args.iters} timed calls, "
             f"{args.rounds} round(s), {seconds:.0f} s)", "",
             "| task | round | verdict | speedup | waited for the device (s) |", "|---|---|---|---|---|"]
    lines += [f"| {t} | {k} | {v} | {'-' if s is None else f'{s:.3f}'} | {w:.1f} |" for t, k, v, s, w in rows]
    if speedups:
        lines += ["", f"{len(speedups)} timed: median {statistics.median(speedups):.3f}x, "
                      f"range {min(speedups):.3f}-{max(speedups):.3f}x; "
                      f"{len(outside)} outside {args.low}-{args.high}x (untimed ones included)"]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    return outside, text


if __name__ == "__main__":
    sys.exit(main())
