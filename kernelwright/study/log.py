"""Append-only JSONL logs that survive SIGKILL, and the rules for reading them back.

Writing: one record per line, written with a single write, then flushed and fsync'd, so a record
is either wholly on disk or (killed mid-write) a torn last line. Before appending to a file whose
last byte is not a newline, a newline is written first: the torn fragment becomes a line of its
own instead of corrupting the next record.

Reading (`read_study`):
- lines that do not parse (a torn fragment) are skipped and counted;
- cells: for one cell key the *last* line wins (a failed cell redone with --retry-failed appends
  a newer line; nothing else ever writes a key twice);
- attempts: only those whose (cell key, run id) match a kept cell line, each attempt id once.
  Attempts of a cell killed half-way carry a run id no cell line has, so they never reach a
  report or an export, and the redone cell's attempts are not doubled.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kernelwright.errors import BadInput
from kernelwright.records import NewerSchema
from kernelwright.study.records import Manifest, StudyAttempt, StudyCell

log = logging.getLogger(__name__)

ATTEMPTS = "attempts.jsonl"
CELLS = "cells.jsonl"
MANIFEST = "manifest.json"

M = TypeVar("M", bound=BaseModel)

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(path.resolve()), threading.Lock())


def append_record(path: Path, record: BaseModel) -> None:
    """Append one record as one line; durable when this returns. A write that fails (a full disk)
    takes its partial line back: the file holds whole records only, and the error is raised."""
    line = (record.model_dump_json() + "\n").encode("utf-8")
    with _lock_for(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size:
                with open(path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        line = b"\n" + line  # close a torn line left by a killed writer
            try:
                written = 0
                while written < len(line):  # a full disk first writes short, then refuses
                    n = os.write(fd, line[written:])
                    if n <= 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
                    written += n
                os.fsync(fd)
            except OSError as e:
                os.ftruncate(fd, size)
                if e.filename is None:
                    raise OSError(e.errno, e.strerror, str(path)) from e
                raise
        finally:
            os.close(fd)


def read_records(path: Path, model: type[M]) -> tuple[list[M], int]:
    """The records of a JSONL file that parse, in order, and how many lines did not."""
    if not path.is_file():
        return [], 0
    out: list[M] = []
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                out.append(model.model_validate_json(line))
            except ValidationError as e:
                newer = [x["ctx"]["error"] for x in e.errors() if isinstance((x.get("ctx") or {}).get("error"), NewerSchema)]
                if newer:  # not a torn line: the whole file is a newer kernelwright's, and must not be half read
                    raise NewerSchema(f"{path}: {newer[0]}") from None
                bad += 1
    if bad:
        log.warning("%s: skipped %d unreadable line(s) (a write cut short by a kill)", path, bad)
    return out, bad


def write_text_atomic(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a temporary file, synced, renamed over it when complete,
    and removed when the write fails (a full disk leaves no partial file that looks finished)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@dataclass
class StudyData:
    """One study folder (or several merged), as the report and the export see it."""

    folders: list[Path]
    cells: list[StudyCell]  # one per key, in the order keys were first written
    attempts: dict[str, list[StudyAttempt]]  # cell key -> its attempts, in generation order
    manifests: list[Manifest] = field(default_factory=list)
    skipped_lines: int = 0
    dropped_attempts: int = 0  # of cells killed half-way, or of superseded runs

    def attempts_of(self, cell: StudyCell) -> list[StudyAttempt]:
        return self.attempts.get(cell.key, [])

    def selected(self, cell: StudyCell) -> StudyAttempt | None:
        return next((a for a in self.attempts_of(cell) if a.id == cell.selected), None)

    def all_attempts(self) -> Iterator[StudyAttempt]:
        for cell in self.cells:
            yield from self.attempts_of(cell)


def read_manifest(folder: Path) -> Manifest | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        return Manifest.model_validate_json(path.read_text())
    except ValidationError:
        log.warning("%s: not a study manifest; ignored", path)
        return None


def read_cells(folder: Path) -> dict[str, StudyCell]:
    """Cell key -> the last line written for it."""
    cells, _ = read_records(folder / CELLS, StudyCell)
    return {c.key: c for c in cells}


def read_study(*folders: Path) -> StudyData:
    """Several folders merge; where two hold the same cell key, the later folder's line wins."""
    cells: dict[str, StudyCell] = {}
    attempts: dict[str, list[StudyAttempt]] = {}
    manifests: list[Manifest] = []
    skipped = dropped = 0
    for folder in folders:
        raw_cells, bad_c = read_records(folder / CELLS, StudyCell)
        raw_attempts, bad_a = read_records(folder / ATTEMPTS, StudyAttempt)
        skipped += bad_c + bad_a
        kept = {c.key: c for c in raw_cells}  # last line per key wins
        for c in kept.values():
            cells.pop(c.key, None)
            cells[c.key] = c
        runs = {(c.key, c.run) for c in kept.values()}
        seen: set[str] = set()
        mine: dict[str, list[StudyAttempt]] = {}
        for a in raw_attempts:
            if (a.cell_key, a.run) not in runs or a.id in seen:
                dropped += 1
                continue
            seen.add(a.id)
            mine.setdefault(a.cell_key, []).append(a)
        for key in kept:
            attempts[key] = mine.get(key, [])
        m = read_manifest(folder)
        if m is not None:
            manifests.append(m)
    ordered = list(cells.values())
    return StudyData(folders=list(folders), cells=ordered, attempts={c.key: attempts.get(c.key, []) for c in ordered},
                     manifests=manifests, skipped_lines=skipped, dropped_attempts=dropped)


# -- one writer per folder ---------------------------------------------------------------------

WRITER_LOCK = ".writer.lock"


class StudyBusy(BadInput):
    """Another kernelwright process is writing this study folder (one line, names it)."""


@contextlib.contextmanager
def sole_writer(folder: Path) -> Iterator[None]:
    """Hold `folder` as its only writer for the block: an flock on `<folder>/.writer.lock`, which
    the kernel drops when the holder dies (a killed run never leaves a folder locked). A second
    `study run` or `study import` on the folder stops before planning anything, naming the holder,
    instead of running every cell again beside it."""
    import fcntl
    import time

    folder.mkdir(parents=True, exist_ok=True)
    f = open(folder / WRITER_LOCK, "a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise StudyBusy(f"{folder} is being written by {holder}; wait for it to end or use another --out") from None
        f.seek(0)
        f.truncate()
        f.write(f"kernelwright pid {os.getpid()} (since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
        f.flush()
        yield
    finally:
        f.close()  # drops the flock
