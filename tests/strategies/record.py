"""Record the regime transcripts from the real embedded model: `python -m tests.strategies.record [REGIME...]`.

Slow on purpose (real generation on the CPU); run by hand when prompts change, then commit the
.jsonl files. Prints one line per cell. A request already answered in any transcript (routed
sends exactly the requests guided and agentic send) is copied, not generated again: the model
is seeded, so it would give the same answer.
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

from kernelwright.llm import make_backend
from kernelwright.llm.base import Completion, GenerationRequest
from kernelwright.llm.replay import Recording, read_recordings, request_key
from kernelwright.prompts.facts import folder_provider
from kernelwright.strategies import run_regime
from kernelwright.tasks import load_task
from tests.strategies import plan


class Reusing:
    """Serves requests recorded in any transcript; generates (and records) the rest."""

    def __init__(self, spec: str) -> None:
        self.path = plan.transcript(spec)
        self.inner = make_backend(f"record:{self.path}={plan.MODEL}")
        self.model = self.inner.model
        self.known: dict[str, list[Completion]] = {}
        for f in plan.TRANSCRIPTS.glob("*.jsonl"):
            for rec in read_recordings(f):
                self.known.setdefault(rec.key, rec.completions)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            key = request_key(req, self.model)
            if key in self.known:
                with open(self.path, "a") as f:
                    f.write(Recording(key=key, model=self.model, request=req, completions=self.known[key],
                                      recorded_at=time.time()).model_dump_json() + "\n")
                out.append(self.known[key])
            else:
                [got] = self.inner.generate([req])
                self.known[key] = got
                out.append(got)
        return out


def main(argv: list[str]) -> None:
    specs = plan.selected(argv)
    provider = folder_provider(plan.FACTS, device="cpu", record=True)
    for spec in specs:
        plan.transcript(spec).unlink(missing_ok=True)
        backend = Reusing(spec)
        for task_id in plan.PLAN[spec]:
            started = time.monotonic()
            cell = run_regime(load_task(task_id), backend, plan.regime_config(spec), plan.eval_run(),
                              analysis_provider=provider)
            print(f"{spec:24s} {task_id:36s} {cell.verdict.value:18s} {len(cell.attempt_ids)} attempts "
                  f"{cell.usage.completion_tokens} tokens {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
