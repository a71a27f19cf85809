"""Verified kernels per minute, from study folders: what a regime delivers for the machine time it took.

For each study folder (cells.jsonl, attempts.jsonl or attempts.jsonl.gz, manifest.json): its regime
and target, the cells, the cells whose pick is correct with a custom kernel (verified), the study's
wall time from its manifest (first run's start to last run's finish: the machine time it held), and
verified kernels per minute of it; with the completion tokens it spent and tokens per verified kernel.
Studies run side by side share their machine, so compare rates of studies that ran together.

A study cut short (the machine taken away) has cells that never ended: `tasks verified` counts the
tasks with a verified attempt whether or not their cell ended, and its wall time ends at the last
attempt the study logged (`recorded_at`), or at `--until` for logs older than that stamp.

    tar -xJf docs/results/sessions/h200-2026-12-03c.tar.xz -C docs/results/sessions   # the session's raw files
    python benchmarks/verified_rate.py docs/results/sessions/h200-2026-12-03c/cpp-zero_shot docs/results/sessions/h200-2026-12-03c/cpp-search
"""

from __future__ import annotations

import argparse
import gzip
import json
from datetime import datetime
from pathlib import Path


def _lines(path: Path) -> list[dict]:
    if path.is_file():
        return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        with gzip.open(gz, "rt") as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    return []


def _minutes(manifest: dict, attempts: list[dict], until: datetime | None) -> float | None:
    runs = [r for r in manifest.get("runs", []) if r.get("started")]
    if not runs:
        return None
    start = min(datetime.fromisoformat(r["started"]) for r in runs)
    ends = [datetime.fromisoformat(r["finished"]) for r in runs if r.get("finished")]
    if len(ends) < len(runs):  # cut short: its last logged attempt, or the time given
        stamps = [datetime.fromisoformat(a["recorded_at"]) for a in attempts if a.get("recorded_at")]
        ends += [until] if until else stamps[-1:]
        if len(ends) < len(runs):
            return None
    return (max(ends) - start).total_seconds() / 60.0


def _verified(a: dict) -> bool:
    return a["eval"]["verdict"] == "correct" and bool(a["eval"].get("custom_kernel"))


def row(folder: Path, until: datetime | None = None) -> list[str]:
    cells = _lines(folder / "cells.jsonl")
    logged = _lines(folder / "attempts.jsonl")
    attempts = {a["id"]: a for a in logged}
    manifest = json.loads((folder / "manifest.json").read_text())
    verified = sum(1 for c in cells if c.get("selected") in attempts and _verified(attempts[c["selected"]]))
    begun = {a["task_id"] for a in logged}
    tasks_verified = len({a["task_id"] for a in logged if _verified(a)})
    ended = len({c["task_id"] for c in cells})
    # every attempt's tokens: a cell that never ended has no cell line to sum them
    tokens = sum(a.get("usage", {}).get("completion_tokens", 0) for a in logged)
    minutes = _minutes(manifest, logged, until)
    runs_ended = ", ".join(sorted({str(r.get("ended")) for r in manifest.get("runs", [])}))
    regime = ", ".join(sorted({a["regime"] for a in logged} | {c["regime"] for c in cells}))
    argv = (manifest.get("runs") or [{}])[0].get("argv", [])
    target = argv[argv.index("--target") + 1] if "--target" in argv else "?"
    rate = f"{tasks_verified / minutes:.2f}" if minutes else "-"
    per = f"{tokens / tasks_verified:.0f}" if tasks_verified else "-"
    wall = f"{minutes:.1f}" if minutes else "-"
    return [folder.name, regime, target, f"{len(begun)} / {ended}", str(verified), str(tasks_verified), wall, rate,
            str(tokens), per, runs_ended]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--until", type=datetime.fromisoformat, default=None,
                    help="where a run was cut short and its attempts carry no recorded_at: when it stopped (ISO)")
    args = ap.parse_args()
    head = ["study", "regime", "target", "tasks begun / cells ended", "picks verified", "tasks verified",
            "study wall (min)", "tasks verified / min", "completion tokens", "tokens / task verified", "ended"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for folder in args.folders:
        print("| " + " | ".join(row(folder, args.until)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
