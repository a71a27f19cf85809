"""The search regime's repair turn, two ways, on recorded failures: a fresh prompt (the lines, the
failing region and its problem: how `search` asked until 2026-12-02) against a follow-up in the
same conversation (the task with its kernel, the failing region as the model's answer, then the
problem). Prints a table.

The situations are real: every search cell of a study folder that reached a second turn gives its
turn-1 prompt as recorded (the old way) and the same failing region and problem as a follow-up to its
turn-0 conversation (the new way). Each arm draws n answers with the given model; every distinct
region goes through the regime's own pre-check (no build), so the table counts what a turn would
have had to build from.

    python benchmarks/repair_followup.py /path/to/study --model qwen2.5-coder-1.5b --n 4 --out table.md
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.evaluate import EvalRun  # noqa: E402
from kernelwright.llm import make_backend  # noqa: E402
from kernelwright.llm.base import ChatMessage  # noqa: E402
from kernelwright.strategies import parse_regime  # noqa: E402
from kernelwright.strategies import search as S  # noqa: E402
from kernelwright.strategies.search.parts import Sample, dedupe, distinct, follow_up  # noqa: E402
from kernelwright.strategies.search.region import draw, precheck  # noqa: E402
from kernelwright.strategies.base import RunContext  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402

# the fresh prompt's failing region and problem, as templates/search_repair.jinja wrote them before
OLD_REPAIR = re.compile(r"This region is wrong:\n\n```(\w+)\n(?P<region>.*?)\n```\n\n(?P<problem>.*?)\n\nCompute y",
                        re.S)
KINDS = ("whole function", "compile_error", "counterexample", "runtime_error", "unsupported", "pass")


def situations(folder: Path) -> list[dict]:
    """Per search cell with a second turn: its task, target, turn-0 messages and turn-1 messages
    (from the folder's attempts.jsonl, or attempts.jsonl.gz as docs/results keeps them)."""
    first: dict[str, dict] = {}
    second: dict[str, dict] = {}
    path = folder / "attempts.jsonl"
    text = path.read_text() if path.exists() else gzip.decompress((folder / "attempts.jsonl.gz").read_bytes()).decode()
    for line in text.splitlines():
        a = json.loads(line)
        if not a.get("regime", "").startswith("search") or a.get("sample") != 0:
            continue
        (first if a["turn"] == 0 else second if a["turn"] == 1 else {}).setdefault(a["cell_key"], a)
    out = []
    for key, a1 in sorted(second.items(), key=lambda kv: kv[1]["task_id"]):
        m = OLD_REPAIR.search(a1["messages"][-1]["content"])
        if key in first and m:
            out.append({"task": a1["task_id"], "old": a1["messages"], "base": first[key]["messages"],
                        "region": m["region"], "problem": m["problem"], "fence": m.group(1)})
    return out


def kind(s: Sample) -> str:
    if s.check is None:
        return "unsupported"
    status = s.check.status.value
    if status == "compile_error" and "function-definition is not allowed" in (s.check.error or ""):
        return "whole function"
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", type=Path)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--limit", type=int, default=0, help="at most this many situations (0: all)")
    ap.add_argument("--max-tokens", type=int, default=768)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    found = situations(args.study)
    if args.limit:
        found = found[:args.limit]
    tasks = {t.id: t for t in load_tasks("builtin")}
    backend = make_backend(args.model)
    counts = {arm: collections.Counter() for arm in ("fresh prompt", "follow-up")}
    started = time.monotonic()
    for i, sit in enumerate(found):
        config = parse_regime("search", target=args.target, scaffold=True, max_tokens=args.max_tokens)
        ctx = RunContext(task=tasks[sit["task"]], backend=backend, config=config,
                         eval_run=EvalRun(device="cpu"), cell_key=f"repair-{i}")
        arms = {"fresh prompt": tuple(ChatMessage(**m) for m in sit["old"]),
                "follow-up": follow_up(tuple(ChatMessage(**m) for m in sit["base"]), sit["fence"],
                                       sit["region"], sit["problem"])}
        line = []
        for arm, messages in arms.items():
            samples = draw(ctx, messages, 1, args.n, S.DEFAULT_TEMPERATURE)
            dedupe(samples, set())
            precheck(ctx, samples)
            firsts = distinct(samples)
            c = counts[arm]
            c["situations"] += 1
            c["samples"] += len(samples)
            c["distinct"] += len(firsts)
            c["no region"] += sum(1 for s in samples if not s.region.strip())
            for s in firsts:
                c[kind(s)] += 1
            c["cells with a pass"] += any(kind(s) == "pass" for s in firsts)
            line.append(f"{arm}: " + " ".join(kind(s) for s in firsts))
        print(f"[{i + 1}/{len(found)}] {sit['task']}: " + " | ".join(line), flush=True)
    cols = ["situations", "samples", "distinct", "no region", *KINDS, "cells with a pass"]
    rows = ["| arm | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    rows += [f"| {arm} | " + " | ".join(str(c[k]) for k in cols) + " |" for arm, c in counts.items()]
    table = (f"Model {args.model}, target {args.target}, n={args.n} a situation, temperature "
             f"{S.DEFAULT_TEMPERATURE}, {len(found)} situations from {args.study}, "
             f"{time.monotonic() - started:.0f} s.\n\n" + "\n".join(rows) + "\n")
    print(table)
    if args.out:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
