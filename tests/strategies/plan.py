"""What the recorded regime transcripts cover, shared by the recorder and the replay tests.

The transcripts in tests/fixtures/transcripts/ were recorded from the real embedded model
(Qwen2.5-Coder-1.5B-Instruct Q4_K_M, llama.cpp on the 2-core CPU) with `python -m
tests.strategies.record`. A replay only matches if every prompt is byte-identical, so the test
evaluates without timing (timings differ between runs and would appear in feedback prompts).
"""

from __future__ import annotations

from pathlib import Path

from kernelwright.evaluate import EvalRun
from kernelwright.strategies import RegimeConfig, parse_regime

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
FACTS = TRANSCRIPTS / "facts"
MODEL = "qwen2.5-coder-1.5b"

# One task per level: a single operator, a library op with an epilogue, a small network.
L1, L2, L3 = "builtin/L1/03_softmax", "builtin/L2/01_linear_gelu_scale", "builtin/L3/01_mlp_block"
# Recording is real generation on a 2-core CPU (about 11 tokens/s), so the multi-turn regimes
# cover fewer tasks; routed covers one task of each graph shape it routes differently.
PLAN = {
    "zero_shot": [L1, L2, L3],
    "guided": [L1, L2, L3],
    "iterative+turns=2": [L1, L3],
    "agentic+n=2+turns=2": [L2],
    "routed+n=2+turns=2": [L1, L2],
    # the same regimes under a scaffold (docs/scaffold.md): the model writes only the region
    "zero_shot+scaffold": [L1, L2, L3],
    "guided+scaffold": [L2],
    "iterative+turns=2+scaffold": [L1, L2],
    "agentic+n=2+turns=2+scaffold": [L2],
    "routed+n=2+turns=2+scaffold": [L1],
}
REGIMES = list(PLAN)
TASKS = [L1, L2, L3]


def regime_config(spec: str) -> RegimeConfig:
    return parse_regime(spec, target="cpp", max_tokens=768, seed=0)


def eval_run(cache_dir: str | None = None) -> EvalRun:
    return EvalRun.of(device="cpu", trials=3, time=False, timeout=300.0, cache_dir=cache_dir)


def transcript(spec: str) -> Path:
    scaffold = "_scaffold" if "scaffold" in spec.split("+") else ""
    return TRANSCRIPTS / (spec.split("+")[0] + scaffold + ".jsonl")


def selected(argv: list[str]) -> list[str]:
    """Specs named on the command line: a full spec, a regime name (its plain variant) or
    `scaffold` (every scaffolded variant); nothing named: all."""
    if not argv:
        return list(REGIMES)
    return [s for s in REGIMES if s in argv or ("scaffold" in argv and "scaffold" in s.split("+"))
            or (s.split("+")[0] in argv and "scaffold" not in s.split("+"))]
