"""Re-score other tools' generations with our evaluator: `kernelwright study import`.

Two input shapes:
(a) a KernelBench-style runs folder: `level_{L}_problem_{P}_sample_{S}_kernel.py` (searched
    recursively), one candidate per file;
(b) a results JSON of the reference study's shape:
    `{meta, levels: {L: {P: {extracted_code, raw_response, turns: [...], ...}}}}`. Each turn (a
    dict with raw_response/response and/or extracted_code/code, or a plain string) becomes an
    attempt of that turn; the top-level answer is one more attempt unless its code equals the
    last turn's; without turns it is the only attempt.

Problem P of level L maps to the task of the `--tasks` selection with that level and number
(`kernelbench/L1/23` is number 23, `builtin/L2/01_linear_gelu_scale` number 1). A problem no task
matches is a failed cell (`task_missing`), not a silent drop.

Every candidate is evaluated exactly as it was published: extracted from the answer, never
grounded or repaired, so the score is that of the published code. The pick per cell is made by
our ranking key (strategies/selection.py), as for our own regimes. Cells are keyed like ours
(`<config hash>/import:<label>/<task id>`), the hash covering the label, the device kind and the
evaluation settings; `inputs_hash` (the imported texts) makes a changed input redo its cell, and
re-running the same import resumes like `study run`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwright.device import device_kind
from kernelwright.errors import BadInput
from kernelwright.evaluate.config import EvalConfig, EvalRun
from kernelwright.executors.base import Executor, make_executor, opened
from kernelwright.records import Attempt, Cell, Task, Verdict, sha256_text
from kernelwright.study.log import sole_writer
from kernelwright.study.runner import (
    CellJob,
    DeviceSlots,
    EventFn,
    RunSummary,
    is_done,
    run_jobs,
)
from kernelwright.tasks import TaskFailure, resolve_tasks, task_number


class ImportInputError(BadInput, ValueError):
    """Input that cannot be imported; the message is one line."""


_RUN_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


@dataclass(frozen=True)
class Imported:
    level: int
    problem: int
    turn: int
    sample: int
    raw: str  # the text as published (a whole answer, or the kernel file)
    code: str | None  # extracted code where the source gives it separately
    source: str  # where it came from: a file, or FILE#levels/L/P/turns/i
    prompt: str | None = None


def read_runs_folder(folder: Path) -> list[Imported]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        m = _RUN_FILE.match(path.name)
        if m:
            text = path.read_text(errors="replace")
            found.append(Imported(level=int(m.group(1)), problem=int(m.group(2)), turn=0, sample=int(m.group(3)),
                                  raw=text, code=None, source=str(path)))
    if not found:
        raise ImportInputError(f"no level_L_problem_P_sample_S_kernel.py files under {folder}")
    return found


def _number(key: str, what: str, where: Path) -> int:
    m = re.search(r"(\d+)$", str(key))
    if not m:
        raise ImportInputError(f"{where}: {what} key {key!r} is not a number")
    return int(m.group(1))


def _texts(entry: Any) -> tuple[str | None, str | None, str | None]:
    """(raw response, extracted code, prompt) of one turn or problem entry."""
    if isinstance(entry, str):
        return entry, None, None
    if not isinstance(entry, dict):
        return None, None, None
    raw = next((entry[k] for k in ("raw_response", "response", "completion", "output") if isinstance(entry.get(k), str)), None)
    code = next((entry[k] for k in ("extracted_code", "code", "kernel") if isinstance(entry.get(k), str)), None)
    prompt = entry.get("prompt") if isinstance(entry.get("prompt"), str) else None
    return raw, code, prompt


def read_results_json(path: Path) -> tuple[dict[str, Any], list[Imported]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ImportInputError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("levels"), dict):
        raise ImportInputError(f"{path}: expected {{meta, levels: {{L: {{P: {{...}}}}}}}}")
    found: list[Imported] = []
    for lkey, problems in data["levels"].items():
        level = _number(lkey, "level", path)
        if not isinstance(problems, dict):
            raise ImportInputError(f"{path}: levels.{lkey} is not an object of problems")
        for pkey, entry in problems.items():
            problem = _number(pkey, "problem", path)
            where = f"{path}#levels/{lkey}/{pkey}"
            turns = entry.get("turns") if isinstance(entry, dict) else None
            last_code = None
            n = 0
            for i, turn in enumerate(turns if isinstance(turns, list) else []):
                raw, code, prompt = _texts(turn)
                if raw is None and code is None:
                    continue
                found.append(Imported(level=level, problem=problem, turn=i, sample=0, raw=raw if raw is not None else code,
                                      code=code, source=f"{where}/turns/{i}", prompt=prompt))
                last_code, n = code, i + 1
            raw, code, prompt = _texts(entry)
            if (raw is not None or code is not None) and not (n and code is not None and code == last_code):
                found.append(Imported(level=level, problem=problem, turn=n, sample=0, raw=raw if raw is not None else code,
                                      code=code, source=where, prompt=prompt))
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    return meta, found


def read_inputs(paths: Sequence[Path]) -> list[Imported]:
    out: list[Imported] = []
    for p in paths:
        if p.is_dir():
            out += read_runs_folder(p)
        elif p.is_file():
            out += read_results_json(p)[1]
        else:
            raise ImportInputError(f"no such file or folder: {p}")
    return out


def _attempt(key: str, regime: str, task: Task, c: Imported, result) -> Attempt:
    from kernelwright.extract import extract_code

    code = c.code if c.code is not None else extract_code(c.raw)
    messages = [{"role": "user", "content": c.prompt}] if c.prompt else []
    return Attempt(
        id=f"{key}/t{c.turn}/s{c.sample}", task_id=task.id, regime=regime, turn=c.turn, sample=c.sample,
        role="imported", prompt_hash=hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16],
        messages=messages, raw_response=c.raw, code=code, code_hash=sha256_text(code) if code else None, eval=result,
        wall_s=round(sum(s.seconds for s in result.stages), 3), notes={"source": c.source},
    )  # fmt: skip


def _work(key: str, regime: str, chash: str, task: Task, cands: list[Imported], settings: EvalConfig,
          cache_dir: str | None):
    def work(device: str, sink, executor: Executor) -> Cell:
        from kernelwright.strategies import selection

        attempts = []
        for c in cands:
            # the separately published code when there is one, else the answer as published
            result = executor.evaluate(task, c.code if c.code is not None else c.raw,
                                       EvalRun(settings, device=device, cache_dir=cache_dir))
            a = _attempt(key, regime, task, c, result)
            attempts.append(a)
            sink(a)
        best = selection.select(attempts)
        return Cell(key=key, task_id=task.id, regime=regime, config_hash=chash, attempt_ids=[a.id for a in attempts],
                    selected=best.id if best else None, reason=selection.reason(best, len(attempts)),
                    verdict=best.eval.verdict if best else Verdict.NO_CODE,
                    speedup=best.eval.speedup if best else None, faster=bool(best and best.eval.faster),
                    custom_kernel=bool(best and best.eval.custom_kernel),
                    turns=1 + max((a.turn for a in attempts), default=0))

    return work


def plan_import(candidates: list[Imported], tasks: list, label: str, settings: EvalConfig, kind: str,
                cache_dir: str | None) -> tuple[list[CellJob], str]:
    regime = f"import:{label}"
    payload = {"import": label, "device": kind, "eval": settings.keyed()}
    chash = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
    by_number: dict[tuple[int, int], Task | TaskFailure] = {}
    for t in tasks:
        number = task_number(t.id)
        if t.level is None or number is None:
            continue
        if (t.level, number) in by_number:
            raise ImportInputError(f"tasks {by_number[(t.level, number)].id} and {t.id} both are level {t.level} "
                               f"problem {number}; narrow --tasks")
        by_number[(t.level, number)] = t
    groups: dict[tuple[int, int], list[Imported]] = {}
    for c in candidates:
        groups.setdefault((c.level, c.problem), []).append(c)
    # every selected task is a cell: a problem the input has no code for is scored `no_code` (a
    # failure in every rate), never left out of the denominator
    for number in by_number:
        groups.setdefault(number, [])
    jobs = []
    for (level, problem), cands in sorted(groups.items()):
        cands = sorted(cands, key=lambda c: (c.turn, c.sample))
        seen = set()
        for c in cands:
            if (c.turn, c.sample) in seen:
                raise ImportInputError(f"level {level} problem {problem}: two candidates for turn {c.turn} sample {c.sample}")
            seen.add((c.turn, c.sample))
        inputs = sha256_text(json.dumps([[c.turn, c.sample, c.raw, c.code] for c in cands]))
        task = by_number.get((level, problem))
        tid = task.id if task is not None else f"unmatched/L{level}/{problem}"
        key = f"{chash}/{regime}/{tid}"
        common = {"key": key, "regime": regime, "config_hash": chash, "seed": 0, "task_id": tid, "level": level,
                  "model": label, "imported": True, "inputs_hash": inputs}
        if task is None:
            jobs.append(CellJob(**common, task_name="", task_hash=None, work=None,
                                failure=("task_missing", f"no task of the selection is level {level} problem {problem}")))
        elif isinstance(task, TaskFailure):
            jobs.append(CellJob(**common, task_name=task.name, task_hash=task.source_hash, work=None,
                                failure=("task_load", task.error)))
        else:
            jobs.append(CellJob(**common, task_name=task.name, task_hash=task.source_hash,
                                work=_work(key, regime, chash, task, cands, settings, cache_dir)))
    return jobs, chash


def import_study(inputs: Sequence[Path], task_specs: list[str], out: Path, *, label: str | None = None,
                 settings: EvalConfig | None = None, devices: Sequence[str] = ("cpu",),
                 cache_dir: str | None = None, jobs: int = 0, retry_failed: bool = False, executor: str = "local",
                 on_event: EventFn = lambda e: None, on_plan=lambda s: None) -> RunSummary:
    from kernelwright.device import validate_device
    from kernelwright.study.log import read_cells
    from kernelwright.study.manifest import record_invocation

    settings = settings or EvalConfig()
    for d in devices:
        validate_device(d, settings.compile_only)
    label = label or Path(inputs[0]).stem
    candidates = read_inputs(inputs)
    tasks = resolve_tasks(task_specs)
    kind = device_kind(devices[0])
    planned, chash = plan_import(candidates, tasks, label, settings, kind, cache_dir)
    with sole_writer(out):  # one writer per folder: a second invocation on it stops here (StudyBusy)
        done = read_cells(out)
        todo = [j for j in planned if not is_done(j, done, retry_failed)]
        summary = RunSummary(planned=len(planned), skipped=len(planned) - len(todo))
        on_plan(summary)
        if not todo:
            return summary
        spec = {"import": [str(p) for p in inputs], "tasks": task_specs, "label": label, "devices": list(devices),
                "eval": settings.keyed(), "executor": executor}
        record_invocation(out, spec, {chash: {"import": label, "device": kind, "eval": settings.keyed()}},
                          list(devices), pending=len(todo), kind="import")
        with opened(make_executor(executor, devices)) as evaluator:
            return run_jobs(todo, out, DeviceSlots(devices), jobs or len(devices), evaluator, on_event, summary)
