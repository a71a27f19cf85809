"""``TaskAnalysis``: everything the analysis knows about one task, and its prompt-ready form.

``prompt_data()`` is the structured form templates should use; ``prompt_lines()`` is a compact
``key: value`` rendering of the same data for templates that just want lines. Neither holds advice:
what to do with "library_epilogue, epilogue gelu -> mul" is the template's business.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from pydantic import Field

from kernelwright.analysis.types import (
    Classification,
    EpilogueChain,
    GraphSummary,
    OpGraph,
    OpKind,
    ProfileReport,
    Roofline,
)
from kernelwright.records import Versioned

MAX_OPS_LISTED = 40


def summarize(graph: OpGraph) -> GraphSummary:
    subst = graph.substantive()
    kinds: dict[str, int] = {}
    for n in subst:
        kinds[n.kind.value] = kinds.get(n.kind.value, 0) + 1
    return GraphSummary(
        method=graph.method, fallback_reason=graph.fallback_reason, nodes=len(graph.nodes), substantive=len(subst),
        kinds=kinds, ops=[n.target for n in subst[:MAX_OPS_LISTED]],
        library_ops=[n.target for n in subst if n.kind == OpKind.LIBRARY_HEAVY],
        inputs=[t.meta for t in graph.inputs], outputs=list(graph.output_meta), params=len(graph.params),
        param_bytes=sum(p.meta.nbytes for p in graph.params))


class TaskAnalysis(Versioned):
    task_id: str
    device: str  # where the reference ran ("cpu", "cuda:0")
    device_name: str  # "cpu" or the GPU's name
    size: str  # KERNELWRIGHT_SIZE the task source saw
    torch_version: str
    graph: GraphSummary
    classification: Classification
    chains: list[EpilogueChain] = Field(default_factory=list)
    roofline: Roofline
    roofline_local: bool = True  # the roofline's device is the one the reference ran on
    profile: Optional[ProfileReport] = None
    profile_error: Optional[str] = None  # why there is no profile where one was asked for (one line)
    full_graph: Optional[OpGraph] = None  # only when asked for: large for unrolled loops
    seconds: float = 0.0  # wall time of the analysis in the child

    @property
    def shape(self) -> str:
        return self.classification.shape.value

    @property
    def difficulty(self) -> float:
        return self.classification.difficulty

    @property
    def reason(self) -> str:
        return self.classification.reason

    def fraction_of_floor(self) -> Optional[float]:
        """Roofline floor / measured forward, when both refer to the same device."""
        if self.profile is None or not self.roofline_local:
            return None
        return self.roofline.fraction_of_floor(self.profile.forward_ms)

    def prompt_data(self, top_k: int = 4, max_chains: int = 2) -> dict[str, Any]:
        c, r, p = self.classification, self.roofline, self.profile
        data: dict[str, Any] = {
            "task": self.task_id, "device": self.device, "size": self.size,
            "shape": c.shape.value, "difficulty": c.difficulty, "reason": c.reason,
            "library_ops": self.graph.library_ops, "epilogue": c.epilogue_targets, "ops": self.graph.ops[:16],
            "fusion": [{"after": ch.anchor_target, "anchor": ch.anchor, "ops": ch.targets,
                        "reduces": ch.has_reduction,
                        "reads": [{"name": i.name, "shape": i.shape, "dtype": i.dtype, "broadcast": i.broadcast}
                                  for i in ch.inputs]}
                       for ch in self.chains[:max_chains]],
            "roofline": {"device": r.device, "flops": r.flops, "bytes": r.bytes, "intensity": r.intensity,
                         "floor_ms": r.floor_ms, "bound": r.bound, "compute_dtype": r.compute_dtype},
        }
        if p is not None:
            data["top_ops"] = [{"op": o.op, "share": round(o.share, 3), "self_ms": o.self_ms} for o in p.top[:top_k]]
            data["forward_ms"] = p.forward_ms
            data["host_gap_share"] = round(p.host_gap_ms / p.window_ms, 3) if p.window_ms > 0 else None
            data["fraction_of_floor"] = self.fraction_of_floor()
        return data

    def prompt_lines(self, top_k: int = 4, max_chains: int = 2) -> list[str]:
        d = self.prompt_data(top_k, max_chains)
        lines = []
        if "top_ops" in d:
            ops = " | ".join(f"{o['op']} {o['share']:.0%}" for o in d["top_ops"])
            gap = f" | host gap {d['host_gap_share']:.0%} of forward" if d.get("host_gap_share") is not None else ""
            lines.append(f"self time ({d['device']}, {d['size']}): {ops}{gap}")
        head = f"shape: {d['shape']} | difficulty: {d['difficulty']:.2f}"
        if d["library_ops"]:
            counts = Counter(d["library_ops"])
            head += " | library: " + ", ".join(f"{op} x{c}" if c > 1 else op for op, c in counts.items())
        if d["epilogue"]:
            head += f" | epilogue: {' -> '.join(d['epilogue'])}"
        elif d["shape"] == "fusible_chain":
            head += f" | ops: {' -> '.join(d['ops'])}"
        lines.append(head)
        for f in d["fusion"]:
            reads = ", ".join(f"{i['name']} {i['dtype']}{i['shape']} {i['broadcast']}" for i in f["reads"])
            lines.append(f"fusible after {f['after']} ({f['anchor']}): {' -> '.join(f['ops'])}"
                         + (f" | reads: {reads}" if reads else ""))
        r = d["roofline"]
        lines.append(f"roofline ({r['device']}, {r['compute_dtype']}): {r['flops']:.3g} FLOP | {r['bytes']:.3g} B | "
                     f"{r['intensity']:.3g} FLOP/B | floor {r['floor_ms']:.3g} ms | {r['bound']}-bound")
        if d.get("forward_ms") is not None:
            frac = d.get("fraction_of_floor")
            lines.append(f"reference forward: {d['forward_ms']:.3g} ms"
                         + (f" | floor is {frac * 100:.2g}% of it" if frac is not None else ""))
        return lines

