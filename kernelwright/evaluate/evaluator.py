"""The evaluator's front door: one candidate in, one EvalResult out.

Runs in the caller's (long-lived) process and never executes candidate code: it extracts the
program, applies the static rules, prepares a build folder keyed by the source's hash and an
environment, hands the job to the sandbox, and turns what comes back — or the child's death —
into a verdict. After a timeout or crash on a GPU it checks that the GPU still answers before it
returns, and the next evaluation on that GPU checks again before it starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from kernelwright import confine, devmem, pyast
from kernelwright import device as device_lock
from kernelwright.device import cuda_arch, resolve_size, validate_device
from kernelwright.errors import ConfinementError, EvaluatorError, GPUUnavailableError, InfrastructureError
from kernelwright.evaluate import buildcache, buildpch, buildspec, diskroom, sandbox
from kernelwright.evaluate.static_checks import check_source
from kernelwright.extract import extract_code
from kernelwright.measure.draw import SEED
from kernelwright.records import (
    NOT_JUDGED,
    BuildJob,
    BuildRequest,
    EvalJob,
    EvalResult,
    Finding,
    Stage,
    Task,
    TimingSpec,
    Verdict,
    sha256_text,
)

log = logging.getLogger(__name__)

# sandbox.run_job's signature: (job, *, timeout, env, held) -> SandboxOutcome
SandboxRun = Callable[..., sandbox.SandboxOutcome]

DEFAULT_TIMEOUT_S = 240.0


COMPAT_MODES = ("kernelwright", "kernelbench")


@dataclass
class EvalConfig:
    device: str = "cpu"
    timeout: float = DEFAULT_TIMEOUT_S
    trials: int = 5
    seed: int = SEED
    atol: Optional[float] = None  # None: 1e-4 for fp32, 1e-2 for fp16/bf16
    rtol: Optional[float] = None
    warmup: int = 10
    iters: int = 100
    input_sets: int = 8
    flush_cache: bool = True
    time: bool = True  # time correct candidates (and no_custom_kernel ones) against the reference
    # also time torch.compile(reference) under the same protocol (fast_1 vs torch.compile); costs a
    # compile of the reference per timed candidate
    compile_baseline: bool = False
    compile_only: bool = False
    # Off only to study the dynamic checks on their own (tests, research); never for real results.
    static_checks: bool = True
    # small | full | auto (small on CPU, full on GPU) | a factor such as 1/8 (tasks/sizing.py: a task
    # is sized where it is loaded; this sets the KERNELWRIGHT_SIZE its source runs with)
    size: str = "auto"
    cache_dir: Optional[str] = None
    keep_workdir: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)  # added after the allowlist: trusted input
    # Run even where a required OS protection is missing (confine.py); such results say
    # `confinement.trusted = false`. Never for results anyone relies on.
    unconfined: bool = False
    # The evaluation's memory limit (its cgroup's, or RLIMIT_DATA): None is half the machine's
    # memory, at least 4 GiB (confine.Limits.for_run).
    memory_limit_mb: Optional[int] = None
    # The size of each of the box's writable tmpfs (its scratch, /tmp, /dev/shm), held in memory and
    # counted by the memory limit: None is confine.SCRATCH_MB.
    scratch_mb: Optional[int] = None
    # "kernelbench": KernelBench's own definitions, to compare a re-score line by line: the candidate
    # is executed with the task module's names already in its namespace, a ModelNew.__init__ that
    # raises counts as not compiled, and the task runs at its own (full) size. Weaker on purpose
    # (the candidate can reach the reference's Model); the study report says which mode it used.
    compat: str = "kernelwright"
    # Check a correct candidate once more at the task's second shape (EvalResult.generalises); off
    # where that candidate was checked before (optimize's evaluation beside torch.compile)
    second_shape: bool = True
    # Order in a pool's queues, lower first (executors/pool.py): a search's launch variants of a
    # kernel already verified wait behind other cells' first candidates. Changes when, not what.
    priority: int = 0
    # A study cell's clock (time.monotonic() on the caller's machine): an evaluation still queued
    # when it passes is not begun (`clock_ran_out`), so a cell ends near its clock however many
    # cells share the device. Changes whether, never what: not part of a result's key.
    deadline: Optional[float] = None

    def __post_init__(self) -> None:
        # The one check of the evaluator's own options: the CLI, studies and optimize all build an
        # EvalConfig, so a bad value is bad input everywhere, never a verdict or a division by zero.
        problems = [f"{name} must be {rule}, not {value!r}" for name, value, ok, rule in (
            ("trials", self.trials, _is_int(self.trials) and self.trials >= 1, "an integer >= 1"),
            ("iters", self.iters, _is_int(self.iters) and self.iters >= 1, "an integer >= 1"),
            ("warmup", self.warmup, _is_int(self.warmup) and self.warmup >= 0, "an integer >= 0"),
            ("input_sets", self.input_sets, _is_int(self.input_sets) and self.input_sets >= 1, "an integer >= 1"),
            ("timeout", self.timeout, _is_number(self.timeout) and self.timeout > 0, "a number of seconds > 0"),
            ("atol", self.atol, self.atol is None or (_is_number(self.atol) and self.atol >= 0), "a number >= 0"),
            ("rtol", self.rtol, self.rtol is None or (_is_number(self.rtol) and self.rtol >= 0), "a number >= 0"),
            ("compat", self.compat, self.compat in COMPAT_MODES, " or ".join(COMPAT_MODES)),
            ("memory_limit_mb", self.memory_limit_mb, self.memory_limit_mb is None or (
                _is_int(self.memory_limit_mb) and self.memory_limit_mb >= 64), "an integer >= 64 (MB)"),
            ("size", self.size, _is_size(self.size), "small, full, auto or a factor in (0, 1] such as 1/8"),
            ("scratch_mb", self.scratch_mb, self.scratch_mb is None or (
                _is_int(self.scratch_mb) and self.scratch_mb >= 16), "an integer >= 16 (MB)"),
            ("size", self.size, self.compat != "kernelbench" or self.size in ("auto", "full"),
             "auto or full with compat kernelbench (the task's own size)"),
        ) if not ok]
        if problems:
            raise EvaluatorError("bad evaluator option: " + "; ".join(problems))
        if self.compat == "kernelbench":
            self.size = "full"  # here, so the evaluator, analysis and planning all run the task's own size


def _is_size(v: Any) -> bool:
    try:
        resolve_size("cpu", v)
    except (ValueError, TypeError):
        return False
    return True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def cache_root(cfg: EvalConfig) -> Path:
    return Path(cfg.cache_dir or default_cache_root())


def default_cache_root() -> str:
    return os.environ.get("KERNELWRIGHT_CACHE") or os.path.join(Path.home(), ".cache", "kernelwright")


def pch_folder() -> str:
    """The machine's precompiled torch headers (buildpch.py), made here when missing, so that a
    builder's box started ahead (a pool's spare) sees the headers made later too."""
    folder = os.environ.get("KERNELWRIGHT_PCH_CACHE") or os.path.join(default_cache_root(), "builds", "pch")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        pass  # not writable: no header is made, and the box binds what exists
    return folder


# GPUs on which a candidate timed out or crashed; probed before the next evaluation uses them.
_suspect_gpus: set[str] = set()


def _early(verdict: Verdict, error: Optional[str], task: Task, code_hash: Optional[str], cfg: EvalConfig,
           findings: Optional[list[Finding]] = None) -> EvalResult:
    return EvalResult(verdict=verdict, error=error, task_id=task.id, candidate_hash=code_hash,
                      device=cfg.device, compile_only=cfg.compile_only, findings=findings or [],
                      stages=[Stage(name="static", seconds=0.0, ok=False, detail=verdict.value)])


def clock_ran_out(task: Task, code_hash: Optional[str], cfg: EvalConfig) -> Optional[EvalResult]:
    """The record of a candidate whose cell's clock (EvalConfig.deadline) passed while it waited
    for the judge: not_built, saying why; None while there is time. Executors ask it right before
    an evaluation begins, after any queue."""
    if cfg.deadline is None or time.monotonic() < cfg.deadline:
        return None
    return _early(Verdict.NOT_BUILT, f"{NOT_JUDGED} the cell's clock ran out before this candidate's evaluation began",
                  task, code_hash, cfg)


@dataclass
class Prepared:
    """A candidate that passed the checks done in the caller's process: ready for a sandbox."""

    code: str
    code_hash: str
    findings: list[Finding]


def precheck(task: Task, candidate_text: str, cfg: EvalConfig) -> EvalResult | Prepared:
    """Everything decided without running the candidate: extraction, parsing, static rules.
    Cheap and side-effect free, so executors run it before they queue anything."""
    code = extract_code(candidate_text)
    if code is None:
        return _early(Verdict.NO_CODE, "no Python code found in the candidate", task, None, cfg)
    code_hash = sha256_text(code)
    try:
        pyast.parse(code)
    except SyntaxError as e:
        return _early(Verdict.SYNTAX_ERROR, f"SyntaxError: {e.msg} (line {e.lineno})", task, code_hash, cfg)
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return _early(Verdict.SYNTAX_ERROR, f"unparsable source: {type(e).__name__}", task, code_hash, cfg)
    findings = check_source(code)
    strict = [f for f in findings if f.severity == "strict"]
    if strict and cfg.static_checks:
        msg = "; ".join(f"{f.rule}: {f.message}" + (f" (line {f.line})" if f.line else "") for f in strict)
        return _early(Verdict.STATIC_VIOLATION, msg, task, code_hash, cfg, findings)
    return Prepared(code=code, code_hash=code_hash, findings=findings)


def evaluate(task: Task, candidate_text: str, cfg: Optional[EvalConfig] = None) -> EvalResult:
    """Evaluate a candidate (raw model text or a Python file's contents) against a task, here, in a
    fresh sandboxed child. Where many candidates are evaluated, an executor (kernelwright.executors)
    is passed in instead: a pool, or a Ray cluster."""
    return evaluate_direct(task, candidate_text, cfg)


def evaluate_direct(task: Task, candidate_text: str, cfg: Optional[EvalConfig] = None,
                    run: Optional[SandboxRun] = None) -> EvalResult:
    """Evaluate here, in a fresh sandboxed child; `run` replaces sandbox.run_job (a worker pool
    hands over a child it started ahead of time)."""
    cfg = cfg or EvalConfig()
    cfg.device = validate_device(cfg.device, cfg.compile_only)
    pre = precheck(task, candidate_text, cfg)
    if isinstance(pre, EvalResult):
        return pre
    late = clock_ran_out(task, pre.code_hash, cfg)
    if late is not None:
        return late

    if cfg.device.startswith("cuda") and not cfg.compile_only and cfg.device in _suspect_gpus:
        if not sandbox.probe_gpu(cfg.device):
            raise GPUUnavailableError(cfg.device)
        _suspect_gpus.discard(cfg.device)

    return check_gpu_after(run_prepared(task, pre, cfg, run), cfg)


def run_prepared(task: Task, pre: Prepared, cfg: EvalConfig, run: Optional[SandboxRun] = None,
                 prebuild: bool = False) -> EvalResult:
    """The sandbox part of an evaluation, for a candidate that passed `precheck`.

    Out of memory is the machine's state, not the candidate's verdict: the candidate is re-run once
    alone (the device's admission lock held exclusively: evaluations of ours already running finish
    first and new ones wait), and the record says so. Out of memory alone too stays `out_of_memory`;
    the reference's own (ReferenceOutOfMemory) alone too fails the task."""
    uses_device = not (cfg.compile_only or prebuild)
    admitted = (device_lock.DeviceLock(cfg.device, shared=True, kind="admission") if uses_device
                else contextlib.nullcontext())
    first: Optional[str] = None  # why the first run was out of memory, when it was
    result: Optional[EvalResult] = None
    with admitted:
        try:
            result = _run_in_sandbox(task, pre.code, pre.code_hash, cfg, run or sandbox.run_job, prebuild)
        except ReferenceOutOfMemory as e:
            if not uses_device:
                raise
            first = str(e)
    if result is not None and result.verdict == Verdict.OUT_OF_MEMORY and uses_device:
        first = result.error or "out of memory"
    if first is not None:
        log.info("%s: out of memory beside other work (%s); re-running it alone", task.id, first[:200])
        with device_lock.DeviceLock(cfg.device, kind="admission") as alone:
            # a fresh child: a pool's spare (`run`) is for one job only. The reference's out of memory
            # alone too (ReferenceOutOfMemory, an EvaluatorError) fails the task.
            result = _run_in_sandbox(task, pre.code, pre.code_hash, cfg, sandbox.run_job, prebuild, alone=True)
        result.flags.append(f"out of memory beside other work; re-run alone (after waiting {alone.waited:.1f} s "
                            f"for the device's other evaluations): {first[:300]}")
    assert result is not None
    result.findings = pre.findings
    result.sizing = task.sizing
    if uses_device and result.verdict.outputs_match and cfg.second_shape:
        result.generalises, result.generalises_note = check_second_shape(task, pre, cfg)
    return result


def check_second_shape(task: Task, pre: Prepared, cfg: EvalConfig) -> tuple[Optional[bool], str]:
    """A candidate found correct at the task's shape, checked once more for correctness alone at the
    task's second shape (a different batch and inner size: Sizing.second_shapes), in a fresh
    sandbox, on the source rewritten by tasks/sizing.py: does it hold on shapes it never saw? A
    kernel that hard-codes the task's dimensions fails here. Not a verdict: (True | False | None,
    why), None where it was not checked."""
    from dataclasses import replace

    from kernelwright.tasks.sizing import variant_source

    source = variant_source(task)
    if source is None:
        return None, ("the task was not sized, so it has no second shape" if task.sizing is None
                      else f"no second shape: {task.sizing.second_why}")
    variant = task.model_copy(update={"source": source, "sizing": None})
    once = replace(cfg, time=False, compile_baseline=False, trials=min(cfg.trials, 2))
    shapes = ", ".join(task.sizing.second_shapes) if task.sizing else ""
    try:
        with device_lock.DeviceLock(cfg.device, shared=True, kind="admission"):
            second = _run_in_sandbox(variant, pre.code, pre.code_hash, once, sandbox.run_job)
    except (EvaluatorError, InfrastructureError) as e:  # the reference, or this machine, at that shape
        return None, f"not checked at {shapes}: {str(e)[:300]}"
    if second.verdict.outputs_match:
        return True, f"also correct at inputs {shapes} ({task.sizing.second_why})"
    if second.verdict in (Verdict.OUT_OF_MEMORY, Verdict.TIMEOUT):
        return None, f"not checked at {shapes}: {second.verdict.value}"
    why = (second.error or "").strip().splitlines()
    return False, f"{second.verdict.value} at inputs {shapes}" + (f": {why[0][:300]}" if why else "")


def check_gpu_after(result: EvalResult, cfg: EvalConfig) -> EvalResult:
    """After a timeout or crash on a GPU: does the GPU still answer? Raises if not."""
    if result.verdict.may_have_hung_the_device and cfg.device.startswith("cuda") and not cfg.compile_only:
        result.gpu_healthy = sandbox.probe_gpu(cfg.device)
        if not result.gpu_healthy:
            raise GPUUnavailableError(cfg.device, result)
    return result


# What a worker may inherit from the caller's environment: what Python, torch, the compilers and
# CUDA need, and nothing else (API keys and tokens stay out of the candidate's reach, and so out
# of its output and every record). Names that look secret are dropped even when allowed.
_ENV_NAMES = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV",
              "CC", "CXX", "NVCC", "MAX_JOBS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS"}
_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_", "TRITON_", "KERNELWRIGHT_")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)


def allowed_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if (k in _ENV_NAMES or k.startswith(_ENV_PREFIXES)) and not _SECRET.search(k)}


def _environment(cfg: EvalConfig, device: str) -> dict[str, str]:
    env = allowed_env(dict(os.environ))
    env.update({
        "KERNELWRIGHT_SIZE": resolve_size(cfg.device, cfg.size),
        "MAX_JOBS": env.get("MAX_JOBS", str(max(1, os.cpu_count() or 1))),
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    # OpenMP threads sleep when a parallel region ends instead of spinning for it: the judge and
    # both runners are three processes on the machine's cores, and each one's spinning threads took
    # the cores the other's timed call needed. On the 2-core machine, a 512 x 2048 softmax timed at
    # 7.8 ms eager (IQR 5.4-10.2) with libgomp's default and 2.7 ms (IQR 2.61-2.78) passive, the same
    # candidate 6.3 ms (3.9-10.4) and 3.4 ms (3.2-4.2): the spread, not the kernels, had decided
    # "faster". Both sides run under it alike; a config's extra_env may still set it.
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    # OpenBLAS (numpy's: the Triton interpreter's dots) keeps its threads spinning for 2^28 cycles
    # after a call by default; its shortest wait (2^4) lets them sleep at once. A thread working
    # between calls is the candidate's leftover work to the judge (leftovers.py), so no library's
    # idle spinning may look like it.
    env["OPENBLAS_THREAD_TIMEOUT"] = "4"
    if cfg.compile_only:
        from kernelwright.evaluate.compile_only import gpu_arch_list, toolkit_home

        env.setdefault("TORCH_CUDA_ARCH_LIST", gpu_arch_list())
        home = toolkit_home()
        if home and "CUDA_HOME" not in env:
            env["CUDA_HOME"] = home
    # The worker must import this package even when it is not installed (a source checkout).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_ROOT, env.get("PYTHONPATH", "")) if p)
    env.update(cfg.extra_env)
    return env


_PKG_ROOT = str(Path(__file__).resolve().parents[2])


def make_job(task: Task, code: str, code_hash: str, cfg: EvalConfig, prebuild: bool = False) -> EvalJob:
    """The job the sandbox's worker runs (its `workdir` is the worker's scratch, added by the
    sandbox). `prebuild`: import the candidate (its builds run exactly as a full evaluation
    would build them, and land in the cache under its scope) and stop."""
    return EvalJob(
        task_source=task.source, candidate_source=code,
        # compile-only never touches a GPU: the worker runs on the CPU and only builds
        device="cpu" if (cfg.compile_only or prebuild) else cfg.device,
        trials=cfg.trials, seed=cfg.seed, atol=cfg.atol, rtol=cfg.rtol,
        timing=TimingSpec(warmup=cfg.warmup, iters=cfg.iters, flush_cache=cfg.flush_cache),
        compile_baseline=cfg.compile_baseline, input_sets=cfg.input_sets, time=cfg.time,
        compile_only=cfg.compile_only or prebuild, prebuild=prebuild, builds_root=str(builds_root(cfg)),
        compat=cfg.compat)


def builds_root(cfg: EvalConfig) -> Path:
    return cache_root(cfg) / "builds"


def sandbox_env(cfg: EvalConfig) -> dict[str, str]:
    """The environment a worker for `cfg` starts with (a pool starts its workers ahead with it)."""
    return _environment(cfg, cfg.device)


def sandbox_hold(cfg: EvalConfig, prebuild: bool = False) -> sandbox.Confine:
    """How a worker for `cfg` is confined: its limits, what it may read, what it runs."""
    # Python and the package (the kernelwright folder alone: the checkout around it may hold task
    # files and tests), and what the caller put on PYTHONPATH besides; never the build cache (the
    # sandbox copies in the entries a job may load) or the device-lock folder (the judge inherits
    # descriptors of its device's locks: timing must exclude other processes' work on the device)
    visible = confine.python_paths()
    if prebuild and not cfg.compile_only:
        visible.append(pch_folder())  # the trusted builder's precompiled torch headers, read-only
    # the judge (judge.py) never imports the candidate, which runs in a runner process (runner.py);
    # their shared memory is a memfd on the CPU and a CUDA IPC allocation on a GPU (cuda_arena.py)
    return sandbox.Confine(limits=confine.Limits.for_run(cfg.timeout, cfg.memory_limit_mb, cfg.scratch_mb),
                           visible=tuple(visible),
                           locks=tuple(str(p) for p in device_lock.prepare(cfg.device)),
                           env_scrubbed=True, required=not cfg.unconfined,
                           timed=cfg.time and not cfg.compile_only and not prebuild,
                           spawn_runners=cfg.device != "cpu")


def _run_in_sandbox(task: Task, code: str, code_hash: str, cfg: EvalConfig, run: SandboxRun,
                    prebuild: bool = False, alone: bool = False) -> EvalResult:
    job = make_job(task, code, code_hash, cfg, prebuild)
    if cfg.unconfined:
        _warn_unconfined()
    try:
        shared = shared_builds(code, cfg, job, run)
        if shared is not None:
            job.cache_keys = list(shared.keys)
        if shared is not None and shared.timed_out:
            # the compile of the candidate's own arguments hung: the worker's would hang the same
            return EvalResult(verdict=Verdict.TIMEOUT, error=f"killed after {cfg.timeout:.0f} s during stage "
                              "'shared_build'", task_id=task.id, candidate_hash=code_hash, device=cfg.device,
                              compile_only=cfg.compile_only, stages=[shared.stage], confinement=shared.confinement)
        if prebuild and shared is not None and shared.covers_all:
            # every build of the candidate is in the shared scope: nothing left for a prebuild
            return EvalResult(verdict=Verdict.COMPILED, task_id=task.id, candidate_hash=code_hash,
                              device=cfg.device, compile_only=True, compiled=True, stages=[shared.stage])
        ledger = devmem.ledger(cfg.device) if job.device.startswith("cuda") else None
        key = footprint_key(task, cfg)
        # only the run is admitted by memory: the trusted builds above use no GPU memory
        with ledger.admit(key) if ledger is not None else contextlib.nullcontext() as admission:
            outcome = run(job, timeout=cfg.timeout, env=sandbox_env(cfg), held=sandbox_hold(cfg, prebuild))
        if ledger is not None and outcome.device_memory_bytes:
            ledger.record(key, outcome.device_memory_bytes)
    except confine.ConfinementUnavailable as e:
        raise ConfinementError(str(e)) from None
    # what the candidate's process built died with its box; the host folder holds only the copy
    # of the cache entries it was given
    if not cfg.keep_workdir:
        confine.remove_tree(outcome.scratch)
    result = _assemble(task, code_hash, cfg, outcome, alone)
    if result.verdict in _DISK_CAN_CAUSE:
        # the machine's disk, observed by us with the candidate's scratch gone: never its words
        full = diskroom.shortage(os.path.dirname(outcome.scratch))
        if full:
            raise InfrastructureError(f"evaluation of a candidate for {task.id} could not run here: {full}")
    if outcome.device_memory_bytes is not None:
        result.device_memory_mb = round(outcome.device_memory_bytes / devmem.MIB, 1)
    if admission is not None:
        result.memory_admission_wait_s = round(admission.waited_s, 3)
        if admission.waited_s > 0.1:
            log.info("%s: admitted by device memory after %.1f s (need %.0f MiB%s)", task.id, admission.waited_s,
                     admission.need_bytes / devmem.MIB, ", alone" if admission.alone else "")
    if shared is not None:
        result.stages.insert(0, shared.stage)
    return result


def footprint_key(task: Task, cfg: EvalConfig) -> str:
    """What a task's measured device memory is kept under (devmem.py): the task at the size it runs."""
    return devmem.footprint_key(task.id, resolve_size(cfg.device, cfg.size), task.source)


@dataclass
class SharedBuilds:
    """What the trusted builder did for one candidate (buildspec.py, builder.py)."""

    keys: list[str]  # of the candidate's literal builds
    built: list[str]  # built now and promoted to the shared scope
    present: list[str]  # already there
    covers_all: bool  # every load_inline call of the candidate is in the shared scope now
    seconds: float
    failed: list[str] = field(default_factory=list)  # built now and failed (the error is kept)
    timed_out: bool = False
    confinement: Any = None  # the builder's, when it ran

    @property
    def stage(self) -> Stage:
        return Stage(name="shared_build", seconds=round(self.seconds, 4), ok=not (self.failed or self.timed_out),
                     detail=f"{len(self.present)} cached, {len(self.built)} built, {len(self.failed)} failed, "
                            f"of {len(self.keys)}")


def shared_builds(code: str, cfg: EvalConfig, job: EvalJob, run: SandboxRun) -> Optional[SharedBuilds]:
    """Build the candidate's literal load_inline calls with the trusted builder, into the shared
    scope of the build cache, unless they are there already. None when there is nothing to do
    (no literal call, compile-only objects, a torch without version metadata)."""
    if cfg.compile_only:
        return None  # objects only: nothing a later evaluation could load
    specs = buildspec.literal_builds(code)
    if not specs.builds:
        return None
    torch_version = buildcache.torch_version()
    if torch_version is None:
        return None  # the worker keys by torch.__version__ then: nothing to share safely
    env = sandbox_env(cfg)
    arch = _gpu_arch(job.device) if job.device.startswith("cuda") else env.get("TORCH_CUDA_ARCH_LIST", "")
    root = str(builds_root(cfg))
    keyed = {buildcache.build_key(b.arguments, arch, torch_version): b for b in specs.builds}
    present = [k for k, b in keyed.items() if buildcache.lookup(root, buildcache.SHARED, k, b.name)[0] is not None]
    present += [k for k in keyed if k not in present and buildcache.failure(root, k) is not None]
    todo = {k: b for k, b in keyed.items() if k not in present}
    # the precompiled torch header of each build's flags, made once per cache (not the candidate's
    # time: it serves every later build with those flags)
    pch = {k: buildpch.header_for(pch_folder(), b.arguments, torch_version, env) for k, b in todo.items()}
    started = time.monotonic()
    built: list[str] = []
    failed: list[str] = []
    timed_out, confinement = False, None
    for key, build in todo.items():
        # one box per key: a hostile flag's command runs where no other key's build is
        build_job = BuildJob(arch=arch, builds=[BuildRequest(key=key, arguments=build.arguments, pch=pch[key])])
        outcome = run(build_job, timeout=max(1.0, cfg.timeout - (time.monotonic() - started)), env=env,
                      held=sandbox_hold(cfg, prebuild=True))
        timed_out, confinement = outcome.timed_out, outcome.confinement
        try:
            # only the key computed here: whatever else the builder's outbox holds stays there
            built += buildcache.promote(outcome.scratch, root, only={key})
            if not timed_out:  # a build cut short did not fail: the worker tries it itself
                failed += buildcache.record_failures(outcome.scratch, root, {key} - set(built))
        finally:
            confine.remove_tree(outcome.scratch)
        if timed_out:
            break
    usable = [k for k, b in keyed.items() if buildcache.lookup(root, buildcache.SHARED, k, b.name)[0] is not None]
    return SharedBuilds(keys=list(keyed), built=built, present=present, failed=failed,
                        covers_all=specs.complete and len(usable) == len(keyed),
                        seconds=time.monotonic() - started, timed_out=timed_out, confinement=confinement)


_arch_cache: dict[str, str] = {}


def _gpu_arch(device: str) -> str:
    """The arch a worker on `device` builds for (it sets TORCH_CUDA_ARCH_LIST to the capability)."""
    if device not in _arch_cache:
        _arch_cache[device] = cuda_arch(device)
    return _arch_cache[device]


_warned_unconfined = False


def _warn_unconfined() -> None:
    global _warned_unconfined
    if not _warned_unconfined:
        _warned_unconfined = True
        log.warning("UNCONFINED: candidates run without a required OS protection where one is missing; "
                    "results say confinement.trusted=false")


# Verdicts a full disk can cause (a build, an import or a call that could not write): withheld when
# the evaluator itself finds the disk full (diskroom.py).
_DISK_CAN_CAUSE = (Verdict.COMPILE_ERROR, Verdict.HALLUCINATED_API, Verdict.RUNTIME_ERROR, Verdict.CRASH)


class ReferenceOutOfMemory(EvaluatorError):
    """The reference's own run was out of memory: the judge's own run of it, or its trusted runner's
    (the judge's structured verdict `reference_out_of_memory`, never a candidate's message)."""


def _assemble(task: Task, code_hash: str, cfg: EvalConfig, out: sandbox.SandboxOutcome,
              alone: bool = False) -> EvalResult:
    stages = [Stage(name=m["name"], seconds=m["seconds"], ok=m["ok"], detail=m.get("detail"))
              for m in out.messages if m.get("type") == "stage"]
    final = out.final
    base = dict(task_id=task.id, candidate_hash=code_hash, device=cfg.device, compile_only=cfg.compile_only,
                stages=stages, output_tail=out.output[-4000:] if out.output else None,
                confinement=out.confinement)
    if out.timed_out:
        where = out.last_stage or "start-up"
        return EvalResult(verdict=Verdict.TIMEOUT, error=f"killed after {cfg.timeout:.0f} s during stage '{where}'",
                          compiled=_compiled_by(stages), **base)
    if out.oom_kills and (final is None or final.verdict in ("crash", "runtime_error")):
        # the kernel killed a process of the evaluation at its memory limit: the candidate's process
        # as a rule (the judge then reports that it died), the judge itself when it was the largest
        limit = out.confinement.memory_limit_mb if out.confinement is not None else None
        where = out.last_stage or "start-up"
        return EvalResult(verdict=Verdict.OUT_OF_MEMORY, compiled=_compiled_by(stages), **base,
                          error=f"the kernel killed {out.oom_kills} process(es) of the evaluation at its memory "
                                f"limit{f' of {limit} MB' if limit else ''} during stage '{where}'")
    if final is None:
        sig = out.death_signal
        why = f"killed by {sig}" if sig else f"exited with code {out.returncode} before reporting (os._exit?)"
        where = out.last_stage or "start-up"
        return EvalResult(verdict=Verdict.CRASH, error=f"the evaluation process {why} during stage '{where}'",
                          compiled=_compiled_by(stages), **base)
    verdict_name = final.verdict
    if verdict_name == "reference_error":
        raise EvaluatorError(f"task {task.id}: the reference itself fails: {final.error}")
    if verdict_name == "reference_out_of_memory":
        raise ReferenceOutOfMemory(
            f"task {task.id}: the reference itself fails: out of device memory even alone: {final.error}" if alone
            else f"the reference ran out of device memory beside other work: {final.error}")
    if verdict_name == "infrastructure_error":
        raise InfrastructureError(f"evaluation of a candidate for {task.id} could not run here: {final.error}")
    fields = dict(final.fields)
    result = EvalResult(verdict=Verdict(verdict_name), error=strip_paths(final.error), **base, **{
        k: v for k, v in fields.items() if k in EvalResult.model_fields and k not in base})
    result.correct = result.verdict.outputs_match
    isolated = fields.get("runner_isolated")
    if result.confinement is not None and isinstance(isolated, bool):
        result.confinement.runner_isolated = isolated
        if not isolated:  # the candidate could reach the judge's side: not a result to trust
            result.confinement.missing.append("runner_isolated")
            result.confinement.trusted = False
    if not result.verdict.compiles:
        result.compiled = False
    if out.forged_lines:
        result.flags.append(f"{out.forged_lines} unauthenticated line(s) on the result pipe")
    if result.verdict == Verdict.CHEAT:
        result.correct = False
    return result


# Absolute paths in compiler and Python messages name temporary and cache folders that differ
# between runs and machines; the file name is what a reader (or a model) needs. The text is the
# candidate's, so no backtracking regular expression reads it: the text is split at the characters
# a path cannot hold (one character class, linear), and each piece is read once.
_PATH_STOPS = re.compile(r"""([\s:'"()]+)""")
_BEFORE_PATH = re.compile(r"[\w.]")  # a "/" after one of these is inside a word, not a path's start


def strip_paths(text: Optional[str]) -> Optional[str]:
    """`text` with every absolute path's folders removed (`/tmp/kw-x/main.cpp` -> `main.cpp`)."""
    if not text:
        return text
    return "".join(piece if i % 2 else _file_name_only(piece) for i, piece in enumerate(_PATH_STOPS.split(text)))


def _file_name_only(piece: str) -> str:
    """A piece without stops: from its first "/" that starts a path to its last "/" before a name."""
    start = next((i for i, ch in enumerate(piece) if ch == "/" and (i == 0 or not _BEFORE_PATH.match(piece[i - 1]))),
                 None)
    if start is None:
        return piece
    end = next((i for i in range(len(piece) - 2, start, -1) if piece[i] == "/" and piece[i + 1] != "/"), None)
    if end is None or end < start + 2:  # a folder needs a name between the slashes
        return piece
    return piece[:start] + piece[end + 1:]


def _compiled_by(stages: list[Stage]) -> bool:
    return any(s.name == "compile" and s.ok for s in stages)
