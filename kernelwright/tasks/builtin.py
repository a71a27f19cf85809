"""The built-in suite shipped in ``kernelwright/tasks/suite/level{N}/NN_snake_name.py``."""

from __future__ import annotations

import difflib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kernelwright.records import Task
from kernelwright.tasks.errors import TaskError
from kernelwright.tasks.ranges import NumberSet
from kernelwright.tasks.source_check import read_task_source

log = logging.getLogger(__name__)

SUITE_DIR = Path(__file__).resolve().parent / "suite"
SIZE_ENV = "KERNELWRIGHT_SIZE"
SIZES = ("small", "full")
ID_PREFIX = "builtin/"

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_STEM = re.compile(r"^(\d{2})_([a-z0-9]+(?:_[a-z0-9]+)*)$")


@dataclass(frozen=True)
class SuiteEntry:
    """One built-in task file, located but not yet read."""

    level: int
    number: int
    stem: str  # "03_softmax"
    name: str  # "softmax"
    path: Path

    @property
    def id(self) -> str:
        return f"{ID_PREFIX}L{self.level}/{self.stem}"

    def load(self) -> Task:
        return Task(
            id=self.id,
            name=self.name,
            level=self.level,
            path=str(self.path),
            source=read_task_source(self.path),
            origin="builtin",
        )


def suite_entries(suite_dir: Path = SUITE_DIR) -> list[SuiteEntry]:
    """All built-in task files, ordered by level then number."""
    if not suite_dir.is_dir():
        raise TaskError(f"the built-in suite folder is missing: {suite_dir} (a broken install?)")
    entries: list[SuiteEntry] = []
    for level_dir in suite_dir.iterdir():
        level_match = _LEVEL_DIR.match(level_dir.name)
        if level_match is None or not level_dir.is_dir():
            continue
        for path in level_dir.glob("*.py"):
            stem_match = _STEM.match(path.stem)
            if stem_match is None:
                continue  # __init__.py and helpers are not tasks
            entries.append(
                SuiteEntry(
                    level=int(level_match.group(1)),
                    number=int(stem_match.group(1)),
                    stem=path.stem,
                    name=stem_match.group(2),
                    path=path,
                )
            )
    return sorted(entries, key=lambda e: (e.level, e.number))


def warn_on_unknown_size() -> None:
    # The task files treat anything but "full" as small; say so rather than surprise the user later.
    value = os.environ.get(SIZE_ENV)
    if value is not None and value not in SIZES:
        log.warning("%s=%r is neither 'small' nor 'full'; built-in tasks will use the small size", SIZE_ENV, value)


def load_builtin_selection(levels: NumberSet, ids: NumberSet) -> list[Task]:
    """Built-in tasks by level list and by their NN prefixes (``builtin:<levels>[:<ids>]``)."""
    warn_on_unknown_size()
    chosen = [entry for entry in suite_entries() if entry.level in levels and entry.number in ids]
    if not chosen:
        raise TaskError(f"no built-in task matches levels {levels.text!r} and ids {ids.text!r}")
    return [entry.load() for entry in chosen]


def load_builtin_named(key: str, *, also_not_a_path: bool = False) -> list[Task]:
    """Built-in tasks whose id (``builtin/L1/03_softmax``), stem or bare name equals ``key``."""
    warn_on_unknown_size()
    entries = suite_entries()
    chosen = [entry for entry in entries if key in (entry.id, entry.stem, entry.name)]
    if chosen:
        return [entry.load() for entry in chosen]
    # Suggest in the form the user typed: ids for "builtin/...", stems for "NN_...", else names.
    if key.startswith(ID_PREFIX):
        vocabulary = [entry.id for entry in entries]
    elif key[:2].isdigit():
        vocabulary = [entry.stem for entry in entries]
    else:
        vocabulary = [entry.name for entry in entries]
    close = difflib.get_close_matches(key, vocabulary, n=5, cutoff=0.5)
    hint = f"close matches: {', '.join(close)}" if close else "use 'builtin' to load them all, or see kernelwright/tasks/suite/README.md"
    where = " (and no file or folder by that name)" if also_not_a_path else ""
    raise TaskError(f"unknown built-in task {key!r}{where}; {hint}")
