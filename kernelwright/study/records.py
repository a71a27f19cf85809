"""What a study folder holds, as typed records.

    manifest.json    Manifest: the spec, the cell configs by hash, versions, machine, git hash, runs
    attempts.jsonl   StudyAttempt: one line per generated (or imported) candidate, as it finishes
    cells.jsonl      StudyCell: one line per finished regime x task x seed, with the pick and why

StudyAttempt and StudyCell extend the core Attempt and Cell with the study's own fields, so every
line is also a valid Attempt / Cell for code that knows nothing of studies.

`run` ties them together: each execution of a cell draws a fresh run id, stamped on its attempts
and on its cell line. A cell killed half-way leaves attempts whose run id no cell line carries;
readers drop those (log.read_study), so a redone cell never shows its attempts twice.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Literal

from pydantic import BaseModel, Field

from kernelwright.records import Attempt, Cell


def now_iso() -> str:
    """Now, UTC, to the second: the manifest's run times and each attempt's `recorded_at`."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# why a cell has no regular outcome: its task did not load, the import named a problem no task
# matches, or the regime's run raised (a worker died, a GPU stopped answering, the backend failed)
FailureKind = Literal["task_load", "task_missing", "worker"]


class StudyAttempt(Attempt):
    run: str  # the execution of the cell this attempt belongs to
    cell_key: str
    seed: int = 0
    config_hash: str
    level: int | None = None
    source: str | None = None  # for imported attempts: the file (and sample) it came from
    # when the study logged it (UTC, ISO 8601): a study cut short (a machine taken away) still says
    # how long it ran and when each verified kernel came; None in logs written before it existed
    recorded_at: str | None = None

    @classmethod
    def logged(cls, a: Attempt, **study: Any) -> StudyAttempt:
        """`a` as the study logs it now, with the study's fields."""
        return cls(**a.model_dump(), **study, recorded_at=now_iso())


class StudyCell(Cell):
    run: str
    seed: int = 0
    level: int | None = None
    task_name: str = ""
    task_hash: str | None = None  # sha256 of the task source; a changed task is redone
    model: str = ""
    device: str | None = None  # where it was evaluated (not part of the key)
    status: Literal["ok", "failed"] = "ok"
    failure: FailureKind | None = None
    error: str | None = None  # for failed cells: what went wrong, in one or a few lines
    imported: bool = False
    inputs_hash: str | None = None  # imported cells: hash of the imported texts


class RunInfo(BaseModel):
    started: str  # ISO 8601, UTC
    argv: list[str] = Field(default_factory=list)
    pending: int = 0  # cells this invocation set out to do
    kind: str = "run"  # run | import
    versions: dict[str, str] = Field(default_factory=dict)
    commit: str | None = None
    # filled when the invocation ends (absent: it is still running, or its process was killed)
    finished: str | None = None  # ISO 8601, UTC
    ended: str | None = None  # "completed", "stopped: <why>", "interrupted" or "error: <type>"
    done: int | None = None  # cells finished by this invocation
    failed: int | None = None  # cells whose regime raised


class Manifest(BaseModel):
    study: dict[str, Any]  # the spec of the first invocation (later ones are in `runs`)
    configs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # config hash -> what it hashes
    versions: dict[str, str] = Field(default_factory=dict)
    machine: dict[str, Any] = Field(default_factory=dict)
    git: dict[str, Any] = Field(default_factory=dict)
    started: str
    runs: list[RunInfo] = Field(default_factory=list)
