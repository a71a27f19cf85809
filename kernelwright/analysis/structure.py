"""What shape of problem a graph is, and which op chains could be fused after a library call.

Only *substantive* nodes count (role ``compute``): views, shape reads, no-ops and tensors computed
purely from constants (a causal mask built with ``torch.ones(t, t).triu(1)``) are not work a
kernel has to do on the inputs, so they neither make a graph a "network" nor break a chain.

Epilogue chains grow forward from each library-heavy node L: a later node joins when it is
fusible (elementwise, reduction, normalization, or a view), reads at least one value from the
chain (or L), and every other value it reads does not itself depend on L except through the chain
(otherwise it would need another library call in the middle). Fan-out inside the chain is allowed,
so RMSNorm written out (``x * rsqrt(mean(x**2))``) stays one chain. Chains of different anchors
may share nodes (``w_a * expert_a(x) + w_b * expert_b(x)``): each is a candidate, not a partition.

``difficulty`` ranks how hard a correct *and faster* kernel is; only the order is meant. A single
elementwise op is 0.1, a reduction 0.25, a norm 0.3, a single GEMM/conv 0.5 (beating cuBLAS/cuDNN
is the hard part); fusible chains 0.2 + 0.03 per op; a library op with an epilogue 0.45 + 0.04 per
epilogue op, + 0.1 when the epilogue reduces (a tile needs whole rows); networks 0.65 + 0.05 per
library op. fp16/bf16 and graphs fx could not trace add 0.05 each.
"""

from __future__ import annotations

from collections import Counter

from kernelwright.analysis.ops import FUSIBLE_KINDS
from kernelwright.analysis.types import (
    ChainInput,
    Classification,
    EpilogueChain,
    GraphShape,
    OpGraph,
    OpKind,
    OpNode,
    Role,
    TensorMeta,
)

LONG_GRAPH = 24  # more substantive nodes than this is a network whatever their kinds
MAX_PROLOGUE = 2  # fusible ops allowed before the single library op in a library_epilogue
_PER_CHANNEL_PARAM_OPS = frozenset({"batch_norm", "group_norm", "instance_norm"})
_SINGLE_OP_DIFFICULTY = {OpKind.ELEMENTWISE: 0.1, OpKind.DATA_MOVEMENT: 0.15, OpKind.REDUCTION: 0.25,
                         OpKind.NORMALIZATION: 0.3, OpKind.LIBRARY_HEAVY: 0.5, OpKind.OTHER: 0.4}


class _Index:
    """Node positions, producers and ancestor bitmasks (graphs are small: ints as bitsets)."""

    def __init__(self, graph: OpGraph):
        self.nodes = graph.nodes
        self.pos = {n.name: i for i, n in enumerate(graph.nodes)}
        self.preds: list[set[int]] = []
        self.anc: list[int] = []
        for n in graph.nodes:
            preds = {self.pos[i.name] for i in n.inputs if i.name in self.pos and self.pos[i.name] < self.pos[n.name]}
            mask = 0
            for p in preds:
                mask |= self.anc[p] | (1 << p)
            self.preds.append(preds)
            self.anc.append(mask)
        self.users: list[set[int]] = [set() for _ in graph.nodes]
        for j, preds in enumerate(self.preds):
            for p in preds:
                self.users[p].add(j)
        self.outputs = {self.pos[o] for o in graph.outputs if o in self.pos}

    def depends_on(self, j: int, i: int) -> bool:
        return bool(self.anc[j] >> i & 1)


def epilogue_chains(graph: OpGraph) -> list[EpilogueChain]:
    """One chain per library-heavy node that is followed by at least one fusible op."""
    idx = _Index(graph)
    chains = []
    for i, anchor in enumerate(graph.nodes):
        if anchor.substantive and anchor.kind == OpKind.LIBRARY_HEAVY:
            chain = _grow(idx, i)
            if chain is not None:
                chains.append(chain)
    return chains


def _grow(idx: _Index, a: int) -> EpilogueChain | None:
    anchor = idx.nodes[a]
    region: list[int] = []
    inside = {a}
    for j in range(a + 1, len(idx.nodes)):
        n = idx.nodes[j]
        fusible = (n.role == Role.COMPUTE and n.kind in FUSIBLE_KINDS) or n.role in (Role.VIEW, Role.NOOP)
        if not fusible or not (idx.preds[j] & inside):
            continue
        if all(p in inside or not idx.depends_on(p, a) for p in idx.preds[j]):
            region.append(j)
            inside.add(j)
    # Views that feed only the outside belong to whoever reads them (repeat: a view of a view).
    dangling = True
    while dangling:
        dangling = [j for j in region if idx.nodes[j].role != Role.COMPUTE and not (idx.users[j] & inside)
                    and j not in idx.outputs]
        for j in dangling:
            region.remove(j)
            inside.discard(j)
    compute = [j for j in region if idx.nodes[j].role == Role.COMPUTE]
    if not compute or anchor.output is None:
        return None
    inputs = [ci for j in region for ci in _chain_inputs(idx, j, inside)]
    leaving = [j for j in region if j in idx.outputs or (idx.users[j] - inside)]
    last = idx.nodes[leaving[-1] if leaving else region[-1]]
    return EpilogueChain(
        anchor=anchor.name, anchor_target=anchor.target, main=anchor.output,
        nodes=[idx.nodes[j].name for j in region], targets=[idx.nodes[j].target for j in compute],
        inputs=inputs, outputs=[idx.nodes[j].name for j in leaving], output=last.output,
        anchor_leaves=a in idx.outputs or bool(idx.users[a] - inside),
        has_reduction=any(idx.nodes[j].kind in (OpKind.REDUCTION, OpKind.NORMALIZATION) for j in compute))


def _chain_inputs(idx: _Index, j: int, inside: set[int]) -> list[ChainInput]:
    n = idx.nodes[j]
    # Against the shape every operand broadcasts to: the node's output for elementwise ops and
    # norms, else the chain operand itself (a reduction's input).
    operand = next((i.shape for i in n.inputs if i.name in idx.pos and idx.pos[i.name] in inside and i.shape),
                   None)
    against = n.output.shape if n.output is not None and n.kind != OpKind.REDUCTION else operand
    if against is None or n.role != Role.COMPUTE:
        return []
    found = []
    for i in n.inputs:
        if (i.name in idx.pos and idx.pos[i.name] in inside) or i.shape is None:
            continue
        per_channel = n.target in _PER_CHANNEL_PARAM_OPS and len(i.shape) == 1 and len(against) >= 2
        pattern, dims = broadcast_pattern(i.shape, against, channel_aligned=per_channel)
        found.append(ChainInput(name=i.name, source=i.source, shape=i.shape, dtype=i.dtype or "", consumer=n.name,
                                against=list(against), broadcast=pattern, broadcast_dims=dims))
    return found


def broadcast_pattern(shape: list[int], against: list[int], channel_aligned: bool = False) -> tuple[str, list[int]]:
    """How ``shape`` broadcasts to ``against``: a label and the dims of ``against`` it is repeated along."""
    rank = len(against)
    if channel_aligned:  # norm-layer parameters are (C,) and apply along dim 1
        padded = [1] * rank
        padded[1] = shape[0]
    elif len(shape) > rank:
        return "partial", []
    else:
        padded = [1] * (rank - len(shape)) + list(shape)
    dims = [d for d in range(rank) if padded[d] == 1 and against[d] != 1]
    kept = [d for d in range(rank) if padded[d] != 1]
    if all(padded[d] == 1 for d in range(rank)):
        return "scalar", dims
    if padded == list(against):
        return "same", []
    if kept == [rank - 1]:
        return "row_vector", dims
    if kept == [1] and rank >= 3:
        return "per_channel", dims
    if dims == [rank - 1]:
        return "per_row", dims
    if dims and dims == list(range(len(dims))):
        return "leading", dims  # repeated over the leading (batch) dims: a mask, a position table
    return "partial", dims


def classify(graph: OpGraph) -> Classification:
    """single_op | library_epilogue | fusible_chain | network, with a difficulty and a one-line reason."""
    subst = graph.substantive()
    lib = [n for n in subst if n.kind == OpKind.LIBRARY_HEAVY]
    kinds = dict(Counter(n.kind.value for n in subst))
    base = {"library_ops": [n.name for n in lib], "kinds": kinds}
    if len(subst) <= 1:
        only = subst[0] if subst else None
        reason = f"one {only.target} ({only.kind.value}) op" if only else "no compute op (views only)"
        score = _SINGLE_OP_DIFFICULTY[only.kind] if only else 0.0
        if only is not None and only.target == "embedding":
            score = 0.2  # a gather: memory-bound and simple, unlike the other library ops
        return Classification(shape=GraphShape.SINGLE_OP, difficulty=_adjust(score, graph), reason=reason, **base)
    if not lib:
        fusible = all(n.kind in FUSIBLE_KINDS or n.kind == OpKind.DATA_MOVEMENT for n in subst)
        ops = ", ".join(n.target for n in subst[:8]) + (", ..." if len(subst) > 8 else "")
        if fusible and len(subst) <= LONG_GRAPH:
            score = 0.2 + 0.03 * len(subst) + (0.1 if _has_reduction(subst) else 0.0)
            return Classification(shape=GraphShape.FUSIBLE_CHAIN, difficulty=_adjust(score, graph),
                                  reason=f"{len(subst)} fusible ops, no library op: {ops}", **base)
        return _network(graph, subst, lib, base, f"{len(subst)} ops without a library op: {ops}")
    if len(lib) == 1:
        idx = _Index(graph)
        a = idx.pos[lib[0].name]
        post = [n for n in subst if idx.depends_on(idx.pos[n.name], a)]
        pre = [n for n in subst if n is not lib[0] and not idx.depends_on(idx.pos[n.name], a)]
        chain = _grow(idx, a)
        in_chain = set(chain.nodes) if chain else set()
        if (all(n.name in in_chain for n in post) and len(pre) <= MAX_PROLOGUE
                and all(n.kind in FUSIBLE_KINDS for n in pre) and len(subst) <= LONG_GRAPH):
            epi = [n for n in post]
            targets = [n.target for n in epi]
            parts = [f"a {len(epi)}-op epilogue: {', '.join(targets)}"] if epi else []
            if pre:
                parts.append(f"a {len(pre)}-op prologue: {', '.join(n.target for n in pre)}")
            reason = f"{lib[0].target} with {' and '.join(parts)}"
            score = 0.45 + 0.04 * len(epi) + 0.05 * len(pre) + (0.1 if chain and chain.has_reduction else 0.0)
            return Classification(shape=GraphShape.LIBRARY_EPILOGUE, difficulty=_adjust(score, graph), reason=reason,
                                  epilogue=[n.name for n in epi], epilogue_targets=targets,
                                  prologue=[n.name for n in pre], **base)
    names = Counter(n.target for n in lib)
    listed = ", ".join(f"{t} x{c}" if c > 1 else t for t, c in names.items())
    plural = "op" if len(lib) == 1 else "ops"
    return _network(graph, subst, lib, base, f"{len(lib)} library {plural} ({listed}) among {len(subst)} compute ops")


def _network(graph: OpGraph, subst: list[OpNode], lib: list[OpNode], base: dict, reason: str) -> Classification:
    score = 0.65 + 0.05 * len(lib) + 0.005 * len(subst)
    return Classification(shape=GraphShape.NETWORK, difficulty=_adjust(score, graph), reason=reason, **base)


def _has_reduction(nodes: list[OpNode]) -> bool:
    return any(n.kind in (OpKind.REDUCTION, OpKind.NORMALIZATION) for n in nodes)


def _adjust(score: float, graph: OpGraph) -> float:
    """Low precision and untraceable control flow both make a correct, fast kernel harder."""
    metas: list[TensorMeta] = [t.meta for t in graph.inputs] + list(graph.output_meta)
    if any(m.dtype in ("float16", "bfloat16") for m in metas):
        score += 0.05
    if graph.method == "dispatch":
        score += 0.05
    return round(min(1.0, max(0.0, score)), 2)
