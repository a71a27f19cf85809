"""Helpers for the analysis tests: build a built-in task's reference in this process, at small size."""

from __future__ import annotations

import os
import types
from typing import Any

import torch

from kernelwright.tasks import load_tasks

TASKS = {t.id: t for t in load_tasks("builtin")}


def reference(task_id: str, seed: int = 42) -> tuple[torch.nn.Module, list[Any]]:
    """(model, inputs) of a built-in task at small size, seeded like the evaluator."""
    task = TASKS[task_id]
    module = types.ModuleType("analysis_test_task")
    old = os.environ.get("KERNELWRIGHT_SIZE")
    os.environ["KERNELWRIGHT_SIZE"] = "small"
    try:
        exec(compile(task.source, task.path or task.id, "exec"), module.__dict__)
    finally:
        if old is None:
            os.environ.pop("KERNELWRIGHT_SIZE", None)
        else:
            os.environ["KERNELWRIGHT_SIZE"] = old
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(seed)
    return model, module.get_inputs()
