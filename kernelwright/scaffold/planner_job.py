"""The job the planning child receives (kept apart from plan.py so the parent never imports torch.fx)."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel

from kernelwright.measure.draw import SEED


class PlanJob(BaseModel):
    task_id: str
    source: str
    path: Optional[str] = None
    size: str = "small"
    seed: int = SEED  # the evaluator's default seed


class PlanBatch(BaseModel):
    """Several tasks planned in one child: one interpreter and one torch import for all of them."""

    jobs: list[PlanJob]
