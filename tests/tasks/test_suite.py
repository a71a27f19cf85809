"""The built-in suite: file conventions, small-size runs, determinism, and the full-size switch.

Task sources are executed here from their text, the way the evaluator will run them, never by
importing the files as package modules.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from kernelwright.records import Task
from kernelwright.tasks import SIZE_ENV, load_tasks

TASKS: list[Task] = load_tasks("builtin")
BY_ID = {task.id: task for task in TASKS}
ALLOWED_IMPORTS = {"os", "math", "torch", "torch.nn", "torch.nn.functional"}
# The small size is what every CPU test runs: bounded in work, so it takes milliseconds on any
# machine (a wall-clock bound failed only when the machine was loaded). Largest today: 10 MFLOP,
# 0.4 MB.
SMALL_MAX_FLOPS = 50e6
SMALL_MAX_BYTES = 4 * 2**20
# Per-task full-size budget for inputs + parameters + output. The brief allows ~8 GB of peak
# memory; intermediates of one forward come on top, so the tensors we can count must leave room.
FULL_TENSOR_BUDGET_BYTES = 4 * 2**30


def exec_task(task: Task, monkeypatch: pytest.MonkeyPatch, size: str | None) -> ModuleType:
    """A fresh module built from ``task.source`` with the size variable set (None: unset)."""
    if size is None:
        monkeypatch.delenv(SIZE_ENV, raising=False)
    else:
        monkeypatch.setenv(SIZE_ENV, size)
    spec = importlib.util.spec_from_loader(f"suite_{task.name}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(task.source, task.path or task.id, "exec"), module.__dict__)
    return module


def tensors_of(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_of(item)]
    return []


def nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def run_once(module: ModuleType, seed: int = 0) -> tuple[list[torch.Tensor], Any, int, int]:
    """Seed, construct, build inputs, forward; returns inputs, output, counted FLOPs and the bytes
    of inputs, parameters and output."""
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(seed + 1)
    inputs = module.get_inputs()
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        output = model(*inputs)
    held = [*tensors_of(inputs), *model.parameters(), *model.buffers(), *tensors_of(output)]
    return inputs, output, counter.get_total_flops(), sum(t.numel() * t.element_size() for t in held)


# --- suite-wide conventions --------------------------------------------------------------------


def test_suite_size_and_levels() -> None:
    per_level = Counter(task.level for task in TASKS)
    assert len(TASKS) >= 32
    assert per_level[1] >= 12 and per_level[2] >= 10 and per_level[3] >= 8, per_level


def test_file_numbering_and_unique_names() -> None:
    for level in {t.level for t in TASKS}:
        numbers = [int(Path(t.path or "").stem[:2]) for t in TASKS if t.level == level]
        assert numbers == list(range(1, len(numbers) + 1)), f"level {level} numbering has gaps: {numbers}"
    names = Counter(t.name for t in TASKS)
    assert all(count == 1 for count in names.values()), [n for n, c in names.items() if c > 1]
    for task in TASKS:
        assert re.fullmatch(r"\d{2}_[a-z0-9]+(_[a-z0-9]+)*", Path(task.path or "").stem)


@pytest.mark.parametrize("task_id", list(BY_ID))
def test_source_conventions(task_id: str) -> None:
    task = BY_ID[task_id]
    tree = ast.parse(task.source)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= ALLOWED_IMPORTS, imported - ALLOWED_IMPORTS
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    doc = ast.get_docstring(model)
    assert doc and "\n" not in doc.strip(), "Model needs a one-line docstring"
    assert f'os.environ.get("{SIZE_ENV}", "small") == "full"' in task.source
    lowered = task.source.lower()
    assert "cuda" not in lowered, "inputs and modules must be built on the CPU"
    assert "dropout" not in lowered, "the suite is dropout-free so that outputs are deterministic"


def test_dtype_coverage(monkeypatch: pytest.MonkeyPatch) -> None:
    dtypes: set[torch.dtype] = set()
    for task in TASKS:
        module = exec_task(task, monkeypatch, "small")
        torch.manual_seed(0)
        dtypes.update(t.dtype for t in tensors_of(module.get_inputs()))
    assert dtypes & {torch.float16, torch.bfloat16}, dtypes
    assert torch.int64 in dtypes, dtypes


# --- small size: runs fast, finite, deterministic -----------------------------------------------


@pytest.mark.parametrize("task_id", list(BY_ID))
def test_small_runs_fast_finite_deterministic(task_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = exec_task(BY_ID[task_id], monkeypatch, "small")
    inputs, output, flops, held = run_once(module)
    assert flops <= SMALL_MAX_FLOPS and held <= SMALL_MAX_BYTES, f"small size: {flops:.3g} FLOP, {held} bytes"
    assert all(t.device.type == "cpu" for t in inputs)
    outputs = tensors_of(output)
    assert outputs, "forward returned no tensor"
    for out in outputs:
        assert out.is_floating_point() and torch.isfinite(out).all(), "output has NaN/Inf"

    _, again, *_ = run_once(module)
    assert all(torch.equal(a, b) for a, b in zip(outputs, tensors_of(again), strict=True)), "same seed, different output"
    _, other_seed, *_ = run_once(module, seed=7)
    assert not all(torch.equal(a, b) for a, b in zip(outputs, tensors_of(other_seed), strict=True)), "output ignores the seed"


# --- the size switch -----------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", list(BY_ID))
def test_full_size_is_larger_and_within_budget(task_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    task = BY_ID[task_id]
    torch.manual_seed(0)
    small_numel = sum(t.numel() for t in tensors_of(exec_task(task, monkeypatch, "small").get_inputs()))
    torch.manual_seed(0)
    default_numel = sum(t.numel() for t in tensors_of(exec_task(task, monkeypatch, None).get_inputs()))
    assert default_numel == small_numel, "unset size must mean small"

    full = exec_task(task, monkeypatch, "full")
    # The meta device gives shapes and dtypes without allocating, so full sizes (GBs) are checked
    # in milliseconds here, and a forward on meta sizes the output too.
    with torch.device("meta"):
        inputs = tensors_of(full.get_inputs())
        model = full.Model(*full.get_init_inputs())
        with torch.no_grad():
            output = tensors_of(model(*inputs))
    full_numel = sum(t.numel() for t in inputs)
    assert full_numel > small_numel
    total = nbytes(inputs) + nbytes(list(model.parameters())) + nbytes(output)
    assert total < FULL_TENSOR_BUDGET_BYTES, f"full size holds {total / 2**30:.2f} GiB in inputs+params+output"
    # Realistic means past launch overhead: the largest input or output is at least ~16 MB.
    assert max(t.numel() * t.element_size() for t in inputs + output) >= 16 * 2**20
