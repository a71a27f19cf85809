"""Typed records that cross a stage boundary: tasks, evaluation results and their parts.

This module is the table of contents of the data model. Every record that is written to disk
or sent between processes is a pydantic model defined here, so there is one place for each
field's name and meaning. `SCHEMA_VERSION` (one for every stored record: results, attempts, cells,
scaffold plans, analyses) changes whenever a stored field changes meaning; a record written under a
newer one is refused when read (`Versioned`), never misread.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kernelwright.errors import BadInput

SCHEMA_VERSION = 1


class NewerSchema(BadInput, ValueError):
    """A stored record was written by a newer kernelwright (its schema_version is above ours)."""


class Versioned(BaseModel):
    """A record that is stored or sent between processes: it says which schema it was written under."""

    schema_version: int = SCHEMA_VERSION

    @field_validator("schema_version")
    @classmethod
    def _not_newer(cls, v: int) -> int:
        if v > SCHEMA_VERSION:
            raise NewerSchema(f"written under record schema {v}, and this kernelwright reads up to schema "
                              f"{SCHEMA_VERSION}: read it with a newer kernelwright")
        return v


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


NOT_JUDGED = "not judged:"  # how a candidate left unjudged by its cell's clock begins its error (the report counts them)


class Verdict(str, enum.Enum):
    """One taxonomy of outcomes, shared by the evaluator, the strategies and the report."""

    CORRECT = "correct"  # custom compiled code ran during forward and outputs match
    NO_CUSTOM_KERNEL = "no_custom_kernel"  # outputs match, but no custom compiled code ran
    WRONG_OUTPUT = "wrong_output"  # mismatch, or NaN/Inf where the reference has none
    SHAPE_MISMATCH = "shape_mismatch"
    COMPILE_ERROR = "compile_error"
    HALLUCINATED_API = "hallucinated_api"  # compile/import error from an API that does not exist
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASH = "crash"  # the child died: signal, segfault, os._exit, sys.exit
    # The device or the box ran out of memory. A fact of the machine at that moment, not the
    # candidate's verdict: the evaluator re-runs it once alone (evaluator.run_prepared) and says so.
    OUT_OF_MEMORY = "out_of_memory"
    CHEAT = "cheat"  # caught gaming the check or the clock
    STATIC_VIOLATION = "static_violation"  # a strict static rule
    SYNTAX_ERROR = "syntax_error"
    NO_CODE = "no_code"
    # Only in --compile-only mode, where nothing runs: the sources built (or compiled to objects).
    COMPILED = "compiled"
    # A sample that passed the region pre-check but was not built, because a sample more answers
    # agreed on was built first and verified (strategies/search/); or any candidate whose study
    # cell's clock ran out while it waited for the judge (evaluator.clock_ran_out).
    NOT_BUILT = "not_built"

    # What each group of verdicts means, asked of the verdict (one place for every such group).

    @property
    def is_failure_to_build(self) -> bool:
        return self in (Verdict.COMPILE_ERROR, Verdict.HALLUCINATED_API, Verdict.SYNTAX_ERROR, Verdict.NO_CODE)

    @property
    def outputs_match(self) -> bool:
        """The candidate's outputs matched the reference's (with or without custom code)."""
        return self in (Verdict.CORRECT, Verdict.NO_CUSTOM_KERNEL)

    @property
    def build_failed(self) -> bool:
        """The build (or the import it ends in) failed: decided before any forward ran."""
        return self in (Verdict.COMPILE_ERROR, Verdict.HALLUCINATED_API)

    @property
    def compiles(self) -> bool:
        """False when the source never became a module (a build error, bad syntax)."""
        return self not in (Verdict.COMPILE_ERROR, Verdict.HALLUCINATED_API, Verdict.SYNTAX_ERROR)

    @property
    def built(self) -> bool:
        """Reached only after the candidate's code built and imported."""
        return self in BUILT_VERDICTS

    @property
    def decided_before_build(self) -> bool:
        """Reached by the parent's checks, or (search) a pre-check pass left unbuilt."""
        return self in DECIDED_BEFORE_BUILD

    @property
    def may_have_hung_the_device(self) -> bool:
        """The candidate's process was killed or died: its device must be probed before reuse."""
        return self in (Verdict.TIMEOUT, Verdict.CRASH)


# Verdicts the evaluator reaches before any build (the parent's checks) or that say none was made
# (search's pre-check pass left unbuilt).
DECIDED_BEFORE_BUILD = frozenset({Verdict.NO_CODE, Verdict.SYNTAX_ERROR, Verdict.STATIC_VIOLATION, Verdict.NOT_BUILT})

# Verdicts reached only after the candidate's code built and imported.
BUILT_VERDICTS = frozenset(
    {
        Verdict.CORRECT,
        Verdict.NO_CUSTOM_KERNEL,
        Verdict.WRONG_OUTPUT,
        Verdict.SHAPE_MISMATCH,
        Verdict.RUNTIME_ERROR,
        Verdict.CHEAT,
        Verdict.COMPILED,
    }
)


class SizedConstant(BaseModel):
    """One module-level integer that sizes a task's problem (tasks/sizing.py)."""

    name: str  # "batch_size", "height=width" (one chained assignment), "input_shape[0]" (a tuple's element)
    original: int  # as the module computes it (at its own KERNELWRIGHT_SIZE)
    value: int  # what the task runs with
    scaled: bool  # False: kept (a kernel size, a stride, a group count, a small count or axis)
    why: str
    second: Optional[int] = None  # its value at the second shape, where that differs


class Sizing(BaseModel):
    """Which problem a task runs: the size asked for, each constant's original and chosen value, and
    the shapes measured on torch's meta device (nothing allocated); and the second shape a correct
    candidate is checked at (`EvalResult.generalises`)."""

    size: str  # as asked: small | full | auto | a factor such as 1/8
    mode: str  # own (the module's own KERNELWRIGHT_SIZE) | full | budget (derived within bounds) | factor
    env_size: str  # KERNELWRIGHT_SIZE the source runs with
    factor: Optional[str] = None
    max_bytes: Optional[int] = None  # budget: inputs + outputs + parameters within this
    max_flops: Optional[float] = None  # budget: one forward within this
    constants: list[SizedConstant] = Field(default_factory=list)
    input_shapes: list[str] = Field(default_factory=list)  # "(128, 65536) float32"
    output_shapes: list[str] = Field(default_factory=list)
    input_bytes: int = 0
    output_bytes: int = 0
    param_bytes: int = 0
    flops: Optional[float] = None  # of one forward (matmuls, convolutions, attention), None: not counted
    forward_error: Optional[str] = None  # the forward could not run on the meta device: outputs unknown
    original_bytes: Optional[int] = None  # inputs + outputs + parameters before sizing (budget, factor)
    original_flops: Optional[float] = None
    second_shapes: list[str] = Field(default_factory=list)  # inputs at the second shape; empty: none
    second_why: str = ""  # which sizes the second shape changes, or why there is none

    @property
    def changed(self) -> list[SizedConstant]:
        return [c for c in self.constants if c.value != c.original]

    def summary(self) -> str:
        """One line: what was asked and what it became."""
        head = {"own": "its own size", "full": "full size", "factor": f"{self.factor} of full size",
                "budget": "derived size"}.get(self.mode, self.mode)
        moved = ", ".join(f"{c.name} {c.original}->{c.value}" for c in self.changed)
        return (f"{head} ({self.size}): " + (moved + "; " if moved else "") + "inputs " + ", ".join(self.input_shapes)
                + f"; {(self.input_bytes + self.output_bytes + self.param_bytes) / 2**20:.3g} MB in all")


class Task(BaseModel):
    """A KernelBench-format problem: Python source with Model, get_inputs, get_init_inputs."""

    model_config = ConfigDict(frozen=True)

    id: str  # unique and stable, e.g. "builtin/L1/03_softmax" or "kernelbench/L1/1"
    name: str
    level: Optional[int] = None  # None for a user's own module
    path: Optional[str] = None  # file it was read from, if any
    source: str  # the full file text; the evaluator runs this, never the path
    origin: str = "file"  # builtin | file | kernelbench
    # Set where the task was sized (tasks/sizing.py): `source` is then the sized source
    sizing: Optional[Sizing] = None

    @property
    def source_hash(self) -> str:
        return sha256_text(self.source)


class Tolerance(BaseModel):
    atol: float
    rtol: float
    dtype: str  # the output dtype the tolerance was chosen for


class Accuracy(BaseModel):
    """Outputs outside the tolerance that were judged against the reference run in float64 and found
    at least about as accurate as the reference itself (measure/compare.py, `as_accurate`): an fp32
    GEMM summed in another order, or on the tensor cores split into head and tail, differs from
    the fp32 reference by more than 1e-4 and from the exact product by less than it does."""

    comparisons: int  # output checks decided this way (trials, timed calls, rechecks)
    # the worst one's: max abs error against the float64 run, the candidate's and the reference's
    max_abs_err: float
    ref_max_abs_err: float
    rms_err: float
    ref_rms_err: float
    # the float64 output's root mean square: the scale the hearing's slack is relative to
    scale: Optional[float] = None


class Finding(BaseModel):
    """One static-rule or grounding observation about a candidate's source."""

    rule: str
    # static rules: "strict" (decides the verdict) or "warning" (recorded only);
    # grounding: "error" (left unrepaired, will fail) or "warning"
    severity: str
    message: str
    line: Optional[int] = None


class Stage(BaseModel):
    """One step the evaluator ran, in order, with its wall time."""

    name: str
    seconds: float
    ok: bool
    detail: Optional[str] = None


class TimingStats(BaseModel):
    """Per-call times of one module under the timing protocol (milliseconds)."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    mean_ms: float
    calls: int
    protocol: str  # e.g. "cuda-events+device-sync, l2-flush, 8 input sets, 10 warm-up"
    # The conditions of a paired (candidate vs reference) timing, the same in both records.
    checked_calls: int = 0  # timed and warm-up calls whose output was compared with the reference's
    threads: Optional[int] = None  # CPU: intra-op threads both sides ran with (torch.set_num_threads)
    load_before: Optional[float] = None  # 1-minute load average when timing started / ended
    load_after: Optional[float] = None
    runnable_before: Optional[int] = None  # other runnable tasks on the machine (/proc/loadavg)
    runnable_after: Optional[int] = None
    floor_ms: Optional[float] = None  # (input + output bytes) / memory bandwidth: no real call is faster
    # Median of the protocol's null calls (the same input and output copies and round trip to the
    # reference's runner, no forward), timed in the same loop: what the protocol adds to every call.
    protocol_ms: Optional[float] = None
    # False where every call's tensors sat at the same place of the runners' arenas (fresh values
    # each call): a call over footprint.ONE_PLACE_ABOVE_BYTES, whose arenas hold one call, not two.
    fresh_place: bool = True


# How a measurement is written in words (a model's feedback, the judge's error lines): a decimal
# point or an exponent, always. Measurements depend on the judge's secret input draws, so a replay
# (llm/replay.py) matches a prompt with every number of this form masked, and a bare integer (a
# size, a line number, an index) stays part of what it matches on; ".3g" alone writes 124.2 as "124".
MEASUREMENT = re.compile(r"\d+\.\d+(?:e[-+]?\d+)?|\d+e[-+]?\d+")


def measured(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant digits, in MEASUREMENT's form (124.2 -> "124.0")."""
    text = f"{x:.{digits}g}"
    return text + ".0" if text.lstrip("-").isdigit() else text


class Mismatch(BaseModel):
    """How far the candidate's output is from the reference in the worst trial."""

    trial: int
    max_abs_diff: Optional[float] = None
    mean_abs_diff: Optional[float] = None
    mismatch_fraction: Optional[float] = None  # share of elements outside the tolerance
    nonfinite_in_candidate: int = 0
    elements: Optional[int] = None  # the output's element count (the task's, not the draw's)
    # ||candidate - reference|| / ||reference|| over the whole output (measure/compare.py): what the
    # elementwise tolerance cannot see where most values are below its atol
    relative_error: Optional[float] = None
    detail: Optional[str] = None
    # the float64 hearing's errors where it ran and the output was less accurate than the reference
    # (measure/compare.py); kept out of `summary`, which is what a model's repair prompt reads
    accuracy: Optional[Accuracy] = None

    def summary(self) -> str:
        """The statistics in words, for error messages and for feedback to the model."""
        parts = []
        if self.max_abs_diff is not None:
            mean = f", mean abs diff {measured(self.mean_abs_diff)}" if self.mean_abs_diff is not None else ""
            parts.append(f"max abs diff {measured(self.max_abs_diff)}{mean}")
        if self.mismatch_fraction is not None:
            parts.append(f"{measured(100 * self.mismatch_fraction)}% of elements outside tolerance")
        if self.relative_error is not None:
            parts.append(f"relative error of the whole output {measured(self.relative_error)}")
        if self.nonfinite_in_candidate:
            # a share, not a count: how many elements went NaN depends on the draw (see MEASUREMENT)
            share = f" in {measured(100 * self.nonfinite_in_candidate / self.elements)}% of elements" \
                if self.elements else ""
            parts.append(f"NaN/Inf where the reference is finite{share}")
        return "; ".join(parts) or (self.detail or "")


class Confinement(BaseModel):
    """Which OS protections held the candidate's process and its builds (confine.py).
    A result is `trusted` only when every required protection was active; `missing` names the
    ones that were not (possible only with EvalConfig.unconfined)."""

    mechanism: str = "none"  # bwrap | unshare | none
    env_scrubbed: bool = False  # the worker got an allowlisted environment (no keys or tokens)
    network: bool = False  # an empty network namespace: no route to any host or local service
    # only what it needs, read-only (no home, task file, build cache or lock folder), writable
    # only its private scratch, /tmp and /dev/shm (tmpfs of `scratch_limit_mb` each)
    filesystem: bool = False
    pid_namespace: bool = False  # its own PID namespace: one kill ends the whole tree
    die_with_parent: bool = False  # killed when the evaluating process dies
    caps_dropped: bool = False  # no capabilities (cannot remount, escape a cgroup, ...)
    memory_limit_mb: Optional[int] = None
    memory_via: Optional[str] = None  # cgroup_v2 | cgroup_v1 | rlimit_data
    process_limit: Optional[int] = None
    process_via: Optional[str] = None  # cgroup_v2 | cgroup_v1 | rlimit_nproc
    cpu_limit_s: Optional[int] = None  # RLIMIT_CPU per process, a backstop to the wall clock
    # the candidate's runner in PID and mount namespaces of its own, apart from the judge and the
    # reference's runner (evaluate/isolation.py), as the judge read it from /proc; None: not known
    runner_isolated: Optional[bool] = None
    scratch_limit_mb: Optional[int] = None  # the size of each of its writable tmpfs
    missing: list[str] = Field(default_factory=list)
    trusted: bool = False


class BuildProduct(BaseModel):
    """A build product the judge found and checked itself (evaluate/built.py)."""

    path: str
    sha256: str
    elf: str  # "object" or "shared object"


class EvalResult(Versioned):
    """The one record the evaluator returns for a candidate; `--json` prints exactly this."""

    verdict: Verdict
    compiled: bool = False
    correct: bool = False
    custom_kernel: bool = False
    speedup: Optional[float] = None  # ref median / candidate median; null unless measured
    # The same ratio net of the timing protocol's own cost per call (TimingStats.protocol_ms taken
    # off both medians): what the forward alone gains. None where either side's forward is too small
    # a part of its call to separate from the protocol (measure/timing.py net_ratio).
    net_speedup: Optional[float] = None
    net_speedup_vs_compile: Optional[float] = None  # against torch.compile(reference), likewise
    faster: bool = False  # speedup > 1 beyond noise (candidate p75 < reference p25)
    runtime_ms: Optional[float] = None
    ref_runtime_ms: Optional[float] = None
    # With EvalConfig.compile_baseline: torch.compile(reference) timed under the same protocol.
    compile_runtime_ms: Optional[float] = None
    compile_timing: Optional[TimingStats] = None
    faster_than_compile: Optional[bool] = None  # beyond noise, as `faster`; None: not measured
    compile_baseline_error: Optional[str] = None  # torch.compile failed on this machine: why
    # torch.compile ran more than 2x slower than eager beside it (measure/timing.py
    # compile_misbehaves): why; the report never states a speedup against it
    compile_baseline_suspect: Optional[str] = None
    error: Optional[str] = None  # the first relevant lines
    stages: list[Stage] = Field(default_factory=list)

    task_id: Optional[str] = None
    candidate_hash: Optional[str] = None
    device: Optional[str] = None
    compile_only: bool = False
    tolerance: Optional[Tolerance] = None
    # set where some output was outside the tolerance and passed against the float64 reference
    accuracy: Optional[Accuracy] = None
    trials: int = 0
    # The seeds every check's inputs were drawn with, by stage (correctness, count_ops, recheck, work;
    # `mismatch.trial` indexes correctness): drawn by the judge from `secrets` when needed, so no
    # candidate can know them, and recorded only after the verdict. Timed calls are fresh too and
    # each checked; their seeds are not kept.
    input_seeds: dict[str, list[int]] = Field(default_factory=dict)
    mismatch: Optional[Mismatch] = None
    timing: Optional[TimingStats] = None
    ref_timing: Optional[TimingStats] = None
    custom_calls: dict[str, int] = Field(default_factory=dict)  # compiled entry point -> calls seen
    # Share of one forward's time spent inside custom calls (synchronized on a GPU), measured outside
    # the timing loop; None when custom code never ran in every trial.
    custom_share: Optional[float] = None
    copy_only_calls: list[str] = Field(default_factory=list)  # custom entry points that only copied or filled
    # Share of the custom calls' time spent in ATen compute they dispatched themselves (a C++ function
    # calling at::addmm); above judge.LIBRARY_LIMIT the verdict is no_custom_kernel. None: not measured.
    library_share: Optional[float] = None
    builds: list[dict[str, Any]] = Field(default_factory=list)  # each load_inline/load call: name, seconds, ok
    # compile-only: the products the judge found and checked itself, never the runner's word
    build_products: list[BuildProduct] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)  # for review: e.g. speedup_above_10x
    cheat_reasons: list[str] = Field(default_factory=list)
    gpu_healthy: Optional[bool] = None  # probed after a timeout or crash on a GPU
    # seconds the timing waited for the device (others' timings and correctness runs held it)
    device_lock_wait_s: Optional[float] = None
    # the largest GPU memory the evaluation's processes held together (MiB), as the driver counted it,
    # sampled twice a second outside the sandbox (devmem.py); None: not on a GPU, or no reader here
    device_memory_mb: Optional[float] = None
    # seconds the evaluation waited to be admitted by memory (devmem.py's ledger: its task's need did
    # not fit beside what ran); None: not admitted by memory (no GPU, or no reader of the driver)
    memory_admission_wait_s: Optional[float] = None
    output_tail: Optional[str] = None  # capped stdout/stderr of the child, for debugging
    versions: dict[str, str] = Field(default_factory=dict)
    # None: no candidate code ran (decided before the sandbox)
    confinement: Optional[Confinement] = None
    # who wrote the verdict: "split" (a judge that never imported the candidate, evaluate/judge.py);
    # older GPU records say "in-process" (a worker that shared the candidate's process, removed since:
    # a forged verdict was possible there)
    judge: Optional[str] = None
    # "kernelbench" when judged under KernelBench's definitions (EvalConfig.compat); None: ours
    compat: Optional[str] = None
    # Which problem was run: the sized task's record (tasks/sizing.py); None: the task was not sized
    sizing: Optional[Sizing] = None
    # A correct candidate checked once more, for correctness only, at the task's second shape (a
    # different batch and inner size): False, it fails there (shape-specialised: not a failure
    # verdict, said to the user); None: not checked, `generalises_note` says why
    generalises: Optional[bool] = None
    generalises_note: Optional[str] = None

    def to_json(self, **kw: Any) -> str:
        return self.model_dump_json(**kw)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


class Attempt(Versioned):
    """One generated candidate and everything that happened to it. Every candidate a regime
    generates becomes an Attempt, kept or not: the study log holds one line per Attempt."""

    id: str  # "<cell key>/t<turn>/s<sample>", unique within a study
    task_id: str
    regime: str  # the regime spec, e.g. "agentic+no_retrieval"
    turn: int
    sample: int
    role: str = "generator"
    prompt_hash: str
    messages: list[dict[str, str]]
    raw_response: str
    finish_reason: Optional[str] = None
    code: Optional[str] = None  # extracted from the response (after scaffold assembly, if any)
    repaired_code: Optional[str] = None  # after deterministic grounding repairs (None: unchanged)
    code_hash: Optional[str] = None  # of the code that was evaluated
    repairs: list[dict[str, Any]] = Field(default_factory=list)
    grounding_findings: list[Finding] = Field(default_factory=list)
    eval: EvalResult
    usage: Usage = Field(default_factory=Usage)
    wall_s: float = 0.0  # generation + grounding + evaluation of this candidate
    notes: dict[str, Any] = Field(default_factory=dict)  # regime-specific facts (scaffold, parent id)


class Cell(Versioned):
    """The outcome of one regime on one task: all its attempts, and the one the evaluator's
    records selected (never the model's own judgment)."""

    key: str  # "<config hash>/<regime>/<task id>"
    task_id: str
    regime: str
    config_hash: str
    attempt_ids: list[str]
    selected: Optional[str] = None  # attempt id
    reason: str  # why this one, in words
    verdict: Verdict
    speedup: Optional[float] = None
    faster: bool = False
    custom_kernel: bool = False
    route: Optional[str] = None  # for `routed`: the regime it picked and why
    scaffold: Optional[str] = None  # under +scaffold: what the region covers, or why the task had none
    turns: int = 0
    wall_s: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    # why the regime was cut short, where it was: "clock of 4 min spent" (a budget or a study
    # cell's clock: llm/budget.py), else the exception's kind; None when it ran to its end
    stopped: Optional[str] = None


# -- what crosses the evaluator's sandbox boundary ------------------------------------------------
# The evaluator (parent) hands its judge (a sandboxed child) one job as JSON on stdin, and reads the
# judge's authenticated messages back; the job and the closing message are these records.


class TimingSpec(BaseModel):
    warmup: int
    iters: int
    flush_cache: bool


class TrustedBuild(BaseModel):
    """What the trusted builder made of one literal build of a candidate (evaluate/builder.py), as the
    parent observed it outside any box: the judge's compile-only evidence for that build."""

    key: str
    name: str
    ok: bool
    error: Optional[str] = None  # the builder's error text, where it failed
    objects_only: bool = False  # compiled to objects, not linked (compile-only with a CPU torch)


class EvalJob(BaseModel):
    """One candidate against one task, for the judge (evaluate/judge.py)."""

    kind: Literal["evaluate"] = "evaluate"
    task_source: str
    candidate_source: str
    device: str  # cpu for compile-only and prebuild jobs: they never touch a GPU
    trials: int
    seed: int
    atol: Optional[float] = None
    rtol: Optional[float] = None
    timing: TimingSpec
    compile_baseline: bool = False
    input_sets: int
    time: bool = True
    compile_only: bool = False
    prebuild: bool = False  # import the candidate (its builds land in the cache) and stop
    builds_root: str  # the cache's on the host; the sandbox points it at its copy of `cache_keys`
    cache_keys: list[str] = Field(default_factory=list)  # the trusted builder's keys this job may load
    trusted_builds: list[TrustedBuild] = Field(default_factory=list)  # set by the parent, never the box
    compat: str = "kernelwright"
    workdir: str = ""  # the judge's private scratch: set by the sandbox
    nonce: str = ""  # authenticates the judge's messages: set by the sandbox, never logged


class BuildRequest(BaseModel):
    key: str  # the build cache's key of these arguments
    arguments: dict[str, Any]  # load_inline's, bound by name
    pch: Optional[str] = None  # a precompiled <torch/extension.h> to -include (evaluate/buildpch.py)


class BuildJob(BaseModel):
    """Literal load_inline calls for the trusted builder (evaluate/builder.py); no candidate code runs."""

    kind: Literal["build"] = "build"
    arch: str
    builds: list[BuildRequest]
    compile_only: bool = False  # build as `eval --compile-only` does (objects only where torch lacks CUDA)
    workdir: str = ""
    nonce: str = ""


SandboxJob = Union[EvalJob, BuildJob]


def parse_job(text: str) -> SandboxJob:
    data = json.loads(text)
    return BuildJob.model_validate(data) if data.get("kind") == "build" else EvalJob.model_validate(data)


class JudgeResult(BaseModel):
    """The judge's closing message: its verdict, the reason, and the result's measured fields."""

    # a Verdict's value, or reference_error / reference_out_of_memory / infrastructure_error: the
    # judge's own observations, never a runner's claim (link.CLAIMABLE)
    verdict: str
    error: Optional[str] = None
    fields: dict[str, Any] = Field(default_factory=dict)
