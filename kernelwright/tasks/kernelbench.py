"""Tasks from a KernelBench checkout: ``<root>/KernelBench/level{N}/{ID}_{Name}.py``."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from kernelwright.records import Task
from kernelwright.tasks.errors import TaskError
from kernelwright.tasks.ranges import NumberSet
from kernelwright.tasks.source_check import read_task_source

log = logging.getLogger(__name__)

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")
DATASET_DIR = "KernelBench"


def _level_dirs(base: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for child in base.iterdir():
        match = _LEVEL_DIR.match(child.name)
        if match and child.is_dir():
            found[int(match.group(1))] = child
    return found


def find_dataset_dir(root: Path) -> Path:
    """The folder holding ``level{N}/``: either ``root/KernelBench`` or ``root`` itself."""
    if not root.exists():
        raise TaskError(f"KernelBench root not found: {root}")
    if not root.is_dir():
        raise TaskError(f"KernelBench root is not a folder: {root}")
    for candidate in (root / DATASET_DIR, root):
        if candidate.is_dir() and _level_dirs(candidate):
            return candidate
    raise TaskError(f"{root} is not a KernelBench checkout: expected {root}/{DATASET_DIR}/level<N>/<ID>_<Name>.py")


def _problems(level_dir: Path, ids: NumberSet) -> list[tuple[int, str, Path]]:
    chosen: dict[int, tuple[int, str, Path]] = {}
    for path in level_dir.glob("*.py"):
        match = _PROBLEM_FILE.match(path.name)
        if match is None:
            log.debug("skipping %s: not named <ID>_<Name>.py", path)
            continue
        problem = int(match.group(1))
        if problem not in ids:
            continue
        if problem in chosen:
            # Task ids must be unique, and silently picking one of the two would hide a broken checkout.
            raise TaskError(f"{level_dir}: two files share problem id {problem}: {chosen[problem][2].name}, {path.name}")
        chosen[problem] = (problem, match.group(2), path)
    return [chosen[key] for key in sorted(chosen)]


def load_kernelbench(root: str, levels: NumberSet, ids: NumberSet) -> list[Task]:
    """Every problem under ``root`` whose level is in ``levels`` and whose id is in ``ids``."""
    base = find_dataset_dir(Path(root).expanduser())
    tasks: list[Task] = []
    for level, level_dir in sorted(_level_dirs(base).items()):
        if level not in levels:
            continue
        for problem, name, path in _problems(level_dir, ids):
            tasks.append(
                Task(
                    id=f"kernelbench/L{level}/{problem}",
                    name=name,
                    level=level,
                    path=str(path.resolve()),
                    source=read_task_source(path),
                    origin="kernelbench",
                )
            )
    if not tasks:
        raise TaskError(f"no KernelBench task in {base} matches levels {levels.text!r} and ids {ids.text!r}")
    log.info("loaded %d KernelBench task(s) from %s", len(tasks), base)
    return tasks
