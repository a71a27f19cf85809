"""Verified kernels per minute, from study folders: what a regime delivers for the machine time it took.

For each study folder (cells.jsonl, attempts.jsonl or attempts.jsonl.gz, manifest.json): its regime
and target, the cells, the cells whose pick is correct with a custom kernel (verified), the study's
wall time from its manifest (first run's start to last run's finish: the machine time it held), and
verified kernels per minute of it; with the completion tokens it spent and tokens per verified kernel.
Studies run side by side share their machine, so compare rates of studies that ran together.

    python benchmarks/verified_rate.py docs/results/h200-2026-12-03c/cpp-zero_shot docs/results/h200-2026-12-03c/cpp-search
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


def _minutes(manifest: dict) -> float | None:
    runs = [r for r in manifest.get("runs", []) if r.get("started") and r.get("finished")]
    if not runs:
        return None
    start = min(datetime.fromisoformat(r["started"]) for r in runs)
    end = max(datetime.fromisoformat(r["finished"]) for r in runs)
    return (end - start).total_seconds() / 60.0


def row(folder: Path) -> list[str]:
    cells = _lines(folder / "cells.jsonl")
    attempts = {a["id"]: a for a in _lines(folder / "attempts.jsonl")}
    manifest = json.loads((folder / "manifest.json").read_text())
    verified = sum(1 for c in cells if c.get("selected") in attempts
                   and attempts[c["selected"]]["eval"]["verdict"] == "correct"
                   and attempts[c["selected"]]["eval"].get("custom_kernel"))
    tokens = sum(c.get("usage", {}).get("completion_tokens", 0) for c in cells)
    minutes = _minutes(manifest)
    ended = ", ".join(sorted({str(r.get("ended")) for r in manifest.get("runs", [])}))
    regime = ", ".join(sorted({c["regime"] for c in cells}))
    argv = (manifest.get("runs") or [{}])[0].get("argv", [])
    target = argv[argv.index("--target") + 1] if "--target" in argv else "?"
    rate = f"{verified / minutes:.2f}" if minutes else "-"
    per = f"{tokens / verified:.0f}" if verified else "-"
    wall = f"{minutes:.1f}" if minutes else "-"
    return [folder.name, regime, target, str(len(cells)), str(verified), wall, rate, str(tokens), per, ended]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args()
    head = ["study", "regime", "target", "cells", "verified kernels", "study wall (min)", "verified / min",
            "completion tokens", "tokens / verified", "ended"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for folder in args.folders:
        print("| " + " | ".join(row(folder)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
