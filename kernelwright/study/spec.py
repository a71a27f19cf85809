"""What a study is: a typed StudySpec, read from a TOML study file and/or command-line flags.

Flags override the file, key by key, so `kernelwright study run study.toml --out other/` reruns a
committed study elsewhere. Every field that changes what a cell computes (the regime config with
its seed, the model, the device kind, the evaluation settings) goes into the cell's config hash;
fields that only change *how* the work is spread (devices, jobs, cache folder) do not, so a study
resumed on a different set of GPUs still skips its finished cells.

    out = "runs/small"                  # the study folder (manifest.json, attempts.jsonl, cells.jsonl)
    model = "replay:tests/fixtures/transcripts/zero_shot.jsonl"
    regimes = ["zero_shot", "guided", "agentic", "agentic+no_retrieval+n=2"]
    tasks = ["builtin:1-3"]             # specs kernelwright.tasks.load_tasks accepts (a string or a list)
    seeds = [0]
    devices = ["cuda:0", "cuda:1"]      # one evaluation worker per device
    max_tokens = 1024
    cell_minutes = 4                    # optional: no model request, no evaluation begun after 4 minutes of a cell
    [eval]
    time = true
    trials = 5
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from kernelwright.device import device_key, device_kind
from kernelwright.errors import BadInput, EvaluatorError
from kernelwright.evaluate.config import EvalConfig
from kernelwright.executors.base import EXECUTORS
from kernelwright.strategies import defaults
from kernelwright.strategies.config import RegimeConfig, RegimeError, parse_regime

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class StudySpecError(BadInput, ValueError):
    """A study file or flag that cannot be used; the message is one line."""


class StudySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # the study folder; None only for a `run` without --out (one_cell: a cell that records nothing)
    out: Path | None = None
    model: str | None = None  # a model spec (docs/backends.md); None: the default embedded model
    # the default regime, scaffold and target: strategies/defaults.py, the rule `run` and `optimize` follow
    regimes: list[str] = Field(default_factory=lambda: [defaults.DEFAULT_REGIME])
    tasks: list[str] = Field(default_factory=lambda: ["builtin"])  # task specs, concatenated in order
    n: int | None = None  # samples per generation step, unless a regime spec says n=
    turns: int | None = None
    seeds: list[int] = Field(default_factory=lambda: [0])
    devices: list[str] = Field(default_factory=lambda: ["cpu"])
    target: str | None = None  # cuda | triton | cpp; default: cpp on the CPU, cuda on GPUs
    scaffold: bool | None = None  # None: on for the embedded models; a regime's +scaffold/+no_scaffold wins
    max_tokens: int = 1024
    # A clock per cell, in minutes from the cell's start: no model request is made after it (the
    # regime ends where it stands, with the attempts it made and the pick among them; launch
    # variants stop too). What a fixed amount of device time can show: without it a search cell
    # ends when its regime does, and a study of the embedded model on 28 tasks outlasted a device
    # session (on an H100, 11 of 28 cells ended in 15.7 minutes). It changes what a cell
    # computes, so it is in the config hash (when set). Wall time: a cell that waits for a shared
    # model or device gets less done in it, so it is a study's condition, stated in its report.
    cell_minutes: float | None = None
    eval: EvalConfig = Field(default_factory=EvalConfig)  # what is judged and how: keyed (EvalConfig.keyed)
    # Folder of recorded task facts (strategies.facts.PromptFacts); missing ones are computed and
    # saved there. Default: <out>/facts. Copies of the facts used always land in <out>/facts, so
    # the report can read the roofline floor from the study folder alone.
    facts: Path | None = None
    jobs: int = 0  # cells in flight at once; 0: two per device, so generation overlaps evaluation
    cache_dir: str | None = None  # the evaluator's build cache (default: KERNELWRIGHT_CACHE or ~/.cache)
    # Where evaluations run: "local" (kernelwright.executors.pool on this machine) or "ray" (a Ray
    # cluster at RAY_ADDRESS; docs/scaling.md). How the work is spread: not in the config hash.
    executor: str = "local"
    # Evaluations at once per device in the local pool. The timed stage holds the device alone
    # (device.py) whatever this is; more slots overlap the rest of an evaluation (start, import,
    # correctness, build loads) with another's, where one slot was the whole study's queue (on the
    # H200 one slot was busy for all 23 minutes of a CUDA search study).
    # With "ray": evaluations at once per GPU of the cluster (each asks Ray for 1/slots of one).
    slots: int = 1
    # The Ray cluster ("ray"): its address (else RAY_ADDRESS, else a local one started for the run)
    ray_address: str | None = None
    # A model generating on a GPU ("hf:...?device=cuda:N") with a local Ray cluster: "shared", that
    # GPU evaluates too (its generation and the timings take turns on the device lock), or "own",
    # the cluster is started without it.
    model_gpu: str = "shared"

    @model_validator(mode="before")
    @classmethod
    def _compile_baseline_for_search(cls, data: Any) -> Any:
        """A `search` study times torch.compile(reference) unless told not to (`compile_baseline =
        false`, `--no-compile-baseline`): what its kernels are for is to beat what a user already has.
        (A single-shot regime's study keeps the evaluator's default: off.)"""
        regimes = (data.get("regimes") or [defaults.DEFAULT_REGIME]) if isinstance(data, dict) else []
        if not any(str(r).split("+")[0] == "search" for r in regimes):
            return data
        ev = data.get("eval")
        if ev is None:
            return {**data, "eval": {"compile_baseline": True}}
        if isinstance(ev, dict) and ev.get("compile_baseline") is None:
            return {**data, "eval": {**ev, "compile_baseline": True}}
        return data

    @field_validator("regimes")
    @classmethod
    def _regimes(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("a study needs at least one regime")
        for spec in v:
            parse_regime(spec)  # RegimeError is a ValueError: pydantic reports it
        if len(set(v)) != len(v):
            raise ValueError("a regime is listed twice")
        return v

    @field_validator("tasks", mode="before")
    @classmethod
    def _tasks(cls, v: object) -> object:
        v = [v] if isinstance(v, str) else v
        if isinstance(v, list) and not v:
            raise ValueError("a study needs at least one task spec")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v):
            raise ValueError("seeds must be a non-empty list without repeats")
        return v

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: list[str]) -> list[str]:
        out = [d.strip().lower() for d in v]
        for d in out:
            if not (d == "cpu" or d == "cuda" or (d.startswith("cuda:") and d[5:].isdigit())):
                raise ValueError(f"unknown device {d!r}: use cpu, cuda or cuda:N")
        if not out or len({device_key(d) for d in out}) != len(out):  # `cuda` is `cuda:0`
            raise ValueError("devices must be a non-empty list without repeats")
        if len({device_kind(d) for d in out}) > 1:
            # the target and the timing protocol differ between CPU and GPU: one study, one kind
            raise ValueError("devices mix cpu and cuda; run one study per kind")
        return out

    @model_validator(mode="after")
    def _target(self) -> StudySpec:
        if self.target is not None and self.target not in ("cuda", "triton", "cpp"):
            raise ValueError(f"unknown target {self.target!r}: use cuda, triton or cpp")
        if self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}: use {', '.join(EXECUTORS)}")
        if self.jobs < 0 or self.max_tokens < 1 or self.slots < 1:
            raise ValueError("jobs must be >= 0, slots and max_tokens >= 1")
        if self.cell_minutes is not None and not self.cell_minutes > 0:
            raise ValueError("cell_minutes must be more than 0 (leave it out for no clock)")
        if self.slots > 1 and self.executor not in ("local", "ray"):
            raise ValueError(f"slots are the local pool's or Ray's; {self.executor} runs one evaluation a thread")
        if self.model_gpu not in ("shared", "own"):
            raise ValueError(f"model_gpu is shared or own, not {self.model_gpu!r}")
        if (self.ray_address or self.model_gpu != "shared") and self.executor != "ray":
            raise ValueError("ray_address and model_gpu are the ray executor's (--executor ray)")
        return self

    # -- derived -------------------------------------------------------------------------------

    @property
    def device_kind(self) -> str:
        return device_kind(self.devices[0])

    @property
    def resolved_target(self) -> str:
        return self.target or defaults.default_target(self.devices[0])

    @property
    def facts_dir(self) -> Path:
        return self.facts or self.out / "facts"

    @property
    def concurrency(self) -> int:
        return self.jobs or 2 * len(self.devices)

    def regime_config(self, regime: str, seed: int) -> RegimeConfig:
        # `+scaffold` / `+no_scaffold` in a regime spec override the scaffold default (that is how
        # a study compares the two)
        fields: dict[str, Any] = {"target": self.resolved_target, "seed": seed, "max_tokens": self.max_tokens,
                                  "scaffold": defaults.default_scaffold(self.model, self.scaffold)}
        if self.n is not None:
            fields["n"] = self.n
        if self.turns is not None:
            fields["turns"] = self.turns
        return parse_regime(regime, **fields)

    def config_hash(self, config: RegimeConfig, model: str) -> str:
        """Keys a cell: the regime config (seed included), the model, the device kind, the
        evaluation settings and the cell's clock. Not the device index, the job count or the cache
        folder."""
        return config.config_hash(model, self.keyed_context())

    def keyed_context(self) -> dict[str, Any]:
        """What besides the regime and the model a cell's key holds (the manifest records it too);
        the clock only when set, so folders written before it keep their keys."""
        return {"device": self.device_kind, "eval": self.eval.keyed(),
                **({"cell_minutes": self.cell_minutes} if self.cell_minutes is not None else {})}

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:12]


def _one_line(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "study"
    return f"{where}: {first['msg']}" + (f" (and {e.error_count() - 1} more problem(s))" if e.error_count() > 1 else "")


def load_spec(path: Path | None, overrides: dict[str, Any] | None = None) -> StudySpec:
    """The spec from a TOML file (if any) with flags on top; `None` flags are "not given".
    Keys of `overrides` named `eval.X` set fields of the [eval] table."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except OSError as e:
            raise StudySpecError(f"cannot read study file {path}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise StudySpecError(f"{path}: not valid TOML: {e}") from None
    for key, value in (overrides or {}).items():
        if value is None or value == []:
            continue
        if key.startswith("eval."):
            data.setdefault("eval", {})[key[5:]] = value
        else:
            data[key] = value
    if "out" not in data:
        raise StudySpecError("no output folder: give --out or out = \"...\" in the study file")
    return _validated(data)


def one_cell(task: str, regime: str | None, seed: int, device: str, *, out: Path | None = None,
             **fields: Any) -> StudySpec:
    """`kernelwright run` as a study of one cell: one task spec, one regime (the default one when
    None), one seed, one device, checked as a study file is. `fields` are StudySpec's others
    (model, target, scaffold, n, eval as a dict, ...); None values are "not given"."""
    data = {"out": out, "tasks": [task], "regimes": [defaults.default_regime(regime)], "seeds": [seed],
            "devices": [device], **{k: v for k, v in fields.items() if v is not None}}
    return _validated(data)


def _validated(data: dict[str, Any]) -> StudySpec:
    try:
        return StudySpec.model_validate(data)
    except ValidationError as e:
        raise StudySpecError(_one_line(e)) from None
    except RegimeError as e:  # raised by parse_regime in a derived call
        raise StudySpecError(str(e)) from None
    except EvaluatorError as e:  # the [eval] table's own check (EvalConfig), one line already
        raise StudySpecError(f"eval: {e}") from None
