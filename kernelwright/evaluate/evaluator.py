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
from kernelwright.device import cuda_arch, validate_device
from kernelwright.errors import ConfinementError, EvaluatorError, GPUUnavailableError, InfrastructureError
from kernelwright.evaluate import buildcache, buildpch, buildspec, diskroom, sandbox
from kernelwright.evaluate.config import DEFAULT_TIMEOUT_S, EvalConfig, EvalRun, default_cache_root
from kernelwright.evaluate.static_checks import check_source
from kernelwright.extract import extract_code
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
    TrustedBuild,
    Verdict,
    sha256_text,
)

log = logging.getLogger(__name__)

# sandbox.run_job's signature: (job, *, timeout, env, held) -> SandboxOutcome
SandboxRun = Callable[..., sandbox.SandboxOutcome]

__all__ = ["DEFAULT_TIMEOUT_S", "EvalConfig", "EvalRun", "evaluate"]

# GPUs on which a candidate timed out or crashed; probed before the next evaluation uses them.
_suspect_gpus: set[str] = set()


def _early(verdict: Verdict, error: Optional[str], task: Task, code_hash: Optional[str], run: EvalRun,
           findings: Optional[list[Finding]] = None) -> EvalResult:
    return EvalResult(verdict=verdict, error=error, task_id=task.id, candidate_hash=code_hash,
                      device=run.device, compile_only=run.config.compile_only, findings=findings or [],
                      stages=[Stage(name="static", seconds=0.0, ok=False, detail=verdict.value)])


def clock_ran_out(task: Task, code_hash: Optional[str], run: EvalRun) -> Optional[EvalResult]:
    """The record of a candidate whose cell's clock (EvalRun.deadline) passed while it waited
    for the judge: not_built, saying why; None while there is time. Executors ask it right before
    an evaluation begins, after any queue."""
    if run.deadline is None or time.monotonic() < run.deadline:
        return None
    return _early(Verdict.NOT_BUILT, f"{NOT_JUDGED} the cell's clock ran out before this candidate's evaluation began",
                  task, code_hash, run)


@dataclass
class Prepared:
    """A candidate that passed the checks done in the caller's process: ready for a sandbox."""

    code: str
    code_hash: str
    findings: list[Finding]


def precheck(task: Task, candidate_text: str, run: EvalRun) -> EvalResult | Prepared:
    """Everything decided without running the candidate: extraction, parsing, static rules.
    Cheap and side-effect free, so executors run it before they queue anything."""
    code = extract_code(candidate_text)
    if code is None:
        return _early(Verdict.NO_CODE, "no Python code found in the candidate", task, None, run)
    code_hash = sha256_text(code)
    try:
        pyast.parse(code)
    except SyntaxError as e:
        return _early(Verdict.SYNTAX_ERROR, f"SyntaxError: {e.msg} (line {e.lineno})", task, code_hash, run)
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return _early(Verdict.SYNTAX_ERROR, f"unparsable source: {type(e).__name__}", task, code_hash, run)
    findings = check_source(code)
    strict = [f for f in findings if f.severity == "strict"]
    if strict and run.config.static_checks:
        msg = "; ".join(f"{f.rule}: {f.message}" + (f" (line {f.line})" if f.line else "") for f in strict)
        return _early(Verdict.STATIC_VIOLATION, msg, task, code_hash, run, findings)
    return Prepared(code=code, code_hash=code_hash, findings=findings)


def evaluate(task: Task, candidate_text: str, run: Optional[EvalRun] = None) -> EvalResult:
    """Evaluate a candidate (raw model text or a Python file's contents) against a task, here, in a
    fresh sandboxed child. Where many candidates are evaluated, an executor (kernelwright.executors)
    is passed in instead: a pool, or a Ray cluster."""
    return evaluate_direct(task, candidate_text, run)


def evaluate_direct(task: Task, candidate_text: str, run: Optional[EvalRun] = None,
                    sandbox_run: Optional[SandboxRun] = None) -> EvalResult:
    """Evaluate here, in a fresh sandboxed child; `sandbox_run` replaces sandbox.run_job (a worker pool
    hands over a child it started ahead of time)."""
    run = run or EvalRun()
    run = run.but(device=validate_device(run.device, run.config.compile_only))
    pre = precheck(task, candidate_text, run)
    if isinstance(pre, EvalResult):
        return pre
    late = clock_ran_out(task, pre.code_hash, run)
    if late is not None:
        return late

    if run.device.startswith("cuda") and not run.config.compile_only and run.device in _suspect_gpus:
        if not sandbox.probe_gpu(run.device):
            raise GPUUnavailableError(run.device)
        _suspect_gpus.discard(run.device)

    return check_gpu_after(run_prepared(task, pre, run, sandbox_run), run)


def run_prepared(task: Task, pre: Prepared, run: EvalRun, sandbox_run: Optional[SandboxRun] = None,
                 prebuild: bool = False) -> EvalResult:
    """The sandbox part of an evaluation, for a candidate that passed `precheck`.

    Out of memory is the machine's state, not the candidate's verdict: the candidate is re-run once
    alone (the device's admission lock held exclusively: evaluations of ours already running finish
    first and new ones wait), and the record says so. Out of memory alone too stays `out_of_memory`;
    the reference's own (ReferenceOutOfMemory) alone too fails the task."""
    uses_device = not (run.config.compile_only or prebuild)
    admitted = (device_lock.DeviceLock(run.device, shared=True, kind="admission") if uses_device
                else contextlib.nullcontext())
    first: Optional[str] = None  # why the first run was out of memory, when it was
    result: Optional[EvalResult] = None
    with admitted:
        try:
            result = _run_in_sandbox(task, pre.code, pre.code_hash, run, sandbox_run or sandbox.run_job, prebuild)
        except ReferenceOutOfMemory as e:
            if not uses_device:
                raise
            first = str(e)
    if result is not None and result.verdict == Verdict.OUT_OF_MEMORY and uses_device:
        first = result.error or "out of memory"
    if first is not None:
        log.info("%s: out of memory beside other work (%s); re-running it alone", task.id, first[:200])
        with device_lock.DeviceLock(run.device, kind="admission") as alone:
            # a fresh child: a pool's spare (`run`) is for one job only. The reference's out of memory
            # alone too (ReferenceOutOfMemory, an EvaluatorError) fails the task.
            result = _run_in_sandbox(task, pre.code, pre.code_hash, run, sandbox.run_job, prebuild, alone=True)
        result.flags.append(f"out of memory beside other work; re-run alone (after waiting {alone.waited:.1f} s "
                            f"for the device's other evaluations): {first[:300]}")
    assert result is not None
    result.findings = pre.findings
    result.sizing = task.sizing
    if uses_device and result.verdict.outputs_match and run.config.second_shape:
        result.generalises, result.generalises_note = check_second_shape(task, pre, run)
    return result


def check_second_shape(task: Task, pre: Prepared, run: EvalRun) -> tuple[Optional[bool], str]:
    """A candidate found correct at the task's shape, checked once more for correctness alone at the
    task's second shape (a different batch and inner size: Sizing.second_shapes), in a fresh
    sandbox, on the source rewritten by tasks/sizing.py: does it hold on shapes it never saw? A
    kernel that hard-codes the task's dimensions fails here. Not a verdict: (True | False | None,
    why), None where it was not checked."""
    from kernelwright.tasks.sizing import variant_source

    source = variant_source(task)
    if source is None:
        return None, ("the task was not sized, so it has no second shape" if task.sizing is None
                      else f"no second shape: {task.sizing.second_why}")
    variant = task.model_copy(update={"source": source, "sizing": None})
    once = run.but(time=False, compile_baseline=False, trials=min(run.config.trials, 2))
    shapes = ", ".join(task.sizing.second_shapes) if task.sizing else ""
    try:
        with device_lock.DeviceLock(run.device, shared=True, kind="admission"):
            second = _run_in_sandbox(variant, pre.code, pre.code_hash, once, sandbox.run_job)
    except (EvaluatorError, InfrastructureError) as e:  # the reference, or this machine, at that shape
        return None, f"not checked at {shapes}: {str(e)[:300]}"
    if second.verdict.outputs_match:
        return True, f"also correct at inputs {shapes} ({task.sizing.second_why})"
    if second.verdict in (Verdict.OUT_OF_MEMORY, Verdict.TIMEOUT):
        return None, f"not checked at {shapes}: {second.verdict.value}"
    why = (second.error or "").strip().splitlines()
    return False, f"{second.verdict.value} at inputs {shapes}" + (f": {why[0][:300]}" if why else "")


def check_gpu_after(result: EvalResult, run: EvalRun) -> EvalResult:
    """After a timeout or crash on a GPU: does the GPU still answer? Raises if not."""
    if result.verdict.may_have_hung_the_device and run.device.startswith("cuda") and not run.config.compile_only:
        result.gpu_healthy = sandbox.probe_gpu(run.device)
        if not result.gpu_healthy:
            raise GPUUnavailableError(run.device, result)
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


def _environment(run: EvalRun, device: str) -> dict[str, str]:
    env = allowed_env(dict(os.environ))
    env.update({
        "KERNELWRIGHT_SIZE": run.size,
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
    if run.config.compile_only:
        from kernelwright.evaluate.compile_only import gpu_arch_list, toolkit_home

        env.setdefault("TORCH_CUDA_ARCH_LIST", gpu_arch_list())
        home = toolkit_home()
        if home and "CUDA_HOME" not in env:
            env["CUDA_HOME"] = home
    # The worker must import this package even when it is not installed (a source checkout).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_ROOT, env.get("PYTHONPATH", "")) if p)
    env.update(run.extra_env)
    return env


_PKG_ROOT = str(Path(__file__).resolve().parents[2])


def make_job(task: Task, code: str, code_hash: str, run: EvalRun, prebuild: bool = False) -> EvalJob:
    """The job the sandbox's worker runs (its `workdir` is the worker's scratch, added by the
    sandbox). `prebuild`: import the candidate (its builds run exactly as a full evaluation
    would build them, and land in the cache under its scope) and stop."""
    cfg = run.config
    return EvalJob(
        task_source=task.source, candidate_source=code,
        # compile-only never touches a GPU: the worker runs on the CPU and only builds
        device="cpu" if (cfg.compile_only or prebuild) else run.device,
        trials=cfg.trials, seed=cfg.seed, atol=cfg.atol, rtol=cfg.rtol,
        timing=TimingSpec(warmup=cfg.warmup, iters=cfg.iters, flush_cache=cfg.flush_cache),
        compile_baseline=cfg.compile_baseline, input_sets=cfg.input_sets, time=cfg.time,
        compile_only=cfg.compile_only or prebuild, prebuild=prebuild, builds_root=str(builds_root(run)),
        compat=cfg.compat)


def pch_folder() -> str:
    """The machine's precompiled torch headers (buildpch.py), made here when missing, so that a
    builder's box started ahead (a pool's spare) sees the headers made later too."""
    folder = os.environ.get("KERNELWRIGHT_PCH_CACHE") or os.path.join(default_cache_root(), "builds", "pch")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        pass  # not writable: no header is made, and the box binds what exists
    return folder


def builds_root(run: EvalRun) -> Path:
    return run.cache_root() / "builds"


def sandbox_env(run: EvalRun) -> dict[str, str]:
    """The environment a worker for `run` starts with (a pool starts its workers ahead with it)."""
    return _environment(run, run.device)


def sandbox_hold(run: EvalRun, prebuild: bool = False) -> sandbox.Confine:
    """How a worker for `run` is confined: its limits, what it may read, what it runs."""
    # Python and the package (the kernelwright folder alone: the checkout around it may hold task
    # files and tests), and what the caller put on PYTHONPATH besides; never the build cache (the
    # sandbox copies in the entries a job may load) or the device-lock folder (the judge inherits
    # descriptors of its device's locks: timing must exclude other processes' work on the device)
    visible = confine.python_paths()
    if prebuild and not run.config.compile_only:
        visible.append(pch_folder())  # the trusted builder's precompiled torch headers, read-only
    # the judge (judge.py) never imports the candidate, which runs in a runner process (runner.py);
    # their shared memory is a memfd on the CPU and a CUDA IPC allocation on a GPU (cuda_arena.py)
    cfg = run.config
    return sandbox.Confine(limits=confine.Limits.for_run(cfg.timeout, cfg.memory_limit_mb, cfg.scratch_mb),
                           visible=tuple(visible),
                           locks=tuple(str(p) for p in device_lock.prepare(run.device)),
                           env_scrubbed=True, required=not cfg.unconfined,
                           timed=cfg.time and not cfg.compile_only and not prebuild,
                           spawn_runners=run.device != "cpu")


def _run_in_sandbox(task: Task, code: str, code_hash: str, run: EvalRun, sandbox_run: SandboxRun,
                    prebuild: bool = False, alone: bool = False) -> EvalResult:
    job = make_job(task, code, code_hash, run, prebuild)
    cfg = run.config
    if cfg.unconfined:
        _warn_unconfined()
    try:
        shared = shared_builds(code, run, job, sandbox_run)
        if shared is not None:
            job.cache_keys = list(shared.keys)
            job.trusted_builds = shared.trusted
        if shared is not None and shared.timed_out:
            # the compile of the candidate's own arguments hung: the worker's would hang the same
            return EvalResult(verdict=Verdict.TIMEOUT, error=f"killed after {cfg.timeout:.0f} s during stage "
                              "'shared_build'", task_id=task.id, candidate_hash=code_hash, device=run.device,
                              compile_only=cfg.compile_only, stages=[shared.stage], confinement=shared.confinement)
        if prebuild and shared is not None and shared.covers_all:
            # every build of the candidate is in the shared scope: nothing left for a prebuild
            return EvalResult(verdict=Verdict.COMPILED, task_id=task.id, candidate_hash=code_hash,
                              device=run.device, compile_only=True, compiled=True, stages=[shared.stage])
        ledger = devmem.ledger(run.device) if job.device.startswith("cuda") else None
        key = footprint_key(task, run)
        # only the run is admitted by memory: the trusted builds above use no GPU memory
        with ledger.admit(key) if ledger is not None else contextlib.nullcontext() as admission:
            outcome = sandbox_run(job, timeout=cfg.timeout, env=sandbox_env(run), held=sandbox_hold(run, prebuild))
        if ledger is not None and outcome.device_memory_bytes:
            ledger.record(key, outcome.device_memory_bytes)
    except confine.ConfinementUnavailable as e:
        raise ConfinementError(str(e)) from None
    # what the candidate's process built died with its box; the host folder holds only the copy
    # of the cache entries it was given
    if not run.keep_workdir:
        confine.remove_tree(outcome.scratch)
    result = _assemble(task, code_hash, run, outcome, alone)
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


def footprint_key(task: Task, run: EvalRun) -> str:
    """What a task's measured device memory is kept under (devmem.py): the task at the size it runs."""
    return devmem.footprint_key(task.id, run.size, task.source)


@dataclass
class SharedBuilds:
    """What the trusted builder did for one candidate (buildspec.py, builder.py)."""

    keys: list[str]  # of the candidate's literal builds
    built: list[str]  # built now and promoted to the shared scope
    present: list[str]  # already there
    covers_all: bool  # every load_inline call of the candidate is in the shared scope now
    seconds: float
    failed: list[str] = field(default_factory=list)  # built now and failed (the error is kept)
    trusted: list[TrustedBuild] = field(default_factory=list)  # each key's outcome (the judge's evidence)
    timed_out: bool = False
    confinement: Any = None  # the builder's, when it ran

    @property
    def stage(self) -> Stage:
        return Stage(name="shared_build", seconds=round(self.seconds, 4), ok=not (self.failed or self.timed_out),
                     detail=f"{len(self.present)} cached, {len(self.built)} built, {len(self.failed)} failed, "
                            f"of {len(self.keys)}")


def shared_builds(code: str, run: EvalRun, job: EvalJob, sandbox_run: SandboxRun) -> Optional[SharedBuilds]:
    """Build the candidate's literal load_inline calls with the trusted builder, into the shared
    scope of the build cache, unless they are there already (compile-only objects are built each
    time: nothing a later evaluation could load). None when there is nothing to do (no literal
    call, a torch without version metadata)."""
    specs = buildspec.literal_builds(code)
    if not specs.builds:
        return None
    torch_version = buildcache.torch_version()
    if torch_version is None:
        return None  # the worker keys by torch.__version__ then: nothing to share safely
    env = sandbox_env(run)
    arch = _gpu_arch(job.device) if job.device.startswith("cuda") else env.get("TORCH_CUDA_ARCH_LIST", "")
    root = str(builds_root(run))
    keyed = {buildcache.build_key(b.arguments, arch, torch_version, env): b for b in specs.builds}
    present = [k for k, b in keyed.items() if buildcache.lookup(root, buildcache.SHARED, k, b.name)[0] is not None]
    present += [k for k in keyed if k not in present and buildcache.failure(root, k) is not None]
    todo = {k: b for k, b in keyed.items() if k not in present}
    # the precompiled torch header of each build's flags, made once per cache (not the candidate's
    # time: it serves every later build with those flags); compile-only's objects build without it
    pch = {} if run.config.compile_only else \
        {k: buildpch.header_for(pch_folder(), b.arguments, torch_version, env) for k, b in todo.items()}
    started = time.monotonic()
    built: list[str] = []
    objects: list[str] = []
    failed: list[str] = []
    timed_out, confinement = False, None
    for key, build in todo.items():
        # one box per key: a hostile flag's command runs where no other key's build is
        build_job = BuildJob(arch=arch, builds=[BuildRequest(key=key, arguments=build.arguments, pch=pch.get(key))],
                             compile_only=run.config.compile_only)
        left = max(1.0, run.config.timeout - (time.monotonic() - started))
        outcome = sandbox_run(build_job, timeout=left, env=env, held=sandbox_hold(run, prebuild=True))
        timed_out, confinement = outcome.timed_out, outcome.confinement
        try:
            # only the key computed here: whatever else the builder's outbox holds stays there
            built += buildcache.promote(outcome.scratch, root, only={key})
            objects += buildcache.compiled_objects(outcome.scratch, {key} - set(built))
            if not timed_out:  # a build cut short did not fail: the worker tries it itself
                failed += buildcache.record_failures(outcome.scratch, root, {key} - set(built) - set(objects))
        finally:
            confine.remove_tree(outcome.scratch)
        if timed_out:
            break
    trusted = trusted_outcomes(root, keyed, objects)
    usable = [t.key for t in trusted if t.ok and not t.objects_only]
    return SharedBuilds(keys=list(keyed), built=built + objects, present=present, failed=failed,
                        covers_all=specs.complete and len(usable) == len(keyed), trusted=trusted,
                        seconds=time.monotonic() - started, timed_out=timed_out, confinement=confinement)


def trusted_outcomes(root: str, keyed: dict[str, buildspec.LiteralBuild], objects: list[str]) -> list[TrustedBuild]:
    """What the trusted builder made of each literal build, read here, outside any box: a verified
    library in the shared scope, objects compiled now (compile-only), or a recorded failure. A key
    with none of them (a build cut short) is left out: the worker builds it itself."""
    found = []
    for key, build in keyed.items():
        if buildcache.lookup(root, buildcache.SHARED, key, build.name)[0] is not None:
            found.append(TrustedBuild(key=key, name=build.name, ok=True))
        elif key in objects:
            found.append(TrustedBuild(key=key, name=build.name, ok=True, objects_only=True))
        elif (text := buildcache.failure(root, key)) is not None:
            found.append(TrustedBuild(key=key, name=build.name, ok=False, error=text))
    return found


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


def _assemble(task: Task, code_hash: str, run: EvalRun, out: sandbox.SandboxOutcome,
              alone: bool = False) -> EvalResult:
    stages = [Stage(name=m["name"], seconds=m["seconds"], ok=m["ok"], detail=m.get("detail"))
              for m in out.messages if m.get("type") == "stage"]
    final = out.final
    base = dict(task_id=task.id, candidate_hash=code_hash, device=run.device, compile_only=run.config.compile_only,
                stages=stages, output_tail=out.output[-4000:] if out.output else None,
                confinement=out.confinement)
    if out.timed_out:
        where = out.last_stage or "start-up"
        return EvalResult(verdict=Verdict.TIMEOUT,
                          error=f"killed after {run.config.timeout:.0f} s during stage '{where}'",
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
