"""Turn a task spec string into Task records; see the package docstring for the spec forms."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kernelwright.records import Task
from kernelwright.tasks.builtin import ID_PREFIX, load_builtin_named, load_builtin_selection
from kernelwright.tasks.errors import TaskError
from kernelwright.tasks.kernelbench import find_dataset_dir, load_kernelbench
from kernelwright.tasks.ranges import parse_numbers
from kernelwright.tasks.source_check import (
    missing_definitions,
    parse_source,
    read_task_source,
    read_text,
    require_task_shape,
)

log = logging.getLogger(__name__)

BUILTIN = "builtin"
KERNELBENCH = "kernelbench"
SPEC_FORMS = "a .py file, a folder, builtin[:<levels>[:<ids>]], a built-in task name, or kernelbench:<root>[:<levels>[:<ids>]]"


def _file_task(path: Path, source: str | None = None) -> Task:
    """A user's task file; ``source`` is its already-checked text, when the caller has read it."""
    text = read_task_source(path) if source is None else source
    return Task(id=path.stem, name=path.stem, level=None, path=str(path.resolve()), source=text, origin="file")


def _folder_tasks(folder: Path) -> list[Task]:
    files = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py" and p.is_file())
    if not files:
        raise TaskError(f"no *.py task files in folder {folder}")
    tasks: list[Task] = []
    for path in files:
        text = read_text(path)
        missing = missing_definitions(parse_source(text, str(path)))
        if len(missing) == 3:
            # A helper module next to the tasks defines none of the three names: not a task, so skip
            # it. A file with some but not all of them is a broken task and must not vanish quietly.
            log.warning("skipping %s: defines none of Model, get_inputs, get_init_inputs", path)
            continue
        if missing:
            require_task_shape(text, str(path))  # raises, with the same message as for one file
        tasks.append(_file_task(path, text))
    if not tasks:
        raise TaskError(f"no file in folder {folder} defines class Model, def get_inputs and def get_init_inputs")
    return tasks


def _split_selectors(rest: str, spec: str, head: str) -> tuple[str | None, str | None]:
    """``"<levels>[:<ids>]"`` -> (levels, ids), each None when absent."""
    if not rest:
        return None, None
    parts = rest.split(":")
    if len(parts) > 2:
        raise TaskError(f"malformed spec {spec!r}: expected {head}[:<levels>[:<ids>]]")
    return parts[0], parts[1] if len(parts) == 2 else None


def _kernelbench_tasks(spec: str) -> list[Task]:
    body = spec[len(KERNELBENCH) + 1 :]
    # Roots containing ':' are not supported; the colon always separates root, levels and ids.
    root, _, selectors = body.partition(":")
    if not root.strip():
        raise TaskError(f"malformed spec {spec!r}: expected kernelbench:<root>[:<levels>[:<ids>]]")
    levels, ids = _split_selectors(selectors, spec, "kernelbench:<root>")
    return load_kernelbench(root, parse_numbers(levels, "level", spec), parse_numbers(ids, "id", spec))


def _looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.endswith(".py") or spec.startswith((".", "~"))


def load_tasks(spec: str) -> list[Task]:
    """All tasks that ``spec`` names, in a stable order; raises TaskError on any bad input (a study
    loads with `resolve_tasks` instead, where a broken file is a TaskFailure)."""
    if not isinstance(spec, str) or not spec.strip():
        raise TaskError(f"empty task spec: expected {SPEC_FORMS}")
    spec = spec.strip()
    if spec == KERNELBENCH or spec.startswith(KERNELBENCH + ":"):
        if spec == KERNELBENCH:
            raise TaskError(f"malformed spec {spec!r}: expected kernelbench:<root>[:<levels>[:<ids>]]")
        return _kernelbench_tasks(spec)
    if spec == BUILTIN or spec.startswith(BUILTIN + ":"):
        levels, ids = _split_selectors(spec[len(BUILTIN) + 1 :], spec, BUILTIN)
        return load_builtin_selection(parse_numbers(levels, "level", spec), parse_numbers(ids, "id", spec))
    if spec.startswith(ID_PREFIX):
        return load_builtin_named(spec)

    path = Path(spec).expanduser()
    if path.is_dir():
        return _folder_tasks(path)
    if path.is_file():
        return [_file_task(path)]
    if path.exists():
        raise TaskError(f"not a regular file or folder: {spec}")
    if _looks_like_path(spec):
        raise TaskError(f"no such file or folder: {spec}")
    return load_builtin_named(spec, also_not_a_path=True)


def load_task(spec: str) -> Task:
    """The single task ``spec`` names; raises TaskError when it names none or several."""
    tasks = load_tasks(spec)
    if len(tasks) != 1:
        raise TaskError(f"spec {spec!r} matched {len(tasks)} tasks, expected exactly one: {', '.join(t.id for t in tasks[:5])}{' ...' if len(tasks) > 5 else ''}")
    return tasks[0]


# -- lenient loading: a study's tasks, where one broken file is a recorded failure -----------------
#
# `load_tasks` rejects a whole folder or KernelBench selection when any file in it is broken; that is
# right for `kernelwright run`, but a study of 250 problems must not stop (or silently shrink) because
# of one. `resolve_tasks` first asks load_tasks; if that fails for a folder or a KernelBench spec, it
# loads file by file and returns a TaskFailure for each file that fails, which the study runner turns
# into a failed cell per regime and seed.

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
