"""One regime on one task, recorded exactly as a study records a cell.

`kernelwright run --out` and `kernelwright optimize` write their folders through this, so every
folder the tool writes has the same three files as a study (manifest.json, attempts.jsonl,
cells.jsonl) and `study report` reads it: one record shape and one writer (log.append_record:
one fsynced line per record) for all of them.

The folder is a one-task study: its manifest holds a StudySpec of that task, regime, seed and
device; each cell is keyed as `study run` keys it (the regime config with its seed, the model, the
device kind and the evaluation settings), so running the same thing again appends a newer line for
the same key and the report shows the latest.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from kernelwright.evaluate.config import EvalConfig
from kernelwright.records import Attempt, Cell, Task
from kernelwright.strategies.config import RegimeConfig
from kernelwright.study.log import ATTEMPTS, CELLS, append_record, sole_writer
from kernelwright.study.manifest import finish_invocation, record_invocation
from kernelwright.study.records import StudyAttempt, StudyCell
from kernelwright.study.spec import StudySpec


class CellLog:
    """Writes the cells of one invocation into `folder` (see the module doc)."""

    def __init__(self, folder: Path, task: Task, model: str, device: str, eval_settings: EvalConfig, *,
                 model_spec: str | None, kind: str, executor: str = "direct") -> None:
        self.folder, self.task, self.model, self.device, self.kind = folder, task, model, device, kind
        self.spec_args = {"out": folder, "model": model_spec, "tasks": [task.path or task.id], "devices": [device],
                          "eval": eval_settings, "executor": executor}
        self._started: str | None = None
        self.cells = 0

    def spec(self, config: RegimeConfig) -> StudySpec:
        return StudySpec(**self.spec_args, regimes=[config.spec], seeds=[config.seed], target=config.target,
                         max_tokens=config.max_tokens)

    def config_hash(self, config: RegimeConfig) -> str:
        """The cell's config hash, as `study run` computes it; pass it to run_regime."""
        return self.spec(config).config_hash(config, self.model)

    @contextlib.contextmanager
    def open(self, first: RegimeConfig) -> Iterator[CellLog]:
        """Hold the folder as its only writer and record this invocation in its manifest; its end
        is recorded however the block ends (completed, interrupted, or the error's type)."""
        with sole_writer(self.folder):
            spec = self.spec(first)
            chash = spec.config_hash(first, self.model)
            manifest = record_invocation(self.folder, spec.model_dump(mode="json"), {chash: self._record(first, spec)},
                                         [self.device], pending=1, kind=self.kind)
            self._started = manifest.runs[-1].started
            ended = "completed"
            try:
                yield self
            except KeyboardInterrupt:
                ended = "interrupted"
                raise
            except BaseException as e:
                ended = f"error: {type(e).__name__}"
                raise
            finally:
                finish_invocation(self.folder, self._started, ended, done=self.cells)

    def _record(self, config: RegimeConfig, spec: StudySpec) -> dict:
        return {"regime": config.model_dump(mode="json"), "spec": config.spec, "model": self.model,
                "device": spec.device_kind, "eval": spec.eval.keyed()}

    def cell(self, config: RegimeConfig) -> OneCell:
        return OneCell(self, config)


class OneCell:
    """The attempts and the closing line of one cell: `sink` for run_regime, then `finish`."""

    def __init__(self, log: CellLog, config: RegimeConfig) -> None:
        self.log, self.config = log, config
        self.config_hash = log.config_hash(config)
        self.key = f"{self.config_hash}/{config.spec}/{log.task.id}"
        self.run = uuid.uuid4().hex[:12]

    def sink(self, a: Attempt) -> None:
        append_record(self.log.folder / ATTEMPTS, StudyAttempt.logged(
            a, run=self.run, cell_key=self.key, seed=self.config.seed, config_hash=self.config_hash,
            level=self.log.task.level))  # fmt: skip

    def finish(self, cell: Cell) -> StudyCell:
        if cell.key != self.key:
            raise RuntimeError(f"cell key mismatch: planned {self.key}, got {cell.key}")
        t = self.log.task
        line = StudyCell(**cell.model_dump(), run=self.run, seed=self.config.seed, level=t.level, task_name=t.name,
                         task_hash=t.source_hash, model=self.log.model, device=self.log.device)
        append_record(self.log.folder / CELLS, line)
        self.log.cells += 1
        return line
