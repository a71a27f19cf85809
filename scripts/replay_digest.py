"""The recorded replays' attempts as data: every regime transcript of tests/strategies/plan.py and
the optimize transcript (both modes), run through the real evaluator, each attempt's id and
verdict written to one JSON file. Two digests compare a change that must not change behaviour
(a refactor): same ids, same verdicts, in the same order.

    python scripts/replay_digest.py --out before.json            # at the base commit
    python scripts/replay_digest.py --out after.json             # after the change
    python scripts/replay_digest.py --compare before.json after.json

Slow (every candidate built and judged on the CPU: about as long as the replay tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def regimes(cache: str) -> dict[str, list[tuple[str, str]]]:
    from kernelwright.llm import make_backend
    from kernelwright.prompts.facts import folder_provider
    from kernelwright.strategies import run_regime
    from kernelwright.tasks import load_task
    from tests.strategies import plan

    out: dict[str, list[tuple[str, str]]] = {}
    for spec in plan.REGIMES:
        path = plan.transcript(spec)
        if not path.is_file():
            continue
        backend = make_backend(f"replay:{path}")
        for task_id in plan.PLAN[spec]:
            logged: list = []
            try:
                run_regime(load_task(task_id), backend, plan.regime_config(spec), plan.eval_run(cache),
                           sink=logged.append, analysis_provider=folder_provider(plan.FACTS))
                ended = ""
            except Exception as e:  # noqa: BLE001 - a replay that breaks is part of the digest
                ended = f"{type(e).__name__}: {str(e)[:200]}"
            out[f"{spec} {task_id}"] = [(a.id, a.eval.verdict.value) for a in logged] + ([("raised", ended)] if ended else [])
            print(spec, task_id, [v for _, v in out[f"{spec} {task_id}"]], flush=True)
    return out


def optimize_runs(cache: str) -> dict[str, list[tuple[str, str]]]:
    from tests.optimize.test_optimize_e2e import EXAMPLE, FACTS, RECORDED_ARGS, TRANSCRIPT

    # the regime the transcript was recorded under, said, so that a change of the default cannot
    # make the replay miss
    recorded = [*RECORDED_ARGS, *([] if "--regime" in RECORDED_ARGS else ["--regime", "routed"])]
    out: dict[str, list[tuple[str, str]]] = {}
    for mode in ("--scaffold", "--no-scaffold"):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "out"
            p = subprocess.run([sys.executable, "-m", "kernelwright.cli.main", "optimize", str(EXAMPLE), "--model",
                                f"replay:{TRANSCRIPT}", "--facts", str(FACTS), "--out", str(folder), *recorded, mode],
                               capture_output=True, text=True, timeout=1800,
                               env={**os.environ, "KERNELWRIGHT_CACHE": cache, "PYTHONPATH": str(ROOT)})
            lines = (folder / "attempts.jsonl").read_text().splitlines() if (folder / "attempts.jsonl").is_file() else []
            rows = [(a["id"], a["eval"]["verdict"]) for a in map(json.loads, lines)]
            out[f"optimize {mode}"] = rows + [("exit", str(p.returncode))]
            print("optimize", mode, out[f"optimize {mode}"], flush=True)
    return out


def compare(a: Path, b: Path) -> int:
    before, after = json.loads(a.read_text()), json.loads(b.read_text())
    diff = [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
    for k in diff:
        print(f"DIFFERS {k}:\n  before {before.get(k)}\n  after  {after.get(k)}")
    n = sum(len(v) for v in before.values())
    print(f"{len(before)} runs, {n} rows: " + ("identical" if not diff else f"{len(diff)} differ"))
    return 1 if diff else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path)
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("--out or --compare")
    cache = os.environ.get("KERNELWRIGHT_CACHE") or tempfile.mkdtemp(prefix="kw-digest-")
    os.environ["KERNELWRIGHT_CACHE"] = cache
    digest = {**regimes(cache), **optimize_runs(cache)}
    args.out.write_text(json.dumps(digest, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
