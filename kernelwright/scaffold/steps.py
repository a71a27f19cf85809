"""A region written one line at a time: each of the segment's torch lines its own small task,
checked alone, then the lines' answers composed into the region.

The embedded model's wrong regions are mostly one wrong line in several (hardswish without its
`v *`, a bias added twice, softplus as `exp`: docs/results/view-yield.md), and sampling the whole
region again rarely fixes that line without breaking another. Here each line is a one-line
segment with its own probes: its inputs are the original inputs and the values the earlier lines
computed on the probes (probes.py keeps each op's value, `Probes.steps`), its expected values
what PyTorch computed for that line. A line's answer is pre-checked exactly as a region is
(precheck/), against that line alone, so a search can keep the lines that are right and resample
only the wrong one.

A line is one of two tasks. An elementwise op (add, rsqrt, silu, a cast) is an elementwise task,
in an elementwise segment or in a row segment alike: in a row its inputs are whole rows or one
value a row, and its task sees one element of each (the probes: every column of every probe row).
A reduction or a normalization in a row segment (mean, amax, softmax, a LayerNorm) is a row task:
its input rows as the row kernel's inputs, its output one value a row or a whole row.

The composition is the system's, not the model's (`compose`): each line's answer runs in a scope
of its own, where its inputs go by the names its task gave them and `y` starts as its x, and its
result is kept in the line's local (v1, v2, ...); the region ends by giving `y` the last one. In a
C++/CUDA row kernel a whole-row value is a function of the column (a lambda, like the kernel's own
`x(j)`), and a row task with a whole-row result writes the output row, which later lines read
back. The composed region is pre-checked whole and judged by the evaluator like any other.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple, Optional

from pydantic import BaseModel

from kernelwright.analysis import ops
from kernelwright.scaffold.semantics import notes_for
from kernelwright.scaffold.types import KernelArg, Probes, ScaffoldPlan, Segment, SegmentKind, StepPart


class Step(BaseModel):
    """One torch line of a segment as a task of its own."""

    index: int  # 0-based, in the order of the segment's lines
    local: str  # the name the composed region gives its value: v1, v2, ...
    line: str  # the torch line as its own task shows it: `y = <its expression>`, in the task's names
    # (name in the line's task, name in the composed region) of each input, the line's first input
    # first: it is the task's `x` (the 1.5B model writes `x` for a line's input whatever it is called:
    # given `v3 = hardswish(v2)` with the module's x in scope, 20 of 22 distinct answers over 4 turns
    # were written on x, none passed);
    # the module's x, where the line reads it too, is the task's `x_in`
    inputs: list[tuple[str, str]] = []
    row_task: bool = False  # a reduction or normalization over the row (a row segment of its own)
    per_row: bool = False  # its value is one per row (a reduction's), not one per element
    plan: ScaffoldPlan  # the one-line segment, with its probes: what its answers are written and checked against

    @property
    def bindings(self) -> list[tuple[str, str]]:
        """The inputs whose name in the line's task is not their name in the region."""
        return [(i, o) for i, o in self.inputs if i != o]


def fill(expr: str, names: dict[str, str]) -> str:
    """A composite op's part (decompose.py) with its placeholders ({a}, {p1}, {w}, ...) replaced by ``names``."""
    for key, name in names.items():
        expr = expr.replace("{" + key + "}", name)
    return expr


def _target_name(line: str) -> Optional[str]:
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign):
        return None
    targets = tree.body[0].targets
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None


def _rename(line: str, names: dict[str, str]) -> str:
    """``line`` with each name of ``names`` replaced, all at once, where it is a variable: not an
    attribute (`torch.tanh`), not inside a string (`approximate = 'tanh'`), not part of a longer name."""
    if not names:
        return line
    pattern = r"(?<![\w.'\"])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?![\w'\"])"
    return re.sub(pattern, lambda m: names[m.group(1)], line)


def line_target(step: Step, target: str) -> str:
    """The language a line's task is written and checked in. CUDA's row tasks are C++ loops over
    the row (the C++ row kernel's task), run by one thread of the block in the composition: all
    32 of the 1.5B model's answers for row_sum failed at the block's reduction (the strided loop
    without block_sum, block_sum on the row's accessor or on nothing; on the H200), where its
    C++ row loops pass (22 of 27 C++ cells correct in the same study)."""
    return "cpp" if target == "cuda" and step.row_task else target


def worth_it(steps: list[Step], target: str) -> bool:
    """Whether writing the region a line at a time changes the model's task: several lines, or a
    CUDA row task (a C++ loop instead of the block's reductions)."""
    return len(steps) >= 2 or any(line_target(st, target) != target for st in steps)


def split(plan: ScaffoldPlan, parts: bool = True) -> list[Step]:
    """The segment's lines as steps; [] where the region is not written a line at a time: an
    elementwise region of one line, a line whose value the probes could not keep, or a row a
    composition cannot hold (below). ``parts``: a composite op's line is the lines of its
    definition where the planning child split it (decompose.py); else one line."""
    # a GEMM's region is its epilogue, split as an elementwise segment's on the epilogue's probes and
    # composed into the GEMM skeleton (on the H200, whole-region samples found no correct
    # Linear epilogue in 11 minutes, L2/01 23 wrong of 32)
    seg, probes = (plan.segment.epilogue() if plan.segment is not None else None), plan.probes
    if seg is None or probes is None or seg.kind not in (SegmentKind.ELEMENTWISE, SegmentKind.ROW):
        return []
    row = seg.kind == SegmentKind.ROW
    body, last = seg.torch_lines[:-1], seg.torch_lines[-1] if seg.torch_lines else ""
    # a lone GEMM's epilogue has no line (`y = x`): nothing to write a line at a time (a
    # lone matmul's search cell otherwise fails on names[-1] before its first sample)
    if not body or len(body) != len(probes.steps) or len(seg.targets) != len(body) \
            or not all(probes.steps) or not last.startswith("y = "):
        return []
    names = [_target_name(line) for line in body]
    if any(n is None for n in names) or last != f"y = {names[-1]}":
        return []
    per_row = list(probes.step_rows) if row else [False] * len(body)
    if len(per_row) != len(body):
        return []
    lines = _lines(seg, probes, body, names, per_row, parts)  # type: ignore[arg-type]
    if len(lines) < (1 if row else 2) or (row and lines[-1].per_row != seg.per_row_output):
        return []
    taken = {a.name for a in seg.args} | set(names)  # type: ignore[arg-type]
    locals_ = [_fresh(f"v{k + 1}", taken) for k in range(len(lines))]
    # the segment and probes as these lines see them: a composite op's parts are lines of their own
    seg = seg.model_copy(update={"targets": [ln.target for ln in lines], "nodes": [ln.node for ln in lines]})
    probes = probes.model_copy(update={"steps": [ln.values for ln in lines], "step_dtypes": [ln.dtype for ln in lines],
                                       "step_rows": [ln.per_row for ln in lines]})
    flags = [ln.per_row for ln in lines]
    steps: list[Step] = []
    for k, ln in enumerate(lines):
        outer = _rename(ln.expr, {lines[j].key: locals_[j] for j in range(k)})
        step = _step(plan, seg, probes, k, outer, locals_, flags, taken)
        if step is None:
            return []
        steps.append(step)
    return steps if _composable(steps, seg) else []


class _Line(BaseModel):
    """A line to write: one of the segment's torch lines, or a part of one (decompose.py)."""

    key: str  # the name later lines read it by: the torch line's own, or a part's placeholder
    expr: str  # its value, in the segment's names and the placeholders of earlier parts
    target: str
    node: str
    values: str
    dtype: str
    per_row: bool


def _lines(seg: Segment, probes: Probes, body: list[str], names: list[str], per_row: list[bool],
           split_parts: bool) -> list[_Line]:
    """The segment's lines, a composite op's line replaced by its parts where the planning child
    split it and its input and module arguments can be named here."""
    out: list[_Line] = []
    for k, line in enumerate(body):
        expr = line.split("=", 1)[1].strip()
        parts = probes.step_parts[k] if split_parts and k < len(probes.step_parts) else []
        named = _part_names(seg, expr, parts) if parts else None
        if named is None:
            dtype = probes.step_dtypes[k] if k < len(probes.step_dtypes) and probes.step_dtypes[k] else "float32"
            out.append(_Line(key=names[k], expr=expr, target=seg.targets[k], node=seg.nodes[k], values=probes.steps[k],
                             dtype=dtype, per_row=per_row[k]))
            continue
        keys = [f"kw_part_{k}_{i + 1}" for i in range(len(parts) - 1)] + [names[k]]
        for i, part in enumerate(parts):
            text = fill(part.expr, {**named, **{f"p{j + 1}": keys[j] for j in range(i)}})
            row = part.per_row and seg.kind == SegmentKind.ROW
            out.append(_Line(key=keys[i], expr=text, target=part.target, node=seg.nodes[k], values=part.values,
                             dtype=part.dtype, per_row=row))
    return out


def _part_names(seg: Segment, expr: str, parts: list[StepPart]) -> Optional[dict[str, str]]:
    """The names a composite op's parts read: {a}, its input, and a module's {w}eight and {b}ias."""
    try:
        call = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(call, ast.Call):
        return None
    root = call.func
    while isinstance(root, ast.Attribute):
        root = root.value
    # `v.mean(...)`: a method of its input; `torch.x(v)`, `F.x(v)`, `self.norm(v)`: a call on it
    method = isinstance(call.func, ast.Attribute) and isinstance(root, ast.Name) and \
        root.id not in ("torch", "F", "self")
    if method:
        arg = ast.unparse(call.func.value)  # type: ignore[attr-defined]
    elif call.args:
        arg = ast.unparse(call.args[0])
    else:
        return None
    if not re.fullmatch(r"[A-Za-z_]\w*", arg):
        return None
    named = {"a": arg}
    if any("{w}" in p.expr or "{b}" in p.expr for p in parts):
        module = ast.unparse(call.func)
        note = next((n for n in seg.module_notes if n.startswith(f"{module} = ")), "")
        held = dict(re.findall(r"(\w+) is `(\w+)`", note))
        if "weight" not in held or "bias" not in held:
            return None
        named |= {"w": held["weight"], "b": held["bias"]}
    return named


def _composable(steps: list[Step], seg: Segment) -> bool:
    """Whether the composition can hold these lines. In a row: a row task reads whole rows (not a
    value a row); a row task with a whole-row result writes the output row, so the segment's output
    must be a whole row, and no later row task may read a value that came from it (it would read
    the row while writing it)."""
    if seg.kind != SegmentKind.ROW:
        return True  # no row tasks: every line is elementwise
    by_local = {st.local: st for st in steps}
    from_out: set[str] = set()  # locals whose value is read back from the output row
    for st in steps:
        reads = [by_local[o] for _, o in st.inputs if o in by_local]
        if st.row_task and any(r.per_row for r in reads):
            return False
        if st.row_task and any(r.local in from_out for r in reads):
            return False
        if st.row_task and not st.per_row:
            if seg.per_row_output:
                return False
            from_out.add(st.local)
        elif any(r.local in from_out for r in reads):
            from_out.add(st.local)
    return True


def _fresh(name: str, taken: set[str]) -> str:
    base, j = name, 0
    while name in taken:
        j += 1
        name = f"{base}_{j}"
    taken.add(name)
    return name


def _reads(expr: str, names: list[str]) -> list[str]:
    """The names of ``names`` that ``expr`` reads, in the order they first appear."""
    found = []
    for m in re.finditer(r"(?<![\w.'\"])([A-Za-z_]\w*)(?![\w'\"])", expr):
        if m.group(1) in names and m.group(1) not in found:
            found.append(m.group(1))
    return found


def _module_args(seg: Segment, expr: str) -> list[str]:
    """The inputs a module the line calls holds (`self.norm(x)`: the norm's weight and bias)."""
    held: list[str] = []
    for note in seg.module_notes:
        if note.split(" = ", 1)[0] in expr:
            held += re.findall(r"is `(\w+)`", note.split("; its ", 1)[1]) if "; its " in note else []
    return held


def _step(plan: ScaffoldPlan, seg: Segment, probes: Probes, k: int, expr: str, locals_: list[str],
          per_row: list[bool], taken: set[str]) -> Optional[Step]:
    """Line k (``expr``, in the composed region's names) as a one-line segment."""
    def dtype(j: int) -> str:
        return probes.step_dtypes[j] or "float32"

    originals = {a.name: a for a in seg.args}
    row = seg.kind == SegmentKind.ROW
    row_task = row and ops.kind_of(seg.targets[k]) != ops.OpKind.ELEMENTWISE
    module_held = _module_args(seg, expr)
    reads = _reads(expr, list(originals) + locals_[:k])
    reads += [a for a in module_held if a in originals and a not in reads]
    first = reads[0] if reads else seg.main.name
    inner = {first: "x"}
    if seg.main.name in reads and first != seg.main.name:
        inner[seg.main.name] = _fresh("x_in", set(taken) | set(originals))
    order = [first] + [r for r in reads if r != first]
    args = []
    for outer in order:
        name = inner.get(outer, outer)
        if outer in originals:
            a = originals[outer]
            args.append(a.model_copy(update={"name": name, "main": name == "x"}))
        else:
            j = locals_.index(outer)
            what = "what the line before computed" if j == k - 1 else f"what line {j + 1} computed"
            role = "this line's input" if name == "x" else "an input of this line"
            each = ", one value per row" if per_row[j] and not row_task else ""
            args.append(KernelArg(name=name, origin=outer, shape=list(seg.out_shape), dtype=dtype(j), main=name == "x",
                                  describe=f"{role} ({what}{each}), {dtype(j)}"))
    if row_task and len(module_held) != sum(1 for a in module_held if a in order):
        return None
    line = f"y = {_rename(expr, inner)}"
    held_notes = [n for n in seg.module_notes if n.split(" = ", 1)[0] in expr]
    one = seg.model_copy(update={
        "kind": SegmentKind.ROW if row_task else SegmentKind.ELEMENTWISE,
        "nodes": [seg.nodes[k]], "targets": [seg.targets[k]], "args": args, "out_dtype": dtype(k),
        "torch_lines": [line], "op_notes": notes_for([seg.targets[k]], [line, *held_notes]),
        "per_row_output": per_row[k] if row_task else False, "module_notes": held_notes})
    step_probes = _probes(probes, row, row_task, k, order, inner, locals_, per_row)
    step_plan = plan.model_copy(update={"segment": one, "probes": step_probes, "gemm": None,
                                        "reason": f"line {k + 1} of {len(seg.targets)}: {line}"})
    return Step(index=k, local=locals_[k], line=line, plan=step_plan, row_task=row_task, per_row=per_row[k],
                inputs=[(inner.get(o, o), o) for o in order])


def _probes(probes: Probes, row: bool, row_task: bool, k: int, order: list[str], inner: dict[str, str],
            locals_: list[str], per_row: list[bool]) -> Probes:
    """Line k's probes. An elementwise line in a row sees every column of every probe row as an
    element, a value per row repeated across its row's columns; a row task sees the probe rows."""
    def values(outer: str) -> str:
        if outer in locals_:
            j = locals_.index(outer)
            return _spread(probes.steps[j], probes.cols) if row and per_row[j] and not row_task else probes.steps[j]
        return probes.inputs[outer]

    inputs = {inner.get(o, o): values(o) for o in order}
    expected = probes.steps[k]
    if not row:
        return Probes(count=probes.count, cols=1, inputs=inputs, expected=expected, labels=probes.labels)
    if row_task:
        return Probes(count=probes.count, cols=probes.cols, inputs=inputs, expected=expected, labels=probes.labels)
    if per_row[k]:
        expected = _spread(expected, probes.cols)
    cols = _columns(probes.count, probes.cols)
    if len(cols) < probes.cols:
        inputs = {name: _pick(text, probes.cols, cols) for name, text in inputs.items()}
        expected = _pick(expected, probes.cols, cols)
    labels = [f"{label}, column {j}" for label in probes.labels for j in cols]
    return Probes(count=probes.count * len(cols), cols=1, inputs=inputs, expected=expected, labels=labels)


# An elementwise line of a row is checked on at most this many of the probe rows' elements: every
# column of a long row is no more evidence about one element's math, and 6 rows of 50304 columns ran
# past the pre-check's time limit on the H200 host (log_softmax's `y = x - v1`, right,
# a runtime error in all 5 distinct answers).
LINE_ELEMENTS = 4096


def _columns(rows: int, cols: int) -> list[int]:
    """The probe columns an elementwise line of a row is checked on: all, or evenly spaced ones
    from the first to the last."""
    keep = max(2, LINE_ELEMENTS // max(1, rows))
    if cols <= keep:
        return list(range(cols))
    return sorted({round(i * (cols - 1) / (keep - 1)) for i in range(keep)})


def _pick(text: str, cols: int, chosen: list[int]) -> str:
    """Of count * cols values (row by row), the chosen columns of each row."""
    from kernelwright.scaffold.precheck.compare import decode, encode_floats

    values = decode(text)
    return encode_floats([values[r * cols + j] for r in range(len(values) // cols) for j in chosen])


def _spread(text: str, cols: int) -> str:
    """One value per row, repeated across the row's columns."""
    from kernelwright.scaffold.precheck.compare import decode, encode_floats

    return encode_floats([v for v in decode(text) for _ in range(cols)])


# ---- composition -----------------------------------------------------------------------------------

def compose(steps: list[Step], regions: list[str], segment: Segment, target: str, strided: bool = True) -> str:
    """The region of ``segment`` in ``target`` from each step's answer (its region, as the splicer
    left it), in order. ``strided``: a CUDA row task's loop is spread over the block's threads where
    its answer allows (`_strided`); else it runs on one thread."""
    if segment.kind == SegmentKind.ROW:
        if target == "triton":
            return _compose_row_triton(steps, regions)
        return _compose_row_c(steps, regions, target, segment.per_row_output, strided)
    out: list[str] = []
    if target == "triton":
        saved = any(i == "x" or o == "x" for st in steps for i, o in st.bindings)
        if saved:
            out.append("kw_x_in = x")
        for st, region in zip(steps, regions, strict=True):
            out += [f"{i} = {'kw_x_in' if o == 'x' and saved else o}" for i, o in st.bindings]
            out += ["y = x", *region.strip("\n").splitlines(), f"{st.local} = y"]
            if any(i == "x" for i, _ in st.bindings):
                out.append("x = kw_x_in")
        return "\n".join(out + [f"y = {steps[-1].local}"])
    for st, region in zip(steps, regions, strict=True):
        out += [f"float {st.local};", "{"]
        # through temporaries: `const float x = v2;` may not read the x it declares
        out += [f"    const float kw_in_{i} = {o};" for i, o in st.bindings]
        out += [f"    const float {i} = kw_in_{i};" for i, _ in st.bindings]
        out += ["    float y = x;", *_indent(region, "    "), f"    {st.local} = y;", "}"]
    return "\n".join(out + [f"y = {steps[-1].local};"])


def _indent(region: str, pad: str) -> list[str]:
    return [pad + ln if ln.strip() else "" for ln in region.strip("\n").splitlines()]


def _compose_row_triton(steps: list[Step], regions: list[str]) -> str:
    """Triton: a whole row is a block of lanes, a value per row a scalar; the lines run in sequence.
    A row task's inputs get 0.0 in the lanes beyond the row, as the row kernel's loads do (a line's
    value there is whatever its math gave 0.0)."""
    local = {st.local for st in steps}
    out = ["kw_x_in = x"]
    for st, region in zip(steps, regions, strict=True):
        for i, o in st.inputs:
            src = "kw_x_in" if o == "x" else o
            if st.row_task and o in local:
                src = f"tl.where(mask, {src}, 0.0)"
            if i != o or src != o:
                out.append(f"{i} = {src}")
        out += ["y = x", *region.strip("\n").splitlines(), f"{st.local} = y", "x = kw_x_in"]
    return "\n".join(out + [f"y = {steps[-1].local}"])


def _compose_row_c(steps: list[Step], regions: list[str], target: str, per_row_output: bool,
                   strided: bool = True) -> str:
    """C++/CUDA: a whole-row value is a lambda of the column j (the module's inputs already are:
    `x(j)`), a value per row a float. A row task's inputs are bound as such lambdas; its whole-row
    result is written to the output row (`y`) and read back from it. In CUDA every thread of the
    block runs the lines, except a row task (thread 0, `_cuda_row_task`); the final store is the
    block-strided loop."""
    by_local = {st.local: st for st in steps}
    cuda = target == "cuda"
    stored = set() if cuda else _to_store(steps, regions)
    loop = "for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)" if cuda else "for (int64_t j = 0; j < cols; ++j)"
    # the output row in the output's own type (a bf16 row is `at::BFloat16*`); read back as float
    out: list[str] = [] if per_row_output else ["auto* const kw_out = y;"]

    def element(o: str) -> str:  # the input's value at column j
        if o in by_local:
            return o if by_local[o].per_row else f"kw_{o}(j)"
        return f"{o}(j)"

    for st, region in zip(steps, regions, strict=True):
        if st.row_task and cuda:
            out += _cuda_row_task(st, region, by_local, strided)
            continue
        if st.row_task:
            head = [f"    auto kw_in_{i} = {('kw_' + o) if o in by_local else o};" for i, o in st.inputs]
            head += [f"    auto {i} = kw_in_{i};" for i, _ in st.inputs]
            region = _wide(region)
            if st.per_row:
                out += [f"float {st.local};", "{", *head, "    double y = 0.0;", *_indent(region, "    "),
                        f"    {st.local} = y;", "}"]
            else:
                out += ["{", *head, "    auto* const y = kw_out;", *_indent(region, "    "), "}"]
                out.append(f"auto kw_{st.local} = [&](int64_t j) -> float {{ return kw_out[j]; }};")
            continue
        every = all(o in by_local and by_local[o].per_row for _, o in st.inputs)  # a value per row in, and out
        bind = [f"const float kw_in_{i} = {element(o)};" for i, o in st.inputs]
        bind += [f"const float {i} = kw_in_{i};" for i, _ in st.inputs]
        if st.per_row and every:
            out += [f"float {st.local};", "{", *["    " + b for b in bind], "    float y = x;",
                    *_indent(region, "    "), f"    {st.local} = y;", "}"]
        else:
            name = f"kw_c_{st.local}" if st.local in stored else f"kw_{st.local}"
            out += [f"auto {name} = [&](int64_t j) -> float {{", *["    " + b for b in bind],
                    "    float y = x;", *_indent(region, "    "), "    return y;", "};"]
            if st.local in stored:
                out += _stored_row(st.local)
    last = steps[-1]
    if per_row_output:
        out.append(f"y = {last.local};")
    else:
        out.append(f"{loop} kw_out[j] = kw_{last.local}(j);")
    return "\n".join(out)


def _to_store(steps: list[Step], regions: list[str]) -> set[str]:
    """The whole-row lines a C++ row region stores in a row of its own: those the lines after them
    would otherwise compute more than once a column. A whole-row line is a lambda of j, computed
    again at every call: a softmax composed a line at a time computed its exp in the sum's pass and
    again in the division's (64 x 1000 fp32, 2 cores: 0.62-0.65x eager; its exp stored, 0.81-0.84x). Counted
    from the last line back: a line read by a later line's lambda is computed as often as that
    lambda is (once where that one is stored), read by a row task as often as the task's answer
    names its input, and by the final store once. Only a line that calls a math function, or reads
    one that does, is worth its row: recomputing arithmetic is cheaper than a store and the loads
    (log_softmax's `x - max` stored, 0.99x -> 0.87-0.92x eager; LayerNorm's `x - mean`, 0.60x ->
    0.57x)."""
    costly: set[str] = set()
    for st, region in zip(steps, regions, strict=True):
        if _COSTLY.search(region) or any(o in costly for _, o in st.inputs):
            costly.add(st.local)
    uses = {st.local: 0 for st in steps}
    uses[steps[-1].local] = 1
    stored: set[str] = set()
    for st, region in reversed(list(zip(steps, regions, strict=True))):
        if not st.per_row and not st.row_task and uses[st.local] > 1 and st.local in costly:
            stored.add(st.local)
        each = 1 if st.local in stored or st.per_row else uses[st.local]
        for i, o in st.inputs:
            if o in uses:
                reads = max(1, len(re.findall(rf"\b{re.escape(i)}\s*\(", region))) if st.row_task else 1
                uses[o] += reads * (1 if st.row_task else each)
    return stored


# a call of a math function of libm (float or double): the work worth storing a row to do once
_COSTLY = re.compile(r"\b(?:exp|exp2|expm1|log|log2|log10|log1p|pow|tanh|sinh|cosh|erf|erfc|sin|cos|tan|asin|acos|atan|"
                     r"atan2|asinh|acosh|atanh|cbrt|hypot)f?\s*\(")


def _stored_row(local: str) -> list[str]:
    """A whole-row line's values computed once into a row (a buffer each thread keeps and reuses from
    row to row), and its name bound to a read of that row."""
    return [f"static thread_local std::vector<float> kw_row_{local};",
            f"if ((int64_t)kw_row_{local}.size() < cols) kw_row_{local}.resize(cols);",
            f"float* const kw_m_{local} = kw_row_{local}.data();",
            f"for (int64_t j = 0; j < cols; ++j) kw_m_{local}[j] = kw_c_{local}(j);",
            f"auto kw_{local} = [&](int64_t j) -> float {{ return kw_m_{local}[j]; }};"]


def _wide(region: str) -> str:
    """A row task's answer with its float values in double: it is one loop over the row, and a float
    sum of 16384 values drifts by ~1e-3 (on the H200, row_sum's right loop was `wrong_output` on
    0.4% of rows, those whose sum is near 0, beyond atol 1e-4 of PyTorch's tree sum). Pointers stay."""
    return re.sub(r"\bfloat\b(?!\s*\*)", "double", region)


# A row task's loop over the row, as its prompt shows it (the C++ row kernel's), and the reductions
# whose loop can be spread over a block's threads: the combiner of the threads' values (skeleton's
# CUDA_HELPERS) and the start values that are its identity (each thread starts its share from one).
_ROW_LOOP = re.compile(r"for\s*\(\s*(?:int64_t|int|long|size_t|auto)\s+j\s*=\s*0\s*;\s*j\s*<\s*cols\s*;"
                       r"\s*(?:\+\+\s*j|j\s*\+\+|j\s*\+=\s*1)\s*\)")
class _Combiner(NamedTuple):
    helper: str  # the block reduction that combines the threads' values
    start: str  # each thread's start value: the op's identity
    identity: str  # start values an answer may write before its loop (a regex)


_COMBINERS = {
    "sum": _Combiner("block_sum", "0.0", r"0(?:\.0*)?f?|\.0+f?"),
    "amax": _Combiner("block_max", "-INFINITY",
                      r"-\s*INFINITY|-\s*(?:std::)?numeric_limits<float>::infinity\(\)|-\s*FLT_MAX|x\(0\)"),
}
_COMBINERS["max"] = _COMBINERS["amax"]
_SERIAL = re.compile(r"\b(?:for|while|do|break|continue|return|goto)\b")


def _loop_body(rest: str) -> tuple[str, str]:
    """(the body of the loop whose header ends just before `rest`, what follows it)."""
    rest = rest.lstrip()
    if not rest.startswith("{"):
        body, _, tail = rest.partition(";")
        return body + ";", tail
    depth = 0
    for end, ch in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return rest[: end + 1], rest[end + 1:]
    return rest, ""


def _strided(region: str, op: str) -> Optional[str]:
    """A row task's answer with its loop over the row strided over the block's threads, where the
    answer is a reduction the threads can share: before the loop only start values that are the
    op's identity, one loop with no other loop or jump in it, after it at most `y = <one of
    those>;`. None otherwise (the answer then runs on thread 0). A strided answer is only a
    candidate: the composed region is pre-checked (the host shim runs a block's threads), and
    composed on one thread where it fails (strategies/search/steps.py, _checked)."""
    if op not in _COMBINERS:
        return None
    ident = _COMBINERS[op].identity
    text = "\n".join(ln for ln in region.strip().splitlines() if not ln.strip().startswith("#"))
    loops = list(_ROW_LOOP.finditer(text))
    if len(loops) != 1:
        return None
    loop = loops[0]
    starts = set()
    for stmt in filter(None, (x.strip() for x in text[: loop.start()].split(";"))):
        m = re.fullmatch(rf"(?:(?:float|double|auto)\s+)?(\w+)\s*=\s*(?:{ident})", stmt)
        if m is None:
            return None
        starts.add(m.group(1))
    body, tail = _loop_body(text[loop.end():])
    tail = tail.strip()
    if body.count("{") != body.count("}") or _SERIAL.search(body):
        return None
    if tail and not any(re.fullmatch(rf"y\s*=\s*{re.escape(n)}\s*;", tail) for n in starts):
        return None
    return text[: loop.start()] + "for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)" + text[loop.end():]


# A reduction statement of a row loop's body, `acc` the value it accumulates: each form's combiner.
_REDUCTIONS = (
    ("sum", r"{a}\s*\+=\s*(?P<e>[^;]+);"),
    ("sum", r"{a}\s*=\s*{a}\s*\+\s*(?P<e>[^;]+);"),
    ("max", r"{a}\s*=\s*(?:std::)?(?:fmaxf?|max)\s*\(\s*{a}\s*,\s*(?P<e>[^;]+)\)\s*;"),
    ("max", r"{a}\s*=\s*(?:std::)?(?:fmaxf?|max)\s*\(\s*(?P<e>[^;]+?)\s*,\s*{a}\s*\)\s*;"),
)
_DECLARED = re.compile(r"\b(?:const\s+)?(?:double|float|auto|int|int64_t|long)\s+(\w+)\s*=")
_ASSIGNED = re.compile(r"(?<![\w\].])(\w+)\s*(?:\+=|-=|\*=|/=|=(?!=))")


def _reductions(body: str, before: str) -> Optional[list[tuple[str, str]]]:
    """The scalars a row loop's body accumulates and their combiners, where every value from outside
    the loop it assigns is one reduction (a sum from its identity, or a max from any start: a max of
    maxima is the max), each named nowhere else in the body; None where the loop cannot be shared."""
    local = set(_DECLARED.findall(body)) | {"j"}
    found = []
    for acc in dict.fromkeys(n for n in _ASSIGNED.findall(body) if n not in local):
        a = re.escape(acc)
        for op, form in _REDUCTIONS:
            m = re.search(r"(?<![\w.])" + form.format(a=a), body)
            if m is not None and not re.search(rf"\b{a}\b", m.group("e")):
                break
        else:
            return None
        if len(re.findall(rf"\b{a}\b", body)) != len(re.findall(rf"\b{a}\b", m.group(0))):
            return None  # read elsewhere in the loop: its running value matters (a prefix sum)
        if op == "sum":
            starts = re.findall(rf"(?<![\w.]){a}\s*(\+=|-=|\*=|/=|=(?!=))\s*([^;]+);", before)
            # the scalar `y` of a task with one value a row starts at 0.0 (its composition)
            if starts and not (starts[-1][0] == "=" and re.fullmatch(_COMBINERS["sum"].identity, starts[-1][1].strip())):
                return None
            if not starts and acc != "y":
                return None
        found.append((acc, op))
    return found


def _shared_loops(region: str) -> Optional[str]:
    """A row task's answer of one or more loops over the row, each loop strided over the block's
    threads, where every thread can run the same answer: each loop's outside values are reductions
    (`_reductions`), combined after the loop (block_sum, block_max) so every thread holds the row's
    value; the output row is only touched as `y[j]` inside the loops (a thread's j are the same in
    every loop, so what it reads back it wrote itself); no other loop or jump. The softmax, norms
    and variances the model writes as several loops on one thread ran 0.09-0.20x eager on the H200.
    None otherwise; a candidate only, pre-checked as `_strided`'s is."""
    text = "\n".join(re.sub(r"//.*", "", ln) for ln in region.strip().splitlines() if not ln.strip().startswith("#"))
    out, at = [], 0
    for loop in _ROW_LOOP.finditer(text):
        if loop.start() < at:
            return None  # a row loop inside another's body
        between = text[at: loop.start()]
        body, tail = _loop_body(text[loop.end():])
        found = _reductions(body, text[: loop.start()])
        if found is None or _SERIAL.search(between) or _SERIAL.search(body) or re.search(r"\by\s*\[", between):
            return None
        if len(re.findall(r"\by\s*\[", body)) != len(re.findall(r"\by\s*\[\s*j\s*\]", body)):
            return None
        out += [between, "for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) ", body]
        out += [f"\n{acc} = {_COMBINERS[op].helper}(static_cast<float>({acc}));" for acc, op in found]
        at = len(text) - len(tail)
    rest = text[at:]
    if not out or _SERIAL.search(rest) or re.search(r"\by\s*\[", rest):
        return None
    return "".join(out) + rest


def _cuda_row_task(st: Step, region: str, by_local: dict[str, Step], strided: bool = True) -> list[str]:
    """A CUDA row task, written as the C++ row kernel's loop over the row (line_target). A reduction
    whose answer allows it (`_strided`), or an answer of several loops that every thread can run
    (`_shared_loops`), runs on every thread of the block, each over its share of the row, and the
    threads' values are combined (block_sum, block_max): a row on one thread ran 0.08-0.47x eager on
    the H200. Otherwise it runs on thread 0 of the block, and its
    value reaches the other threads through shared memory (one value a row) or the output row (a
    whole row), after the block's barrier."""
    head = [f"auto kw_in_{i} = {('kw_' + o) if o in by_local else o};" for i, o in st.inputs]
    head += [f"auto {i} = kw_in_{i};" for i, _ in st.inputs]
    ops = st.plan.segment.targets
    spread = _strided(region, ops[0]) if strided and st.per_row and len(ops) == 1 else None
    if spread is not None:
        c = _COMBINERS[ops[0]]
        scope = [*head, f"double y = {c.start};", _wide(spread), f"{st.local} = {c.helper}(static_cast<float>(y));"]
        return [f"float {st.local};", "{", *_indent("\n".join(scope), "    "), "}"]
    spread = _shared_loops(region) if strided else None
    if spread is not None and st.per_row:  # every thread ends with the row's value
        scope = [*head, "double y = 0.0;", _wide(spread), f"{st.local} = static_cast<float>(y);"]
        return [f"float {st.local};", "{", *_indent("\n".join(scope), "    "), "}"]
    if spread is not None:  # every thread writes its share of the row
        scope = [*head, "auto* const y = kw_out;", _wide(spread)]
        return ["{", *_indent("\n".join(scope), "    "), "}",
                "__syncthreads();  // the row is written before any thread reads it back",
                f"auto kw_{st.local} = [&](int64_t j) -> float {{ return kw_out[j]; }};"]
    head = [f"        {h}" for h in head]
    body = _indent(_wide(region), "        ")
    if st.per_row:
        return [f"__shared__ float kw_sh_{st.local};", "if (threadIdx.x == 0) {", *head, "        double y = 0.0;",
                *body, f"        kw_sh_{st.local} = y;", "}", "__syncthreads();",
                f"const float {st.local} = kw_sh_{st.local};"]
    return ["if (threadIdx.x == 0) {", *head, "        auto* const y = kw_out;", *body, "}",
            "__syncthreads();  // the row is written before any thread reads it back",
            f"auto kw_{st.local} = [&](int64_t j) -> float {{ return kw_out[j]; }};"]
