"""The facts about a task that prompts show, as one serialisable record.

`PromptFacts` is what the regimes read from the task analysis (kernelwright/analysis): the graph
shape that routing uses, the operator lines the analyzer sees, the profile and roofline lines of
the guided prompt. It is a plain record so a study can compute it once per task and store it, and
a replayed test can load the one recorded with its transcript (profiler times differ between runs
and appear in prompts, so they must be fixed for a replay to match).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kernelwright.records import Task


class PromptFacts(BaseModel):
    task_id: str
    shape: str  # single_op | library_epilogue | fusible_chain | network
    shape_reason: str = ""
    device_name: str
    forward_ms: float
    profile_lines: list[str] = Field(default_factory=list)
    roofline_line: str = ""
    graph: list[str] = Field(default_factory=list)
    ops: list[str] = Field(default_factory=list)

    def guided_vars(self) -> dict[str, Any]:
        return {"device_name": self.device_name, "forward_ms": self.forward_ms,
                "profile_lines": self.profile_lines, "roofline_line": self.roofline_line}

    def graph_lines(self) -> list[str]:
        return self.graph

    def op_names(self) -> list[str]:
        return self.ops

    @classmethod
    def from_analysis(cls, a: Any) -> "PromptFacts":
        """From kernelwright.analysis.TaskAnalysis: the data its prompt_data() exposes."""
        d = a.prompt_data()
        r = d["roofline"]
        profile = [f"{o['op']}: {o['share']:.0%} of self time ({o['self_ms']:.3g} ms)" for o in d.get("top_ops", [])]
        roof = (f"at least {r['flops']:.3g} FLOP and {r['bytes']:.3g} bytes moved; floor {r['floor_ms']:.3g} ms on "
                f"{r['device']} ({r['compute_dtype']}); {r['bound']}-bound")
        graph = [line for line in a.prompt_lines() if not line.startswith(("self time", "roofline", "reference forward"))]
        return cls(task_id=d["task"], shape=d["shape"], shape_reason=d.get("reason", ""), device_name=d["device"],
                   forward_ms=float(d.get("forward_ms") or 0.0), profile_lines=profile, roofline_line=roof,
                   graph=graph, ops=list(d.get("ops", [])))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> "PromptFacts":
        return cls.model_validate(json.loads(path.read_text()))


def analyze_for_prompts(task: Task, device: str) -> PromptFacts:
    from kernelwright.analysis import analyze

    return PromptFacts.from_analysis(analyze(task, device=device))


def facts_file(task_id: str) -> str:
    """The file name of a task's facts in a facts folder (recordings, studies, reports)."""
    return task_id.replace("/", "__") + ".json"


def folder_provider(folder: Path, device: str = "cpu", record: bool = False):
    """Facts from `<folder>/<task id with / as __>.json`; with record=True, analyse and save the
    ones that are missing (used when recording transcripts and by studies)."""

    def provide(task: Task) -> PromptFacts:
        path = folder / facts_file(task.id)
        if path.is_file():
            return PromptFacts.load(path)
        if not record:
            raise FileNotFoundError(f"no recorded task facts at {path}")
        facts = analyze_for_prompts(task, device)
        facts.save(path)
        return facts

    return provide
