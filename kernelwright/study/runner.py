"""Run a study: plan every regime x task x seed cell, skip the finished ones, run the rest.

Spreading the work (kept simple on purpose):
- cells run on a thread pool (`StudySpec.concurrency`, default two per device);
- a cell is assigned the least loaded device (DeviceSlots); nothing holds a device for a whole
  cell: the evaluation pool builds many cells' candidates at once on the cores and runs one
  evaluation per device at a time, and whatever would skew a timing on a device (a timing, a
  profile, the model generating) holds that device's lock itself (device.py), in
  this process and across processes;
- one model in this process: the requests of cells waiting at the same time are generated in
  one batched call (llm/coalesce.py), so `--jobs 32` on a GPU decodes 32 answers per step;
- scaffold plans (which run the reference on the device but time nothing) are made for every
  task up front, several at once, before any cell can be timing;
- candidates are evaluated in a fresh sandboxed child process each (kernelwright.evaluate), the
  per-candidate "worker": a timeout or crash kills only that child, and the evaluator probes a
  GPU before reusing it.
  A GPU that stops answering is taken out of the pool; when none is left the run stops, the
  cells it could not run stay pending (not recorded), and the command says so.

Failures are cells: a task that did not load, or a regime run that raised, is written to
cells.jsonl with status "failed" and the error, so a report counts it as a failure, never a gap.
They are not redone on resume unless `retry_failed` (a failure of the tool is an outcome too).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwright.device import DeviceLock
from kernelwright.errors import BadInput
from kernelwright.evaluate import EvalRun, GPUUnavailableError
from kernelwright.events import AttemptDone, CellDone, CellSkipped, CellStarted, EventFn, ExecutorReady
from kernelwright.executors.base import Executor
from kernelwright.llm.base import Backend, ServerUnreachable
from kernelwright.llm.budget import CLOCK, Budget, BudgetedBackend, BudgetSpent
from kernelwright.llm.coalesce import CoalescingBackend
from kernelwright.records import Attempt, Cell, Task, Verdict
from kernelwright.study.log import ATTEMPTS, CELLS, append_record, read_cells, sole_writer
from kernelwright.study.records import FailureKind, StudyAttempt, StudyCell
from kernelwright.study.spec import StudySpec
from kernelwright.tasks import TaskFailure, TaskOrFailure, resolve_tasks
from kernelwright.tasks.sizing import sized_or_failed

log = logging.getLogger(__name__)

# (device, sink) -> the Cell; the sink gets each Attempt as it finishes
CellWork = Callable[[str, Callable[[Attempt], None], Executor], Cell]  # (device, sink, executor) -> Cell


@dataclass
class CellJob:
    key: str
    regime: str
    config_hash: str
    seed: int
    task_id: str
    task_name: str
    level: int | None
    task_hash: str | None
    model: str
    work: CellWork | None  # None: the cell is a known failure (failure says which)
    failure: tuple[FailureKind, str] | None = None
    imported: bool = False
    scaffold: bool = False  # its regime asks for scaffolded generation (its plan is made up front)
    inputs_hash: str | None = None  # imported cells: the texts imported (a changed input is redone)


@dataclass
class RunSummary:
    planned: int
    skipped: int
    done: int = 0
    failed: int = 0
    not_run: int = 0
    attempts: int = 0
    verdicts: Counter = field(default_factory=Counter)
    stopped: str | None = None  # why cells were left pending (no device left, no model server)
    stopped_by_model: bool = False  # the model server could not be reached (else: no GPU left)

    @property
    def pending(self) -> int:
        return self.planned - self.skipped


def is_done(job: CellJob, done: dict[str, StudyCell], retry_failed: bool) -> bool:
    """A cell with this key (config hash included) finished for this very task source."""
    cell = done.get(job.key)
    if cell is None or cell.task_hash != job.task_hash or cell.inputs_hash != job.inputs_hash:
        return False
    return not (retry_failed and cell.status == "failed")


# -- devices -------------------------------------------------------------------------------------


class DeviceSlots:
    """Which device each cell runs on: the least loaded live one. Bookkeeping only: what must not
    overlap on a device (timings, profiles, the model generating) holds the device's lock itself
    (device.py)."""

    def __init__(self, devices: Sequence[str]) -> None:
        self.devices = list(devices)
        self.load = dict.fromkeys(self.devices, 0)
        self.lost: set[str] = set()
        self._guard = threading.Lock()
        self._local = threading.local()

    @property
    def current(self) -> str | None:
        return getattr(self._local, "device", None)

    def take(self) -> str | None:
        """The live device with the fewest cells assigned, or None when every device is lost."""
        with self._guard:
            alive = [d for d in self.devices if d not in self.lost]
            if not alive:
                return None
            d = min(alive, key=lambda x: self.load[x])
            self.load[d] += 1
            return d

    def give(self, device: str) -> None:
        with self._guard:
            self.load[device] -= 1

    def mark_lost(self, device: str) -> None:
        with self._guard:
            self.lost.add(device)

    @contextmanager
    def holding(self, device: str) -> Iterator[None]:
        """This thread's cell runs on `device` (facts are computed there)."""
        self._local.device = device
        try:
            yield
        finally:
            self._local.device = None


def shared_backend(inner: Backend) -> CoalescingBackend:
    """The model as the cell threads share it: requests of cells that wait at the same time are
    generated in one call, and a model with a device (llama.cpp on the CPU, transformers on a GPU)
    holds that device shared while it generates: its work would skew a timing there, but not a
    correctness run (no clock), and held exclusively it kept a GPU's correctness runs waiting for
    most of each batch (three studies on one H200: a Triton cell's correctness stage took 197 s)."""
    device = getattr(inner, "device", None)
    # backends that gain from many requests per call linger a moment to gather the first wave
    linger = 1.0 if getattr(inner, "batches_requests", False) else 0.0
    guard = DeviceLock(device, shared=True) if device else None
    if guard is not None and hasattr(inner, "batch_guard"):
        # a backend that generates a call in batches holds the device a batch at a time, so that a
        # timing waiting for it gets in between batches (transformers_backend.batch_guard)
        inner.batch_guard, guard = guard, None
    return CoalescingBackend(inner, guard, linger)


class FactsStore:
    """Task facts for the prompts, computed once per task (on the device the cell holds) and kept:
    in the spec's facts folder, and a copy in the study folder for the report."""

    def __init__(self, source: Path, copy_to: Path, slots: DeviceSlots) -> None:
        self.source, self.copy_to, self.slots = source, copy_to, slots
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, task: Task):
        from kernelwright.prompts.facts import PromptFacts, analyze_for_prompts, facts_file

        name = facts_file(task.id)
        with self._guard:
            lock = self._locks.setdefault(task.id, threading.Lock())
        with lock:
            src = self.source / name
            if src.is_file():
                facts = PromptFacts.load(src)
            else:
                facts = analyze_for_prompts(task, self.slots.current or "cpu")
                facts.save(src)
            dst = self.copy_to / name
            if not dst.is_file():
                facts.save(dst)
            return facts


# -- executing cells -------------------------------------------------------------------------------


def _failure_cell(job: CellJob, run: str, kind: FailureKind, error: str, attempts: list[Attempt],
                  device: str | None) -> StudyCell:
    return StudyCell(
        key=job.key, task_id=job.task_id, regime=job.regime, config_hash=job.config_hash,
        attempt_ids=[a.id for a in attempts], selected=None, reason=f"cell failed ({kind}): {error.splitlines()[0][:300]}",
        verdict=Verdict.CRASH, run=run, seed=job.seed, level=job.level, task_name=job.task_name,
        task_hash=job.task_hash, model=job.model, device=device, status="failed", failure=kind, error=error[:4000],
        imported=job.imported, inputs_hash=job.inputs_hash,
    )  # fmt: skip


@dataclass
class _Cells:
    """What the cells of one run_jobs share: where they are logged, the devices, the executor, the
    counts (under one lock: cells end on several threads) and the stop each cell asks first."""
    folder: Path
    slots: DeviceSlots
    executor: Executor
    on_event: EventFn
    summary: RunSummary
    stop: threading.Event = field(default_factory=threading.Event)
    count_lock: threading.Lock = field(default_factory=threading.Lock)

    def one(self, job: CellJob) -> None:
        """One cell: its outcome logged and counted, or left pending where the outcome would not be
        the cell's own (the run stopped, no device, the model server or the GPU gone)."""
        if self.stop.is_set():
            self._not_run()
            return
        run = uuid.uuid4().hex[:12]
        attempts: list[Attempt] = []
        self.on_event(CellStarted(key=job.key, regime=job.regime, task=job.task_id))
        if job.work is None:
            kind, error = job.failure or ("task_load", "unknown")
            cell = _failure_cell(job, run, kind, error, [], None)
        else:
            worked = self._work(job, run, attempts)
            if worked is None:
                return
            cell = worked
        append_record(self.folder / CELLS, cell)
        with self.count_lock:
            self.summary.done += 1
            self.summary.failed += cell.status == "failed"
            self.summary.verdicts[cell.verdict.value if cell.status == "ok" else "cell_failed"] += 1
        self.on_event(CellDone(key=job.key, cell=cell))

    def _work(self, job: CellJob, run: str, attempts: list[Attempt]) -> StudyCell | None:
        """The cell's work on a device of its own; None where the cell stays pending."""
        assert job.work is not None
        device = self.slots.take()
        if device is None:
            self._not_run(stopped="no device left (every listed GPU stopped answering)")
            return None
        try:
            with self.slots.holding(device):
                core = job.work(device, self._sink(job, run, attempts), self.executor)
            if core.key != job.key:
                raise RuntimeError(f"cell key mismatch: planned {job.key}, got {core.key}")
            return StudyCell(**core.model_dump(), run=run, seed=job.seed, level=job.level, task_name=job.task_name,
                             task_hash=job.task_hash, model=job.model, device=device, imported=job.imported,
                             inputs_hash=job.inputs_hash)
        except ServerUnreachable as e:
            # the model server is gone: not this cell's outcome; the cells stay pending and
            # the run stops (a rerun resumes them once the server answers)
            self._not_run(stopped=f"the model server cannot be reached ({e})", by_model=True)
            self.on_event(CellSkipped(key=job.key, why=str(e)))
            return None
        except GPUUnavailableError as e:
            self.slots.mark_lost(device)
            if e.result is None:
                # the GPU was already gone before this cell's candidate ran: not this cell's
                # outcome, so it stays pending for the next run instead of being scored
                self._not_run()
                self.on_event(CellSkipped(key=job.key, why=str(e)))
                return None
            return _failure_cell(job, run, "worker", f"{type(e).__name__}: {e}", attempts, device)
        except Exception as e:  # noqa: BLE001 - any failure of one cell is that cell's recorded outcome
            log.warning("cell %s failed: %s: %s", job.key, type(e).__name__, e)
            return _failure_cell(job, run, "worker", f"{type(e).__name__}: {e}", attempts, device)
        finally:
            self.slots.give(device)

    def _sink(self, job: CellJob, run: str, attempts: list[Attempt]) -> Callable[[Attempt], None]:
        """Where the cell's work hands each attempt as it finishes: logged at once, so an attempt
        outlives a cell that fails later."""
        def sink(a: Attempt) -> None:
            append_record(self.folder / ATTEMPTS, StudyAttempt.logged(
                a, run=run, cell_key=job.key, seed=job.seed, config_hash=job.config_hash, level=job.level))
            attempts.append(a)
            with self.count_lock:
                self.summary.attempts += 1
            self.on_event(AttemptDone(key=job.key, verdict=a.eval.verdict.value))

        return sink

    def _not_run(self, stopped: str | None = None, by_model: bool = False) -> None:
        """A cell left pending; `stopped`: why the whole run stops with it (no later cell starts)."""
        if stopped is not None:
            self.stop.set()
        with self.count_lock:
            self.summary.not_run += 1
            if stopped is not None:
                self.summary.stopped = stopped
            if by_model:
                self.summary.stopped_by_model = True


def run_jobs(jobs: Sequence[CellJob], folder: Path, slots: DeviceSlots, concurrency: int, executor: Executor,
             on_event: EventFn = lambda e: None, summary: RunSummary | None = None) -> RunSummary:
    """Run cells and log them, evaluating through `executor`; returns counts. Appends only (see
    log.py for the read rules)."""
    summary = summary or RunSummary(planned=len(jobs), skipped=0)
    cells = _Cells(folder, slots, executor, on_event, summary)
    folder.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="kw-cell") as pool:
        futures = [pool.submit(cells.one, job) for job in jobs]
        try:
            for fut in as_completed(futures):
                fut.result()  # an error here is the log itself failing (disk full): stop loudly
        except BaseException:
            cells.stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return summary


# -- planning a study --------------------------------------------------------------------------------


def fixed_cell(key: str, regime: str, task: Task, candidates: Sequence[tuple[str, str]], run: EvalRun) -> CellJob:
    """A cell whose candidates are given, not generated: each (label, program) evaluated in turn
    through the study's executor and logged as an attempt (the label as its response), the cell's
    verdict its best attempt's. What benchmarks and tests of the executors run, with the study log's
    guarantees (each cell and attempt once)."""
    def work(device: str, sink: Callable[[Attempt], None], executor: Executor) -> Cell:
        from kernelwright.strategies import selection

        attempts = []
        for i, (label, text) in enumerate(candidates):
            attempt = Attempt(id=f"{key}/t0/s{i}", task_id=task.id, regime=regime, turn=0, sample=i, prompt_hash="-",
                              messages=[], raw_response=label, eval=executor.evaluate(task, text, run))
            sink(attempt)
            attempts.append(attempt)
        best = selection.select(attempts)
        return Cell(key=key, task_id=task.id, regime=regime, config_hash=regime, attempt_ids=[a.id for a in attempts],
                    selected=best.id if best else None, reason=selection.reason(best, len(attempts)),
                    verdict=best.eval.verdict if best else Verdict.NO_CODE)

    return CellJob(key=key, regime=regime, config_hash=regime, seed=0, task_id=task.id, task_name=task.name,
                   level=task.level, task_hash=task.source_hash, model="none", work=work)


def plan_jobs(spec: StudySpec, backend: Backend, tasks: Sequence[TaskOrFailure],
              facts: Callable[[Task], Any] | None) -> list[CellJob]:
    from kernelwright.strategies import run_regime

    jobs: list[CellJob] = []
    for seed in spec.seeds:
        for regime in spec.regimes:
            config = spec.regime_config(regime, seed)
            chash = spec.config_hash(config, backend.model)
            for task in tasks:
                key = f"{chash}/{config.spec}/{task.id}"
                common = {"key": key, "regime": config.spec, "config_hash": chash, "seed": seed, "task_id": task.id,
                          "task_name": task.name, "level": task.level, "model": backend.model}
                if isinstance(task, TaskFailure):
                    jobs.append(CellJob(**common, task_hash=task.source_hash, work=None,
                                        failure=("task_load", task.error)))
                    continue

                def work(device: str, sink, executor: Executor, task=task, config=config, chash=chash) -> Cell:
                    # Under the cell's clock (StudySpec.cell_minutes), started now, a model request
                    # after it raises BudgetSpent, which ends the regime where it stands; the cell is
                    # then what run_regime hands its cell sink (the attempts made, the pick among
                    # them, why it stopped), recorded as any other. The clock covers the wait for
                    # the judge too: an evaluation not begun by then is recorded not_built, so
                    # cells that share one device and one model end near their clock.
                    model: Backend = backend
                    deadline = None
                    if spec.cell_minutes is not None:
                        clock = Budget(spec.cell_minutes, label=CLOCK)
                        model, deadline = BudgetedBackend(backend, clock), clock.deadline
                    run = EvalRun(spec.eval, device=device, cache_dir=spec.cache_dir, deadline=deadline)
                    ended: list[Cell] = []
                    try:
                        return run_regime(task, model, config, run, sink=sink,
                                          analysis_provider=facts, config_hash=chash, cell_sink=ended.append,
                                          executor=executor)
                    except BudgetSpent:
                        return ended[-1]

                jobs.append(CellJob(**common, task_hash=task.source_hash, work=work, scaffold=config.scaffold))
    return jobs


def config_records(spec: StudySpec, model: str) -> dict[str, dict[str, Any]]:
    """config hash -> exactly what went into it, for the manifest."""
    out = {}
    for seed in spec.seeds:
        for regime in spec.regimes:
            config = spec.regime_config(regime, seed)
            out[spec.config_hash(config, model)] = {
                "regime": config.model_dump(mode="json"), "spec": config.spec, "model": model,
                **spec.keyed_context()}
    return out


def pending_jobs(spec: StudySpec, jobs: list[CellJob], retry_failed: bool) -> list[CellJob]:
    done = read_cells(spec.out)
    return [j for j in jobs if not is_done(j, done, retry_failed)]


def prefetch_scaffold_plans(spec: StudySpec, todo: Sequence[CellJob], tasks: Sequence[TaskOrFailure]) -> None:
    """Plan the scaffold of every task a pending scaffolded cell needs, in parallel child processes,
    into the planner's in-process cache. A plan that fails here is left to its cell, which records why."""
    wanted = {j.task_id for j in todo if j.scaffold}
    if spec.executor != "local" or not wanted:
        return
    from kernelwright.device import available_cores
    from kernelwright.scaffold import ScaffoldError, plan_task

    todo_tasks = [t for t in tasks if isinstance(t, Task) and t.id in wanted]
    device = spec.devices[0]
    size = spec.eval.size_on(device)

    def plan(task: Task) -> None:
        try:
            plan_task(task, size, device=device)
        except ScaffoldError:
            pass

    with ThreadPoolExecutor(max_workers=max(1, min(8, available_cores() // 2)), thread_name_prefix="kw-plan") as pool:
        list(pool.map(plan, todo_tasks))


def executor_options(spec: StudySpec, backend: object) -> dict[str, Any]:
    """make_executor's options for the study: the local pool's slots a device; Ray's address, slots
    a GPU, and the model's GPU kept out of a local cluster when it is to have its own."""
    if spec.executor == "local":
        return {"slots_per_device": spec.slots}
    if spec.executor != "ray":
        return {}
    options: dict[str, Any] = {"address": spec.ray_address, "slots_per_gpu": spec.slots}
    if spec.model_gpu == "own":
        from kernelwright.device import physical_id

        device = str(getattr(backend, "device", "") or "")
        ident = physical_id(device) if device.startswith("cuda") else None
        if ident is None:
            raise BadInput(f"model_gpu = own: the model {spec.model or 'default'} does not run on a GPU here "
                           "(an hf: model with ?device=cuda:N has one)")
        options["exclude_gpus"] = [ident]
    return options


def run_study(spec: StudySpec, *, retry_failed: bool = False, on_event: EventFn = lambda e: None,
              on_plan: Callable[[RunSummary], None] = lambda s: None) -> RunSummary:
    """Run what is missing from the study folder. Writes no record when nothing is missing.
    Raises BackendError / TaskError / EvaluatorError / RegimeError for unusable input (before any
    cell runs), StudyBusy when another process writes the folder."""
    from kernelwright.device import validate_device

    if spec.executor == "local":  # with Ray the GPUs are on the workers, not necessarily here
        for d in spec.devices:
            validate_device(d, spec.eval.compile_only)
    from kernelwright.strategies.config import check_runnable, parse_regime

    for regime in spec.regimes:
        check_runnable(parse_regime(regime))  # before the model loads: a missing library costs a second
    tasks = sized_or_failed(resolve_tasks(spec.tasks), spec.eval.size, spec.devices[0])
    with sole_writer(spec.out):  # one writer per folder: a second run on it stops here (StudyBusy)
        return _run_as_writer(spec, tasks, retry_failed, on_event, on_plan)


def _run_as_writer(spec: StudySpec, tasks: Sequence[TaskOrFailure], retry_failed: bool, on_event: EventFn,
                   on_plan: Callable[[RunSummary], None]) -> RunSummary:
    from kernelwright.executors.base import make_executor, opened
    from kernelwright.llm import make_backend
    from kernelwright.study.manifest import finish_invocation, record_invocation

    inner = make_backend(spec.model)
    try:
        slots = DeviceSlots(spec.devices)
        backend = shared_backend(inner)
        facts = FactsStore(spec.facts_dir, spec.out / "facts", slots)
        jobs = plan_jobs(spec, backend, tasks, facts)
        todo = pending_jobs(spec, jobs, retry_failed)
        summary = RunSummary(planned=len(jobs), skipped=len(jobs) - len(todo))
        on_plan(summary)
        if not todo:
            return summary
        invocation = record_invocation(spec.out, spec.model_dump(mode="json"), config_records(spec, inner.model),
                                       spec.devices, pending=len(todo)).runs[-1]
        ended = "interrupted"
        try:
            prefetch_scaffold_plans(spec, todo, tasks)
            with opened(make_executor(spec.executor, spec.devices, **executor_options(spec, inner))) as executor:
                if hasattr(executor, "layout"):
                    on_event(ExecutorReady(executor.layout()))
                summary = run_jobs(todo, spec.out, slots, spec.concurrency, executor, on_event, summary)
            ended = f"stopped: {summary.stopped}" if summary.stopped else "completed"
            return summary
        except Exception as e:
            ended = f"error: {type(e).__name__}"
            raise
        finally:  # KeyboardInterrupt and the like leave ended at "interrupted"
            try:
                finish_invocation(spec.out, invocation.started, ended, summary.done, summary.failed)
            except OSError as e:  # a full disk: the run's own error (or result) matters more than this note
                log.warning("%s: could not record how the run ended: %s", spec.out, e)
    finally:
        close = getattr(inner, "close", None)
        if close is not None:
            close()
