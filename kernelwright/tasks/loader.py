"""Turn a task spec string into Task records; see the package docstring for the spec forms."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kernelwright.records import Task
from kernelwright.tasks.builtin import ID_PREFIX, load_builtin_named, load_builtin_selection
from kernelwright.tasks.errors import TaskError
from kernelwright.tasks.kernelbench import load_kernelbench
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
    """All tasks that ``spec`` names, in a stable order; raises TaskError on any bad input."""
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
