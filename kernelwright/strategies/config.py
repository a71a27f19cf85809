"""What a regime is asked to do: one typed config, parsed from a spec like `agentic+no_retrieval+n=2`.

All regimes share the model, the base prompt, the decoding budget (max_tokens) and the evaluator;
they differ only in information and control flow. The config hash keys study cells, so a record
produced under another configuration is never reused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional

from pydantic import BaseModel, ConfigDict

from kernelwright.errors import BadInput

REGIME_NAMES = ("zero_shot", "guided", "iterative", "agentic", "routed", "search")
ABLATIONS = ("no_analyzer", "no_retrieval", "no_feedback_analyzer", "single_turn", "ambition", "no_grounding",
             # search's parts, each switched off on its own, and its grammar switched on (strategies/search/)
             "no_precheck", "no_repair", "no_shared_build", "no_tune", "grammar", "no_steps",
             "no_parts")


class RegimeError(BadInput, ValueError):
    """A regime spec that cannot be parsed; the message is one line."""


class RegimeConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    ablations: tuple[str, ...] = ()
    n: Optional[int] = None  # samples per generation step; None: the regime's default
    turns: Optional[int] = None  # None: the regime's default (iterative 3, agentic 3)
    temperature: Optional[float] = None  # None: the regime's default (greedy for single-shot regimes)
    top_p: float = 0.8
    top_k: int = 20
    repeat_penalty: float = 1.05
    max_tokens: int = 1024  # the one decoding budget for every generated program
    role_max_tokens: int = 384  # analyzer, researcher and feedback roles
    seed: int = 0
    early_stop: bool = True  # stop once a turn yields a correct custom kernel faster beyond noise
    target: str = "cpp"  # cuda | triton | cpp
    eval_workers: int = 1  # candidates evaluated at once (timing on one device stays serial in the pool)
    # Scaffolded generation (kernelwright/scaffold): the system writes the program, the model only
    # the marked region. On by default for the embedded model (the CLI decides), off here so a
    # config built in code means what it says.
    scaffold: bool = False

    def has(self, ablation: str) -> bool:
        return ablation in self.ablations

    @property
    def retrieves(self) -> bool:
        """Whether a run may call the retrieval researcher (routed may hand a task to agentic):
        what agentic asks before retrieving, and what check_runnable checks for."""
        return self.name in ("agentic", "routed") and not self.has("no_retrieval")

    @property
    def spec(self) -> str:
        parts = [self.name, *self.ablations] + (["scaffold"] if self.scaffold else [])
        if self.n is not None:
            parts.append(f"n={self.n}")
        if self.turns is not None:
            parts.append(f"turns={self.turns}")
        return "+".join(parts)

    def config_hash(self, model: str, extra: Optional[dict] = None) -> str:
        payload = {"regime": self.model_dump(mode="json"), "model": model, **(extra or {})}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def parse_regime(spec: str, **defaults: object) -> RegimeConfig:
    """`agentic`, `agentic+no_retrieval`, `agentic+n=8+single_turn`, `iterative+turns=5`,
    `zero_shot+scaffold`, `guided+no_scaffold` (those two override the caller's default)."""
    name, *mods = [p.strip() for p in spec.strip().split("+") if p.strip()] or [""]
    if name not in REGIME_NAMES:
        raise RegimeError(f"unknown regime {name!r}: choose from {', '.join(REGIME_NAMES)}")
    fields: dict[str, object] = dict(defaults)
    ablations: list[str] = []
    for mod in mods:
        key, eq, value = mod.partition("=")
        if eq:
            if key not in ("n", "turns", "temperature", "seed", "max_tokens"):
                raise RegimeError(f"unknown regime setting {key!r} in {spec!r}")
            try:
                fields[key] = float(value) if key == "temperature" else int(value)
            except ValueError:
                raise RegimeError(f"{key} needs a number in {spec!r}") from None
        elif mod in ("scaffold", "no_scaffold"):
            fields["scaffold"] = mod == "scaffold"
        elif mod in ABLATIONS:
            ablations.append(mod)
        else:
            raise RegimeError(f"unknown ablation {mod!r}: choose from {', '.join(ABLATIONS + ('scaffold', 'no_scaffold'))}")
    return RegimeConfig(name=name, ablations=tuple(ablations), **fields)  # type: ignore[arg-type]


def check_runnable(config: RegimeConfig) -> None:
    """RegimeError when this Python cannot run the regime. Entry points that run regimes call it
    next to parsing, before they load a model: a missing dependency then costs a second, not the
    minutes of a model load and a profile (it once did, on the H200). Parsing alone stays free of
    it, so that a report can be read on a machine that could not run the study."""
    if config.retrieves:
        from kernelwright.knowledge.retrieval import missing

        if lacking := missing():
            raise RegimeError(f"regime {config.spec!r} retrieves from kernelwright's notes, which needs "
                              f"{' and '.join(lacking)}: pip install {' '.join(lacking)} (or add +no_retrieval)")
