"""`kernelwright optimize` on KernelBench problems, one after another, as a user would run it: each
problem's file copied to its own folder, `optimize FILE --budget-minutes M` with the embedded
default model and the machine's default device and size, then what its output folder records:
how long it ran, how many candidates the evaluator judged and with which verdicts, what was kept.
A markdown table on stdout (and --out).

    python benchmarks/optimize_kernelbench.py --root ../shared/kernelbench --problems 1/23,2/57 \
        --minutes 3 --work /tmp/optkb [--out docs/results/optimize-kernelbench-cpu.md]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

_NOT_JUDGED = ("not_built", "no_code", "syntax_error")
_HEADER = ["problem", "exit", "wall s", "evaluated", "verdicts", "kept", "size"]


def _problem_file(root: Path, spec: str) -> Path:
    level, number = spec.split("/")
    found = sorted((root / f"level{level}").glob(f"{int(number)}_*.py"))
    if not found:
        sys.exit(f"optimize_kernelbench: no problem {spec} under {root}")
    return found[0]


def _run_one(root: Path, spec: str, minutes: float, work: Path, extra: list[str]) -> list[str]:
    source = _problem_file(root, spec)
    folder = work / spec.replace("/", "-")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    module = folder / source.name
    shutil.copy(source, module)
    out = folder / "out"
    argv = [sys.executable, "-m", "kernelwright.cli.main", "optimize", str(module), "--budget-minutes", str(minutes),
            "--out", str(out), *extra]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    (folder / "terminal.txt").write_text(proc.stdout + proc.stderr)
    verdicts: Counter[str] = Counter()
    attempts = out / "attempts.jsonl"
    if attempts.exists():
        for line in attempts.read_text().splitlines():
            rec = json.loads(line)
            verdicts[json.loads(line)["eval"]["verdict"]] += 1
    # judged by the evaluator: built and run (a sample the search never built is `not_built`)
    judged = sum(n for v, n in verdicts.items() if v not in _NOT_JUDGED)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return [spec + " " + source.stem.split("_", 1)[1], str(proc.returncode), f"{wall:.0f}", str(judged),
            ", ".join(f"{v} {n}" for v, n in verdicts.most_common()), "yes" if summary.get("kept_id") else "no",
            summary.get("size") or ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("../shared/kernelbench"))
    ap.add_argument("--problems", required=True, help="level/number, comma-separated (e.g. 1/23,2/57)")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/optimize-kernelbench"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("extra", nargs="*", help="more optimize flags, after --")
    args = ap.parse_args()
    rows = [_HEADER, ["---"] * len(_HEADER)]
    for spec in args.problems.split(","):
        rows.append(_run_one(args.root, spec.strip(), args.minutes, args.work, args.extra))
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    table = "\n".join("| " + " | ".join(r) + " |" for r in rows)
    if args.out:
        args.out.write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
