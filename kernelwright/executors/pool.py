"""EvalPool: evaluate many candidates fast on one machine, with the evaluator's guarantees intact.

    with EvalPool(PoolConfig(devices=["cuda:0", "cuda:1"])) as pool:
        futures = [pool.submit(task, text, run) for task, text in candidates]
        results = [f.result() for f in futures]

How the work flows, and why:
- In the caller: extraction, parsing and the static rules (`precheck`) - cheap, no process.
- Exact duplicates (same task, code and settings) are evaluated once; each gets a copy (dedupe.py).
- A candidate that builds an extension (load_inline/load) first goes to a *compile slot*: its
  literal builds are made there by the trusted builder into the content-hash cache's shared scope
  (buildcache.py: keyed by sources, flags, arch, torch version and compilers, verified by sha256),
  and a candidate with other builds is imported with nothing else (a "prebuild"), which decides a
  build error early (its own build dies with its box: only the trusted builder's are cached). Compile slots run on the CPU cores in parallel
  while the device slots evaluate what is already built. A build that fails decides the verdict
  there (compile_error / hallucinated_api: the evaluation would stop at the same import); any
  other outcome (built, timed out, crashed) goes on to a full evaluation, which decides.
- Both queues serve the lowest `EvalRun.priority` first, then in order of arrival: a search's
  launch variants (priority 1) of a kernel already verified never delay another cell's first
  candidates (in a CUDA study on the H200, 25 of 45 evaluations were variants).
- One *device slot* per device (or `slots_per_device`) runs full evaluations. Timings never overlap
  whatever the count: the judge holds the device's lock alone for its timed stage and shared for
  the rest (device.py), so several slots overlap only the untimed parts of their evaluations.
- Every evaluation is still a fresh interpreter (sandbox.py): a slot is reused across candidates,
  its processes are not. What a slot keeps warm is the next process, started ahead with torch
  already imported, so the import is off the critical path. A slot is recycled (spare discarded)
  after a timeout, a crash or a CUDA error, so nothing started
  next to a bad kernel serves the next candidate.
- Every worker process has its own scratch (sandbox.py), a private tmpfs and its only writable
  place: its builds, TORCH_EXTENSIONS_DIR and TRITON_CACHE_DIR live there and die with it. Each slot sets
  MAX_JOBS so the compile slots together use the cores and no more, and TORCH_CUDA_ARCH_LIST = the capability of the GPU the candidate will run on (the same string the
  worker sets, so the build keys match).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Optional

from kernelwright.device import available_cores, cuda_arch, device_key, validate_device
from kernelwright.errors import GPUUnavailableError
from kernelwright.evaluate import sandbox
from kernelwright.evaluate.evaluator import EvalRun, Prepared, check_gpu_after, clock_ran_out, precheck, run_prepared
from kernelwright.executors.dedupe import LinkTable, result_key
from kernelwright.records import EvalResult, SandboxJob, Stage, Task

log = logging.getLogger(__name__)

# A prebuild that ends with one of these decided the candidate: the evaluation would stop at the
# same import with the same build error.
# Text of a CUDA error in a candidate's runtime error: the slot is recycled after it.
CUDA_ERROR_MARKS = ("CUDA error", "cudaError", "illegal memory access", "device-side assert", "CUBLAS_STATUS",
                    "misaligned address", "unspecified launch failure")


def builds_extension(code: str) -> bool:
    """Whether a prebuild can do anything: only torch extension builds are cached ahead. (Triton
    compiles at a kernel's first launch, on the device: there is nothing to build before.)"""
    return "load_inline" in code or "cpp_extension" in code


@dataclass
class PoolConfig:
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    compile_workers: int = 0  # 0: half the cores, at most 8, at least 1
    prewarm: bool = True  # keep the next worker process started (torch imported) in every slot
    dedupe: bool = True
    prebuild: bool = True  # False: every build happens in the device slot (one at a time)
    slots_per_device: int = 1  # evaluations at once on a device (its timed stage alone: device.py)


@dataclass
class PoolStats:
    submitted: int = 0
    decided_before_sandbox: int = 0  # no code, syntax, static rules
    linked_duplicates: int = 0
    prebuilt: int = 0
    decided_at_build: int = 0
    evaluated: int = 0
    past_clock: int = 0  # not begun: the cell's clock passed while they queued (EvalRun.deadline)
    recycled: int = 0  # filled by EvalPool.snapshot()


class Slot:
    """One worker of the pool: its folders, its environment additions and its warm spare.
    `run` has sandbox.run_job's signature, so the evaluator runs its job through it."""

    def __init__(self, name: str, max_jobs: int, prewarm: bool, overlap: bool,
                 extra_env: Optional[dict[str, str]] = None) -> None:
        self.name, self.max_jobs = name, max_jobs
        self.prewarm, self.overlap = prewarm, overlap
        self.extra_env = dict(extra_env or {})
        self._spare: Optional[sandbox.Spawned] = None
        self.recycled = 0

    def env_for(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, "MAX_JOBS": str(self.max_jobs), **self.extra_env}

    def run(self, job: SandboxJob, *, timeout: float, env: dict[str, str],
            held: sandbox.Confine) -> sandbox.SandboxOutcome:
        env = self.env_for(env)
        sp = self._take_spare(env, held)
        if sp is None:
            sp = sandbox.spawn(env, held)
        if self.prewarm and self.overlap:
            # start the next one now: its torch import overlaps this evaluation (GPU or build)
            self._spare = sandbox.spawn(env, held)
        outcome = sandbox.run_spawned(sp, job, timeout=timeout)
        if needs_recycle(outcome):
            self.recycle()
        if self.prewarm and self._spare is None:
            # on a CPU device the import would compete with the timing: start it after
            self._spare = sandbox.spawn(env, held)
        return outcome

    def _take_spare(self, env: dict[str, str], held: sandbox.Confine) -> Optional[sandbox.Spawned]:
        sp, self._spare = self._spare, None
        if sp is None:
            return None
        if sp.env != env or sp.held != held or sp.proc.poll() is not None:  # other settings, or it died
            sandbox.discard(sp)
            return None
        return sp

    def recycle(self) -> None:
        """After a bad candidate: nothing started beside it serves the next one."""
        self.recycled += 1
        self.discard_spare()

    def discard_spare(self) -> None:
        sp, self._spare = self._spare, None
        if sp is not None:
            sandbox.discard(sp)


def needs_recycle(outcome: sandbox.SandboxOutcome) -> bool:
    if outcome.timed_out or outcome.final is None:
        return True
    final = outcome.final
    if final.verdict == "crash":  # the judge outlived the candidate's process and said so
        return True
    text = final.error or ""
    return final.verdict == "runtime_error" and any(m in text for m in CUDA_ERROR_MARKS)


@dataclass
class _Job:
    task: Task
    pre: Prepared
    run: EvalRun
    fut: Future
    key: Optional[str]
    prebuild_s: float = 0.0


_STOP = object()


class _Queue:
    """A queue served lowest priority first, in order of arrival within one priority; _STOP last."""

    def __init__(self) -> None:
        self._q: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()

    def put(self, job: object) -> None:
        rank = float("inf") if job is _STOP else job.run.priority  # type: ignore[attr-defined]
        self._q.put((rank, next(self._seq), job))

    def get(self) -> object:
        return self._q.get()[2]

    def get_nowait(self) -> object:
        return self._q.get_nowait()[2]


class EvalPool:
    def __init__(self, config: Optional[PoolConfig] = None) -> None:
        self.config = config or PoolConfig()
        devices = [d.strip().lower() for d in self.config.devices]
        if not devices:
            raise ValueError("EvalPool needs at least one device")
        self.cores = available_cores()
        n_compile = self.config.compile_workers or max(1, min(8, self.cores // 2))
        self._arch: dict[str, str] = {}
        self.stats = PoolStats()
        self._links = LinkTable()
        self._lock = threading.Lock()
        self._arch_lock = threading.Lock()
        self._lost: set[str] = set()
        self._compile_q = _Queue()
        self._device_q: dict[str, _Queue] = {}
        self._compile_threads: list[tuple[_Queue, threading.Thread]] = []
        self._device_threads: list[tuple[_Queue, threading.Thread]] = []
        self._slots: list[Slot] = []
        cuda = any(d.startswith("cuda") for d in devices)
        # The compile slots share the cores: MAX_JOBS each so ninja never runs more than the cores.
        per_build = max(1, self.cores // n_compile)
        for i in range(n_compile if self.config.prebuild else 0):
            # Builds never need a GPU: hiding it keeps a candidate's import-time CUDA calls off the
            # GPUs the device slots are timing on.
            hide = {"CUDA_VISIBLE_DEVICES": ""} if cuda else {}
            slot = Slot(f"compile{i}", per_build, self.config.prewarm,
                        overlap=True, extra_env=hide)
            self._start(slot, self._compile_q, self._prebuild_one)
        for d in dict.fromkeys(device_key(d) for d in devices):
            self._device_q[d] = _Queue()
            for k in range(max(1, self.config.slots_per_device)):
                # a device slot builds only what a prebuild could not (rare): one job is enough
                slot = Slot(d.replace(":", "") + (f"s{k}" if k else ""), 1, self.config.prewarm,
                            overlap=d.startswith("cuda"))
                self._start(slot, self._device_q[d], self._evaluate_one)

    # -- public ---------------------------------------------------------------------------------

    def submit(self, task: Task, candidate_text: str, run: Optional[EvalRun] = None) -> Future:
        """Queue one candidate; the Future gives its EvalResult (or GPUUnavailableError)."""
        run = run or EvalRun()
        run = run.but(device=validate_device(run.device, run.config.compile_only))
        if device_key(run.device) not in self._device_q:
            raise ValueError(f"device {run.device} is not in this pool ({', '.join(self._device_q)})")
        with self._lock:
            self.stats.submitted += 1
        pre = precheck(task, candidate_text, run)
        if isinstance(pre, EvalResult):
            with self._lock:
                self.stats.decided_before_sandbox += 1
            done: Future = Future()
            done.set_result(pre)
            return done
        key = result_key(task, pre.code_hash, run) if self.config.dedupe else None
        if key is not None:
            mine, work = self._links.claim(key)
            if work is None:
                with self._lock:
                    self.stats.linked_duplicates += 1
                return mine
        else:
            mine = work = Future()
        job = _Job(task=task, pre=pre, run=run, fut=work, key=key)
        if self.config.prebuild and not run.config.compile_only and builds_extension(pre.code):
            self._compile_q.put(job)
        else:
            self._device_q[device_key(run.device)].put(job)
        return mine

    def evaluate(self, task: Task, candidate_text: str, run: Optional[EvalRun] = None) -> EvalResult:
        """The executor interface: blocking, safe to call from many threads at once."""
        return self.submit(task, candidate_text, run).result()

    def snapshot(self) -> PoolStats:
        with self._lock:
            return replace(self.stats, recycled=sum(s.recycled for s in self._slots))

    def close(self) -> None:
        """Stop the slots. Jobs still queued are cancelled (their callers get CancelledError):
        closing early means the caller stopped waiting (an interrupted study)."""
        for q in [self._compile_q, *self._device_q.values()]:
            while True:
                try:
                    job = q.get_nowait()
                except queue.Empty:
                    break
                if job is not _STOP:
                    job.fut.cancel()
        # compile slots first: a prebuild that finishes now still hands its job to a device slot
        for group in (self._compile_threads, self._device_threads):
            for q, _t in group:
                q.put(_STOP)
            for _q, t in group:
                t.join()

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- slots ------------------------------------------------------------------------------------

    def _start(self, slot: Slot, q: _Queue, handle) -> None:
        def loop() -> None:
            try:
                while True:
                    job = q.get()
                    if job is _STOP:
                        return
                    try:
                        result = handle(slot, job)
                    except _Handed:
                        continue
                    except BaseException as e:  # noqa: BLE001 - the caller's future carries it
                        if job.key is not None:
                            self._links.forget(job.key)
                        job.fut.set_exception(e)
                    else:
                        job.fut.set_result(result)
            finally:
                slot.discard_spare()

        self._slots.append(slot)
        t = threading.Thread(target=loop, name=f"kw-pool-{slot.name}", daemon=True)
        t.start()
        (self._compile_threads if q is self._compile_q else self._device_threads).append((q, t))

    def _arch_for(self, device: str) -> str:
        # its own lock: the probe is a child process (seconds), and the stats lock must not wait on it
        with self._arch_lock:
            if device not in self._arch:
                self._arch[device] = cuda_arch(device)
            return self._arch[device]

    def _late(self, job: _Job) -> Optional[EvalResult]:
        """The cell's clock passed while the job queued: its record, and its key forgotten (a
        later duplicate, from a cell with time left, is judged afresh)."""
        late = clock_ran_out(job.task, job.pre.code_hash, job.run)
        if late is not None:
            if job.key is not None:
                self._links.forget(job.key)
            with self._lock:
                self.stats.past_clock += 1
        return late

    def _prebuild_one(self, slot: Slot, job: _Job) -> EvalResult:
        late = self._late(job)
        if late is not None:
            return late
        run = job.run
        if run.device.startswith("cuda"):
            # the build key includes the arch: build for the GPU the candidate will run on
            run = run.but(extra_env={**run.extra_env, "TORCH_CUDA_ARCH_LIST": self._arch_for(run.device)})
        built = run_prepared(job.task, job.pre, run, slot.run, prebuild=True)
        with self._lock:
            self.stats.prebuilt += 1
        if built.verdict.build_failed:
            with self._lock:
                self.stats.decided_at_build += 1
            return built
        # Built (or something the evaluation must judge itself): on to the device slot, which
        # fills this job's future; _Handed tells the loop not to.
        job.prebuild_s = sum(s.seconds for s in built.stages)
        self._device_q[device_key(job.run.device)].put(job)
        raise _Handed()

    def _evaluate_one(self, slot: Slot, job: _Job) -> EvalResult:
        device = job.run.device
        if device in self._lost:
            raise GPUUnavailableError(device)
        late = self._late(job)
        if late is not None:
            return late
        result = run_prepared(job.task, job.pre, job.run, slot.run)
        with self._lock:
            self.stats.evaluated += 1
        if job.prebuild_s:
            # the build happened in a compile slot: its time belongs to this candidate
            result.stages.insert(0, Stage(name="prebuild", seconds=round(job.prebuild_s, 4), ok=True,
                                          detail="compile slot"))
        try:
            return check_gpu_after(result, job.run)
        except GPUUnavailableError:
            self._lost.add(device)
            raise


class _Handed(Exception):
    """A prebuild passed its job on to a device slot; nothing to settle yet."""
