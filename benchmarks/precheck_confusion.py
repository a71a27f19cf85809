"""The region pre-check against the full evaluator: a confusion matrix per target.

Every region answer on record (study logs, replay transcripts), the test oracle's correct region
per task and target, and broken mutants of it (benchmarks/precheck_corpus.py) go through the
pre-check (kernelwright/scaffold/precheck.py) and through the real evaluator, the region spliced
into its scaffold. A pre-check pass the evaluator then finds wrong is a bug, listed under the table.

Evaluator verdicts are kept in a JSONL file keyed by the program's hash (--verdicts), so the slow
half runs once per program and can run apart from the fast half, e.g. on a GPU machine:

    # C++ on this CPU: evaluate, then print the matrix
    python benchmarks/precheck_confusion.py --target cpp --evaluate --jobs 1
    # CUDA / Triton on the device: the same command with --device cuda --target cuda --target triton

Without --evaluate, programs with no stored verdict use the verdict recorded with the answer (study
logs carry one) and are counted apart ("recorded") or skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from precheck_corpus import RegionAnswer, dedupe, oracle_and_mutants, recorded  # noqa: E402

from kernelwright.scaffold import plan_tasks, write  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402

DEFAULT_VERDICTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "precheck-confusion" / "verdicts.jsonl"
BUILD_FAILURES = {"compile_error", "syntax_error", "hallucinated_api", "no_code"}


def evaluator_class(verdict: str | None) -> str:
    if verdict is None:
        return "unknown"
    if verdict == "correct":
        return "correct"
    if verdict in BUILD_FAILURES:
        return "compile_error"
    return "incorrect"


def program_key(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def load_verdicts(path: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["key"]] = row
    return out


def _priority(a: RegionAnswer) -> int:
    """Evaluation order, for a run cut short: answers with no verdict on record first, then the
    mutants a pre-check could let through (subtly wrong math), then the rest."""
    order = ["mutant:dropped_term", "mutant:wrong_constant", "oracle", "mutant:plus_one", "mutant:empty",
             "mutant:undefined_name"]
    if a.recorded_verdict is None and not a.source.startswith(("oracle", "mutant")):
        return 0
    if a.source in order:
        return 1 + order.index(a.source) * 2
    return 2 if a.recorded_verdict == "correct" else 8


def evaluate_all(items: list[tuple[RegionAnswer, str]], tasks: dict, args: argparse.Namespace,
                 store: dict[str, dict]) -> None:
    from kernelwright.device import resolve_size
    from kernelwright.evaluate import EvalRun, evaluate

    size = resolve_size(args.device, args.size)
    extra_env = {"TRITON_INTERPRET": "1"} if args.device == "cpu" else {}
    cfg = EvalRun.of(device=args.device, time=False, trials=3, timeout=600.0, size=size, extra_env=extra_env)
    todo = [(a, code) for a, code in items if program_key(code) not in store]
    todo = sorted({program_key(c): (a, c) for a, c in todo}.values(), key=lambda ac: _priority(ac[0]))
    lock = threading.Lock()
    started = time.monotonic()
    print(f"evaluating {len(todo)} programs ({len(items) - len(todo)} known)", flush=True)

    def run(job: tuple[RegionAnswer, str]) -> None:
        a, code = job
        r = evaluate(tasks[a.task_id], code, cfg)
        row = {"key": program_key(code), "task_id": a.task_id, "target": a.target, "verdict": r.verdict.value,
               "error": (r.error or "")[:300], "device": args.device, "size": size}
        with lock:
            store[row["key"]] = row
            with args.verdicts.open("a") as f:
                f.write(json.dumps(row) + "\n")
        print(f"{time.monotonic() - started:6.0f} s  {a.task_id} {a.target} {a.source}: {r.verdict.value}", flush=True)

    args.verdicts.parent.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(run, todo))


def report(items: list[tuple[RegionAnswer, str]], plans: dict, store: dict[str, dict],
           args: argparse.Namespace, size: str) -> str:
    from kernelwright.scaffold.precheck import precheck_many

    started = time.perf_counter()
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (a, _) in enumerate(items):
        groups.setdefault((a.task_id, a.target), []).append(i)
    checks: dict[int, object] = {}
    per_call: list[float] = []
    for (tid, target), idx in groups.items():  # one call per task and target: one compile for all
        t0 = time.perf_counter()
        for i, res in zip(idx, precheck_many(plans[tid], target, [items[i][0].region for i in idx])):
            checks[i] = res
        per_call.append(time.perf_counter() - t0)
    precheck_s = time.perf_counter() - started
    per_call.sort()
    rows, unjudged = [], []
    for i, (a, code) in enumerate(items):
        stored = store.get(program_key(code))
        verdict, basis = (stored["verdict"], "evaluated") if stored else (a.recorded_verdict, "recorded")
        if verdict is None:
            unjudged.append((a, checks[i]))
            continue
        rows.append((a, checks[i], evaluator_class(verdict), verdict, basis))
    lines = [
        "# Region pre-check against the full evaluator",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores; size {size}. {len(items)} region answers "
        f"({len(rows)} with an evaluator verdict); the pre-check of all of them took {precheck_s:.1f} s "
        f"in {len(groups)} calls (one per task and target, {len(items) / max(1, len(groups)):.1f} regions a call; "
        f"median {per_call[len(per_call) // 2]:.2f} s, slowest {per_call[-1]:.2f} s a call).",
        "",
        "```",
        "python benchmarks/precheck_confusion.py " + " ".join(sys.argv[1:]),
        "```",
        "",
    ]
    bugs = []
    for target in args.target or ["cpp"]:
        for basis in ("evaluated", "recorded"):
            sel = [r for r in rows if r[0].target == target and r[4] == basis]
            if not sel:
                continue
            tally = Counter((r[1].status.value, r[2]) for r in sel)
            cols = ["correct", "incorrect", "compile_error"]
            lines += [f"## {target}: evaluator verdicts {basis}"
                      + (" now" if basis == "evaluated" else " with the answers (study logs, the H200 sweep)"), "",
                      "| pre-check \\ evaluator | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
            for status in ("pass", "counterexample", "compile_error", "runtime_error", "unsupported"):
                if any(tally[(status, c)] for c in cols):
                    lines.append(f"| {status} | " + " | ".join(str(tally[(status, c)]) for c in cols) + " |")
            agree = sum(1 for r in sel if (r[1].status.value == "pass") == (r[2] == "correct"))
            lines += ["", f"{agree} of {len(sel)} agree on correct / not correct.", ""]
            for a, res, cls, verdict, _ in sel:
                if res.status.value == "pass" and cls != "correct":
                    bugs.append(f"- BUG: pre-check pass, evaluator {verdict}: {a.task_id} {target} ({a.source}): "
                                f"`{a.region.strip()[:160]}`")
                elif res.status.value != "pass" and cls == "correct":
                    bugs.append(f"- false alarm: pre-check {res.status.value}, evaluator correct: {a.task_id} {target} "
                                f"({a.source}): {res.render()[:240]}")
    if unjudged:
        lines += ["## Pre-check only (no evaluator verdict yet)", "", "| target | source | pass | counterexample | "
                  "compile_error | runtime_error | unsupported |", "|---|---|---|---|---|---|---|"]
        tally = Counter((a.target, a.source, res.status.value) for a, res in unjudged)
        for target, source in sorted({(a.target, a.source) for a, _ in unjudged}):
            lines.append(f"| {target} | {source} | " + " | ".join(
                str(tally[(target, source, s)]) for s in ("pass", "counterexample", "compile_error", "runtime_error",
                                                          "unsupported")) + " |")
        lines.append("")
    lines += ["## Disagreements", ""] + (bugs or ["none"]) + [""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin")
    ap.add_argument("--target", action="append", choices=["cpp", "cuda", "triton"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", default="auto")
    ap.add_argument("--evaluate", action="store_true", help="run the evaluator on programs with no stored verdict")
    ap.add_argument("--only", choices=["recorded", "oracle"], help="one half of the corpus")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--verdicts", type=Path, default=DEFAULT_VERDICTS)
    ap.add_argument("--no-precheck", action="store_true", help="only fill the verdict store")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    targets = args.target or ["cpp"]
    from kernelwright.device import resolve_size

    size = resolve_size(args.device, args.size)
    task_list = load_tasks(args.tasks)
    tasks = {t.id: t for t in task_list}
    plans = dict(zip(tasks, plan_tasks(task_list, size)))
    answers: list[RegionAnswer] = []
    if args.only != "oracle":
        answers += recorded(plans)
    if args.only != "recorded":
        answers += oracle_and_mutants(plans, targets)
    answers = [a for a in dedupe(answers) if a.target in targets and a.task_id in tasks]
    items = [(a, write(plans[a.task_id], a.target).program_with(a.region)) for a in answers]
    store = load_verdicts(args.verdicts)
    if args.evaluate:
        evaluate_all(items, tasks, args, store)
    if args.no_precheck:
        return 0
    text = report(items, plans, store, args, size)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
