"""The study's tasks, where one broken task file is a recorded failure rather than a lost study.

`kernelwright.tasks.load_tasks` rejects a whole folder or KernelBench selection when any file in
it is broken; that is right for `kernelwright run`, but a study of 250 problems must not stop (or
silently shrink) because of one. `resolve_tasks` first asks load_tasks; if that fails for a folder
or a KernelBench spec, it loads file by file and returns a TaskFailure for each file that fails,
which the runner turns into a failed cell per regime and seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelwright.records import Task
from kernelwright.tasks import TaskError, load_tasks
from kernelwright.tasks.kernelbench import find_dataset_dir
from kernelwright.tasks.ranges import parse_numbers
from kernelwright.tasks.source_check import (
    missing_definitions,
    parse_source,
    read_task_source,
    read_text,
)


@dataclass(frozen=True)
class TaskFailure:
    id: str
    name: str
    level: int | None
    error: str
    source_hash: str | None = None  # of the file's bytes, so a fixed file is retried


TaskOrFailure = Task | TaskFailure

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


def task_number(task_id: str) -> int | None:
    """The problem number in an id: kernelbench/L1/23 -> 23, builtin/L2/01_linear_gelu_scale -> 1."""
    m = re.match(r"^(\d+)", task_id.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _file_hash(path: Path) -> str | None:
    from kernelwright.records import sha256_text

    try:
        return sha256_text(path.read_text(errors="replace"))
    except OSError:
        return None


def _folder(folder: Path) -> list[TaskOrFailure]:
    out: list[TaskOrFailure] = []
    for path in sorted(p for p in folder.glob("*.py") if p.name != "__init__.py" and p.is_file()):
        try:
            text = read_text(path)
            if len(missing_definitions(parse_source(text, str(path)))) == 3:
                continue  # a helper module, as load_tasks treats it
            [task] = load_tasks(str(path))
            out.append(task)
        except TaskError as e:
            out.append(TaskFailure(id=path.stem, name=path.stem, level=None, error=str(e), source_hash=_file_hash(path)))
    return out


def _kernelbench(spec: str) -> list[TaskOrFailure]:
    root, _, selectors = spec[len("kernelbench:"):].partition(":")
    levels_text, _, ids_text = selectors.partition(":")
    levels = parse_numbers(levels_text or None, "level", spec)
    ids = parse_numbers(ids_text or None, "id", spec)
    base = find_dataset_dir(Path(root).expanduser())
    out: list[TaskOrFailure] = []
    for level_dir in sorted(base.iterdir()):
        lm = _LEVEL_DIR.match(level_dir.name)
        if not lm or not level_dir.is_dir() or int(lm.group(1)) not in levels:
            continue
        level = int(lm.group(1))
        found = sorted((int(m.group(1)), m.group(2), p) for p in level_dir.glob("*.py")
                       if (m := _PROBLEM_FILE.match(p.name)))
        for number, name, path in found:
            if number not in ids:
                continue
            tid = f"kernelbench/L{level}/{number}"
            try:
                out.append(Task(id=tid, name=name, level=level, path=str(path.resolve()),
                                source=read_task_source(path), origin="kernelbench"))
            except TaskError as e:
                out.append(TaskFailure(id=tid, name=name, level=level, error=str(e), source_hash=_file_hash(path)))
    return out


def resolve_tasks(specs: str | list[str]) -> list[TaskOrFailure]:
    """Tasks for one spec or several (in order, each task once); raises TaskError only when a spec
    itself is unusable (nothing to load)."""
    if isinstance(specs, str):
        specs = [specs]
    got: list[TaskOrFailure] = []
    for spec in specs:
        ids = {t.id for t in got}
        got.extend(t for t in _resolve_one(spec) if t.id not in ids)
    return got


def _resolve_one(spec: str) -> list[TaskOrFailure]:
    try:
        return list(load_tasks(spec))
    except TaskError:
        spec = spec.strip()
        if spec.startswith("kernelbench:"):
            got = _kernelbench(spec)
        elif Path(spec).expanduser().is_dir():
            got = _folder(Path(spec).expanduser())
        else:
            raise
        if not got:
            raise
        return _unique(got)


def _unique(items: list[TaskOrFailure]) -> list[TaskOrFailure]:
    """Two files with one task id cannot both be cells; neither is picked silently."""
    by_id: dict[str, list[TaskOrFailure]] = {}
    for t in items:
        by_id.setdefault(t.id, []).append(t)
    out: list[TaskOrFailure] = []
    for tid, group in by_id.items():
        if len(group) == 1:
            out.append(group[0])
        else:
            first = group[0]
            out.append(TaskFailure(id=tid, name=first.name, level=first.level,
                                   error=f"{len(group)} files share the task id {tid}"))
    return out
