"""Record the regime transcripts from the real embedded model: `python -m tests.strategies.record [REGIME...]`.

Slow on purpose (real generation on the CPU); run by hand when prompts change, then commit the
.jsonl files. Prints one line per cell.
"""

from __future__ import annotations

import sys
import time

from kernelwright.llm import make_backend
from kernelwright.strategies import run_regime
from kernelwright.strategies.facts import folder_provider
from kernelwright.tasks import load_task

from tests.strategies import plan


def main(argv: list[str]) -> None:
    specs = [s for s in plan.REGIMES if not argv or s.split("+")[0] in argv]
    provider = folder_provider(plan.FACTS, device="cpu", record=True)
    for spec in specs:
        path = plan.transcript(spec)
        backend = make_backend(f"record:{path}={plan.MODEL}")
        for task_id in plan.TASKS:
            started = time.monotonic()
            cell = run_regime(load_task(task_id), backend, plan.regime_config(spec), plan.eval_config(),
                              analysis_provider=provider)
            print(f"{spec:24s} {task_id:36s} {cell.verdict.value:18s} {len(cell.attempt_ids)} attempts "
                  f"{cell.usage.completion_tokens} tokens {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
