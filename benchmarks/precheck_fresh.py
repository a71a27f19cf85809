"""Fresh region answers from the embedded model, for the pre-check's confusion matrix.

Asks the model again, with sampling, the scaffolded C++ prompts of the CPU study
(docs/results/scaffold-cpu/attempts.jsonl: one prompt per task), splices each answer into today's
scaffold and appends it to docs/results/precheck-confusion/fresh.jsonl, which
benchmarks/precheck_corpus.py reads with the other recorded answers:

    python benchmarks/precheck_fresh.py --samples 1 --seed 7
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwright.llm.base import ChatMessage, GenerationRequest  # noqa: E402
from kernelwright.llm.registry import make_backend  # noqa: E402
from kernelwright.scaffold import assemble, plan_tasks, write  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "docs" / "results" / "scaffold-cpu" / "attempts.jsonl"
OUT = ROOT / "docs" / "results" / "precheck-confusion" / "fresh.jsonl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--model", default=None, help="backend spec (default: the embedded 1.5B model)")
    ap.add_argument("--tasks", type=int, default=0, help="only the first N tasks (0: all)")
    args = ap.parse_args()
    prompts = {}
    for line in STUDY.read_text().splitlines():
        r = json.loads(line)
        if "scaffold" in r["regime"] and "REGION BEGIN" in (r.get("code") or "") and r["task_id"] not in prompts:
            prompts[r["task_id"]] = tuple(ChatMessage(**m) for m in r["messages"])
    ids = list(prompts)[: args.tasks or None]
    tasks = [t for t in load_tasks("builtin") if t.id in ids]
    plans = dict(zip([t.id for t in tasks], plan_tasks(tasks)))
    backend = make_backend(args.model)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    for tid in ids:
        started = time.monotonic()
        request = GenerationRequest(messages=prompts[tid], n=args.samples, temperature=args.temperature,
                                    seed=args.seed, max_tokens=512)
        for comp in backend.generate([request])[0]:
            region = assemble(write(plans[tid], "cpp"), comp.text).region
            row = {"task_id": tid, "target": "cpp", "region": region, "source": str(OUT.relative_to(ROOT)),
                   "raw_response": comp.text, "seed": args.seed, "temperature": args.temperature}
            with OUT.open("a") as f:
                f.write(json.dumps(row) + "\n")
        print(f"{tid}: {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
