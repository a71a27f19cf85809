"""What an evaluation judges and how (EvalConfig), and one evaluation as asked (EvalRun).

EvalConfig is frozen, typed, hashable and serialisable: the one shape a study records in its
`[eval]` table, a command builds from its options and the judge's job is made from. Everything that
only says where files go, which device, which extra environment, or when the work runs sits beside
it in an EvalRun, so two evaluations that judge alike share one config whatever their place.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from kernelwright.device import resolve_size
from kernelwright.errors import EvaluatorError
from kernelwright.measure.draw import SEED

DEFAULT_TIMEOUT_S = 240.0
COMPAT_MODES = ("kernelwright", "kernelbench")

# Keyed by a study whatever their value: the settings a study could set when its first folders
# were written. Every other setting is keyed only where it differs from its default, so those
# folders keep their keys (and their recorded cells) as settings are added.
_ALWAYS_KEYED = ("timeout", "trials", "seed", "atol", "rtol", "warmup", "iters", "input_sets", "time", "size",
                 "compile_only", "compile_baseline")
# Decides whether a candidate may run on a machine missing a protection (confine.py), never what
# it computes; each result says so itself (confinement.trusted).
_NEVER_KEYED = ("unconfined",)


class EvalConfig(BaseModel):
    """What is judged and how. Bad values are bad input (EvaluatorError, one line) wherever it is
    built: the CLI, a study file (also when pydantic builds it inside a StudySpec), optimize."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    # is sized where it is loaded; `size_on` gives the KERNELWRIGHT_SIZE its source runs with)
    size: str = "auto"
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

    def __init__(self, **data: Any) -> None:
        # pydantic calls this for a nested config too (a StudySpec's [eval]): one error type for all
        try:
            super().__init__(**data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise EvaluatorError(msg if msg.startswith(_BAD) else f"{_BAD}{where}: {msg}") from None

    @model_validator(mode="before")
    @classmethod
    def _rules(cls, data: Any) -> Any:
        # on the values as given, before pydantic converts any: `trials = true` is not 1 trial
        if not isinstance(data, dict):
            return data
        v = {name: f.default for name, f in cls.model_fields.items()} | data
        problems = [f"{name} must be {rule}, not {v[name]!r}" for name, ok, rule in (
            ("trials", _is_int(v["trials"]) and v["trials"] >= 1, "an integer >= 1"),
            ("iters", _is_int(v["iters"]) and v["iters"] >= 1, "an integer >= 1"),
            ("warmup", _is_int(v["warmup"]) and v["warmup"] >= 0, "an integer >= 0"),
            ("input_sets", _is_int(v["input_sets"]) and v["input_sets"] >= 1, "an integer >= 1"),
            ("timeout", _is_number(v["timeout"]) and v["timeout"] > 0, "a number of seconds > 0"),
            ("atol", v["atol"] is None or (_is_number(v["atol"]) and v["atol"] >= 0), "a number >= 0"),
            ("rtol", v["rtol"] is None or (_is_number(v["rtol"]) and v["rtol"] >= 0), "a number >= 0"),
            ("compat", v["compat"] in COMPAT_MODES, " or ".join(COMPAT_MODES)),
            ("memory_limit_mb", v["memory_limit_mb"] is None or (
                _is_int(v["memory_limit_mb"]) and v["memory_limit_mb"] >= 64), "an integer >= 64 (MB)"),
            ("size", _is_size(v["size"]), "small, full, auto or a factor in (0, 1] such as 1/8"),
            ("scratch_mb", v["scratch_mb"] is None or (_is_int(v["scratch_mb"]) and v["scratch_mb"] >= 16),
             "an integer >= 16 (MB)"),
            ("size", v["compat"] != "kernelbench" or v["size"] in ("auto", "full"),
             "auto or full with compat kernelbench (the task's own size)"),
        ) if not ok]
        if problems:
            raise ValueError(_BAD + "; ".join(problems))
        return data

    def but(self, **changes: Any) -> EvalConfig:
        """This config with `changes`, checked as any other."""
        return EvalConfig(**{**self.model_dump(), **changes})

    @property
    def task_size(self) -> str:
        """The size asked for: `size`, except under KernelBench's definitions (the task's own)."""
        return "full" if self.compat == "kernelbench" else self.size

    def size_on(self, device: str) -> str:
        """The KERNELWRIGHT_SIZE a task's source runs with on `device`: the one rule the evaluator,
        the analysis and scaffold planning share."""
        return resolve_size(device, self.task_size)

    def keyed(self) -> dict[str, Any]:
        """The settings as a study's cell keys hash them (and its manifest records them)."""
        out = self.model_dump(mode="json")
        defaults = EVAL_DEFAULTS.model_dump(mode="json")
        return {k: v for k, v in out.items()
                if k in _ALWAYS_KEYED or (k not in _NEVER_KEYED and v != defaults[k])}


_BAD = "bad evaluator option: "


@dataclass(frozen=True)
class EvalRun:
    """One evaluation as asked: its config (what is judged and how) and, beside it, where and when
    it runs, none of which changes what is judged."""

    config: EvalConfig = field(default_factory=EvalConfig)
    device: str = "cpu"
    cache_dir: Optional[str] = None  # the build cache (default: KERNELWRIGHT_CACHE or ~/.cache/kernelwright)
    extra_env: Mapping[str, str] = field(default_factory=dict)  # added after the allowlist: trusted input
    keep_workdir: bool = False
    # Order in a pool's queues, lower first (executors/pool.py): a search's launch variants of a
    # kernel already verified wait behind other cells' first candidates. Changes when, not what.
    priority: int = 0
    # A study cell's clock (time.monotonic() on the caller's machine): an evaluation still queued
    # when it passes is not begun (`clock_ran_out`), so a cell ends near its clock however many
    # cells share the device. Changes whether, never what.
    deadline: Optional[float] = None

    @classmethod
    def of(cls, **settings: Any) -> EvalRun:
        """From one flat set of settings (a command's options, a test's), each to its place."""
        config = {k: settings.pop(k) for k in list(settings) if k in EvalConfig.model_fields}
        return cls(config=EvalConfig(**config), **settings)

    def but(self, **changes: Any) -> EvalRun:
        """This run with `changes`, the config's among them checked as any config."""
        config = {k: changes.pop(k) for k in list(changes) if k in EvalConfig.model_fields}
        return replace(self, **changes, **({"config": self.config.but(**config)} if config else {}))

    @property
    def size(self) -> str:
        """The KERNELWRIGHT_SIZE the task's source runs with here."""
        return self.config.size_on(self.device)

    def cache_root(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_root()


def default_cache_root() -> Path:
    """The machine's cache: KERNELWRIGHT_CACHE, else ~/.cache/kernelwright."""
    return Path(os.environ.get("KERNELWRIGHT_CACHE") or os.path.join(Path.home(), ".cache", "kernelwright"))


def _is_size(v: Any) -> bool:
    try:
        resolve_size("cpu", v)
    except (ValueError, TypeError):
        return False
    return True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# The defaults as values, for the commands' options (`EVAL_DEFAULTS.timeout`): one place for them.
EVAL_DEFAULTS = EvalConfig()
