"""A smaller problem from a KernelBench-format module: its dimension constants, scaled.

A task module sizes its problem with module-level integers (`batch_size = 4096`, `dim = 393216`,
`D, H, W = 24, 32, 32`, `input_shape = (32768,)`) that `get_inputs` and `get_init_inputs` read,
directly or through other constants. This module finds them through the AST (`find_slots`),
decides which may change (`classify`: batch, feature, sequence and spatial sizes) and which must
not (kernel sizes, strides, padding, dilation, group and head counts, small counts such as
`in_channels = 3` or an axis `dim = 1`: when unsure, keep), picks new values (by a factor, or by
halving the largest until the problem fits a bound: `choose`) and writes them into the source
(`rewrite`), so the reference, the candidate and the plan all run one problem.

Rules kept by the values chosen:
* one original value, one derived value: `in_channels = out_channels = 64` stay equal (a batch
  size apart: it changes on its own);
* a scaled size stays a multiple of every kept constant (except paddings, strides and dilations)
  that divided it: `num_groups = 8` still divides `out_channels`, `num_heads` the embedding;
* a floor: a batch keeps at least 2 rows, another size at least 16 (or its own value if smaller).

Measuring (bytes of inputs, outputs and parameters, and the forward's FLOPs) runs the module on
torch's meta device in a child process (sizing_child.py), so nothing is allocated and no task code
runs here. `sized_task` is the one entry: it resolves what `--size` asks for and returns the Task
with its source rewritten and its `Sizing` record, which also names a second shape (a different
batch and inner size) that the evaluator checks a correct candidate at.
"""

from __future__ import annotations

import ast
import logging
import math
import os
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Optional

from pydantic import BaseModel

from kernelwright.errors import BadInput
from kernelwright.records import SizedConstant, Sizing, Task

log = logging.getLogger(__name__)

SIZE_ENV_NAME = "KERNELWRIGHT_SIZE"
# The CPU's `small` for a module without a small size of its own: inputs, outputs and parameters
# within this (and within a sixteenth of the machine's memory), a forward within SMALL_FLOPS, so an
# evaluation (trials, 8 input sets, about 230 timed forwards, each copying its inputs in and its
# outputs out) takes seconds on two cores. On the 2-core machine under a load of 11, a sigmoid's
# evaluation timed for 6.6 s at 3 MB, 18 s at 12 MB and ran past 120 s at 48 MB.
SMALL_BYTES = 16 * 2**20
SMALL_FLOPS = 2e8
MIN_SCALABLE = 16  # a smaller constant is a count or an axis more often than a size: kept
FLOOR_BATCH = 2
FLOOR_DIM = 16
_KEEP = re.compile(r"kernel|stride|pad|dilat|group|head|window|pool|layer|axis|order|rank|expert|seed|eps|topk",
                   re.IGNORECASE)
# kept counts that split a size into equal parts: the size stays a multiple of them
_DIVISOR = re.compile(r"group|head|pool|window|expert", re.IGNORECASE)
_BATCH = re.compile(r"batch", re.IGNORECASE)


class SizingError(BadInput, ValueError):
    """A size that cannot be used: a bad --size, or a problem that cannot shrink to its bound."""


# -- what --size asks for ------------------------------------------------------------------------

@dataclass(frozen=True)
class SizeRequest:
    size: str  # as asked: small | full | auto | a factor such as 1/8
    mode: str  # own (the task's KERNELWRIGHT_SIZE) | full | budget | factor
    env_size: str  # KERNELWRIGHT_SIZE the source runs with
    factor: Optional[Fraction] = None
    max_bytes: Optional[int] = None
    max_flops: Optional[float] = None


def parse_factor(size: str) -> Optional[Fraction]:
    """`1/8`, `0.25` -> the factor; None when `size` is not one. A factor is in (0, 1]."""
    try:
        f = Fraction(size.strip())
    except (ValueError, ZeroDivisionError):
        return None
    return f if 0 < f <= 1 else None


def check_size(size: str) -> str:
    """`size` when it is one --size accepts, else a one-line SizingError."""
    if size in ("auto", "small", "full") or parse_factor(size) is not None:
        return size
    raise SizingError(f"unknown size {size!r}: use small, full, auto or a factor in (0, 1] such as 1/8")


def has_own_sizes(source: str) -> bool:
    """The module reads KERNELWRIGHT_SIZE itself (the built-in suite does): its `small` is its own."""
    return SIZE_ENV_NAME in source


def small_bytes() -> int:
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return SMALL_BYTES
    return min(SMALL_BYTES, ram // 16)


def request(size: str, device: str, own_sizes: bool) -> SizeRequest:
    """What `size` means for a task on `device`: `auto` is `full` on a GPU and `small` on the CPU;
    `small` is the task's own small size where it has one, else the size derived within the bounds."""
    check_size(size)
    if size == "auto":
        size_now = "small" if device == "cpu" else "full"
    else:
        size_now = size
    if size_now == "full":
        return SizeRequest(size, "full", "full")
    if size_now == "small":
        if own_sizes:
            return SizeRequest(size, "own", "small")
        return SizeRequest(size, "budget", "full", max_bytes=small_bytes(), max_flops=SMALL_FLOPS)
    return SizeRequest(size, "factor", "full", factor=parse_factor(size_now))


# -- the constants: found through the AST --------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """One integer a module-level assignment gives, and where its expression sits in the source."""

    key: str  # "batch_size", "height=width", "input_shape[0]"
    names: tuple[str, ...]  # the names the assignment binds
    span: tuple[int, int, int, int]  # lineno, col, end_lineno, end_col of the expression
    text: str  # the expression as written
    value: Optional[int] = None  # as written, where it is a literal (else known when the module runs)


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _independent(expr: ast.expr) -> bool:
    """An integer expression of literals alone; a name may appear only as an IfExp's test (a
    module's own size switch: `8192 if FULL else 64`)."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int) and not isinstance(expr.value, bool)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        return _independent(expr.operand)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)):
        return _independent(expr.left) and _independent(expr.right)
    if isinstance(expr, ast.IfExp):
        return _independent(expr.body) and _independent(expr.orelse)
    return False


def _literal(expr: ast.expr) -> Optional[int]:
    if not _independent(expr) or any(isinstance(n, ast.IfExp) for n in ast.walk(expr)):
        return None
    try:
        value = eval(compile(ast.Expression(expr), "<size>", "eval"), {"__builtins__": {}})  # noqa: S307 - literals only
    except (ArithmeticError, ValueError, OverflowError):
        return None
    return value if isinstance(value, int) else None


def _span(e: ast.expr) -> tuple[int, int, int, int]:
    return (e.lineno, e.col_offset, e.end_lineno or e.lineno, e.end_col_offset or e.col_offset)


def _reachable(tree: ast.Module) -> set[str]:
    """Names get_inputs and get_init_inputs read, directly or through module-level assignments."""
    assigned: dict[str, set[str]] = {}
    wanted: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            wanted |= _loaded(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        assigned.setdefault(n.id, set()).update(_loaded(node.value))
    seen: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(assigned.get(name, ()))
    return seen


def find_slots(source: str) -> list[Slot]:
    """The integer constants get_inputs/get_init_inputs depend on, in source order. A name assigned
    twice at module level is left alone (which value counts depends on the order of execution)."""
    tree = ast.parse(source)
    reachable = _reachable(tree)
    counts: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        counts[n.id] = counts.get(n.id, 0) + 1
    slots: list[Slot] = []

    def add(key: str, names: tuple[str, ...], expr: ast.expr) -> None:
        if any(n in reachable for n in names) and all(counts[n] == 1 for n in names) and _independent(expr):
            slots.append(Slot(key=key, names=names, span=_span(expr), text=ast.get_source_segment(source, expr) or "",
                              value=_literal(expr)))

    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        if all(isinstance(t, ast.Name) for t in targets):
            names = tuple(t.id for t in targets)  # type: ignore[attr-defined]
            key = "=".join(names)
            if isinstance(value, ast.Tuple):
                for i, elt in enumerate(value.elts):
                    add(f"{key}[{i}]", names, elt)
            else:
                add(key, names, value)
        elif (len(targets) == 1 and isinstance(targets[0], ast.Tuple) and isinstance(value, ast.Tuple)
              and len(targets[0].elts) == len(value.elts) and all(isinstance(t, ast.Name) for t in targets[0].elts)):
            for t, elt in zip(targets[0].elts, value.elts):
                add(t.id, (t.id,), elt)  # type: ignore[attr-defined]
    return slots


# -- which may change -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Role:
    scaled: bool
    why: str
    batch: bool = False


def classify(key: str, value: int) -> Role:
    """Scaled: a batch, feature, sequence or spatial size. Kept: what a kernel's meaning depends on."""
    base = key.split("[")[0]
    m = _KEEP.search(base)
    if m:
        return Role(False, f"'{m.group(0).lower()}' in its name: part of the operation, not of its size")
    if _BATCH.search(base):
        return Role(value >= 2 * FLOOR_BATCH, "batch", batch=True)
    if value < MIN_SCALABLE:
        return Role(False, f"below {MIN_SCALABLE}: a count or an axis as often as a size")
    return Role(True, "size")


@dataclass
class SizeClass:
    """The scaled constants that share one original value: they change together."""

    original: int
    keys: list[str]
    batch: bool
    multiple: int = 1  # the derived value stays a multiple of this (kept constants that divided it)
    halvings: int = 0
    frozen: bool = False  # cannot shrink further (at its floor, or the forward failed below it)

    @property
    def floor(self) -> int:
        lo = min(self.original, FLOOR_BATCH if self.batch else FLOOR_DIM)
        return max(self.multiple, -(-lo // self.multiple) * self.multiple)

    def at(self, scale: Fraction) -> int:
        """The value at `scale` of the original: a multiple of `multiple`, at least the floor."""
        target = self.original * scale
        m = self.multiple
        value = max(m, int(round(target / m)) * m)
        return min(self.original, max(self.floor, value))

    def value(self) -> int:
        return self.at(Fraction(1, 2**self.halvings))


@dataclass
class Plan:
    """The slots of one module, classified; values are filled as the module's own values."""

    slots: list[Slot]
    values: dict[str, int]  # slot key -> the value the module runs with now
    roles: dict[str, Role] = field(default_factory=dict)
    classes: list[SizeClass] = field(default_factory=list)

    def assignment(self) -> dict[str, int]:
        """Slot key -> value at the classes' current halvings (kept ones as they are)."""
        out = dict(self.values)
        for c in self.classes:
            for k in c.keys:
                out[k] = c.value()
        return out


def plan(slots: list[Slot], values: dict[str, int]) -> Plan:
    """Classify every slot with a known integer value and group the scaled ones by value."""
    p = Plan(slots=[s for s in slots if s.key in values], values=dict(values))
    kept: list[tuple[str, int]] = []
    by_value: dict[tuple[int, bool], SizeClass] = {}
    for s in p.slots:
        role = classify(s.key, values[s.key])
        p.roles[s.key] = role
        if not role.scaled:
            kept.append((s.key, values[s.key]))
            continue
        c = by_value.setdefault((values[s.key], role.batch),
                                SizeClass(original=values[s.key], keys=[], batch=role.batch))
        c.keys.append(s.key)
    for c in by_value.values():
        for key, v in kept:
            if v > 1 and c.original % v == 0 and _DIVISOR.search(key):
                c.multiple = c.multiple * v // math.gcd(c.multiple, v)
    p.classes = sorted(by_value.values(), key=lambda c: -c.original)
    return p


# -- choosing the values ---------------------------------------------------------------------------

@dataclass
class Measured:
    """The problem at one assignment, as the meta device saw it (sizing_child.py)."""

    input_shapes: list[str]
    output_shapes: list[str]
    input_bytes: int
    output_bytes: int
    param_bytes: int
    flops: Optional[float]
    forward_error: Optional[str] = None  # the forward did not run on the meta device: outputs unknown

    @property
    def total(self) -> int:
        return self.input_bytes + self.output_bytes + self.param_bytes


Measure = Callable[[dict[str, int]], "Measured | str"]  # an error in words where the module failed


# The second shape runs correctness alone (two trials, no timing): it may take twice the bound, so
# that a problem at its floors, which can only grow, still has one
SECOND_ROOM = 2


def _fits(m: Measured, req: SizeRequest, flops: bool = True, room: int = 1) -> bool:
    return ((req.max_bytes is None or m.total <= room * req.max_bytes)
            and (not flops or req.max_flops is None or m.flops is None or m.flops <= req.max_flops))


def _mb(n: float) -> str:
    return f"{n / 2**20:.3g} MB"


def choose(p: Plan, req: SizeRequest, measure: Measure, first: Measured, where: str) -> Measured:
    """Set the classes' halvings for `req` and return the problem measured there.

    Budget: halve the largest class still able to shrink until the problem fits. A step whose
    forward fails (a spatial size below what a kernel needs, two sizes that must stay equal such as
    a LayerNorm's width and the channels that make it) is tried again as one step of every class
    together (which keeps such relations), and where that fails too the class is frozen. The FLOP
    bound is a target: where the kept constants and floors stop short of it, the smallest problem
    is taken. Raises SizingError when even that is over the memory bound."""
    if req.mode == "factor":
        assert req.factor is not None
        scaled = {k: c.at(req.factor) for c in p.classes for k in c.keys}
        got = measure({**p.values, **scaled})
        if isinstance(got, str):
            raise SizingError(f"{where}: at {req.size} of its size the module fails: {got}")
        for c in p.classes:  # the factor's values become the classes' own (the second shape halves them)
            c.original = c.at(req.factor)
        return got
    if req.mode != "budget":
        return first
    now = first

    def works(got: Measured | str) -> bool:
        return not isinstance(got, str) and not (got.forward_error and not now.forward_error)

    while not _fits(now, req):
        live = [c for c in p.classes if not c.frozen and c.at(Fraction(1, 2 ** (c.halvings + 1))) != c.value()]
        for c in p.classes:
            c.frozen = c.frozen or c not in live
        if not live:
            if _fits(now, req, flops=False):
                break  # the FLOP target is out of reach: the smallest problem it allows
            raise SizingError(f"{where}: needs {_mb(now.total)} of inputs, outputs and parameters at the smallest "
                              f"size its kept constants allow, over the bound of {_mb(req.max_bytes or 0)}; run it "
                              "with --size full on a machine with more memory")
        c = max(live, key=lambda c: (c.value(), not c.batch, c.original))
        c.halvings += 1
        got = measure(p.assignment())
        if works(got):
            now = got  # type: ignore[assignment]
            continue
        c.halvings -= 1
        for other in live:
            other.halvings += 1
        got = measure(p.assignment())
        if works(got):
            now = got  # type: ignore[assignment]
            continue
        for other in live:
            other.halvings -= 1
        c.frozen = True
    return now


def second_shape(p: Plan, measure: Measure, req: SizeRequest) -> tuple[dict[str, int], Optional[Measured], str]:
    """A second assignment for the check of shapes the kernel never saw: the batch and the largest
    other size each halved (or doubled back where halving cannot change it), the forward still
    running and the problem within twice the memory bound (SECOND_ROOM). Returns (assignment, measured, why) where the assignment equals the first when there
    is no such shape, and `why` says which sizes changed or why none could."""
    base = p.assignment()
    changed: list[str] = []
    batch = [c for c in p.classes if c.batch]
    inner = [c for c in p.classes if not c.batch]
    picks = batch[:1] + inner[:1]
    if not picks:
        return base, None, "no size constant that may change (only kept ones)"
    now = dict(base)
    last: Optional[Measured] = None
    for c in picks:
        for step in (1, -1):
            if c.halvings + step < 0:
                continue
            c.halvings += step
            trial = {**now, **{k: c.value() for k in c.keys}}
            c.halvings -= step
            if trial == now:
                continue
            got = measure(trial)
            if isinstance(got, str) or got.forward_error or not _fits(got, req, flops=False, room=SECOND_ROOM):
                continue
            now, last = trial, got
            changed.append(f"{'/'.join(c.keys)} {base[c.keys[0]]}->{trial[c.keys[0]]}")
            break
    if last is None:  # sizes that must change together (a LayerNorm's width and the channels before it)
        for step in (1, -1):
            if any(c.halvings + step < 0 for c in p.classes):
                continue
            trial = {**base, **{k: c.at(Fraction(1, 2 ** (c.halvings + step))) for c in p.classes for k in c.keys}}
            got = measure(trial) if trial != base else "unchanged"
            if not isinstance(got, str) and not got.forward_error and _fits(got, req, flops=False, room=SECOND_ROOM):
                return trial, got, "every size together: " + ", ".join(
                    f"{'/'.join(c.keys)} {base[c.keys[0]]}->{trial[c.keys[0]]}" for c in p.classes
                    if trial[c.keys[0]] != base[c.keys[0]])
        return base, None, "no other size of its constants runs the forward"
    return now, last, ", ".join(changed)


# -- writing it into the source ------------------------------------------------------------------

def rewrite(source: str, slots: list[Slot], values: dict[str, int], current: dict[str, int]) -> str:
    """`source` with each slot whose value differs from `current` written as the new literal; the
    rest of the text (comments included) as it was."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode("utf-8")))
    data = source.encode("utf-8")
    edits = []
    for s in slots:
        if s.key in values and values[s.key] != current.get(s.key):
            a = offsets[s.span[0] - 1] + s.span[1]
            b = offsets[s.span[2] - 1] + s.span[3]
            edits.append((a, b, str(values[s.key]).encode()))
    for a, b, text in sorted(edits, reverse=True):
        data = data[:a] + text + data[b:]
    return data.decode("utf-8")


def variant_source(task: Task) -> Optional[str]:
    """The task's source at its second shape (Sizing.constants' `second` values), or None."""
    if task.sizing is None or not task.sizing.second_shapes:
        return None
    slots = find_slots(task.source)
    now = {c.name: c.value for c in task.sizing.constants}
    second = {c.name: c.second for c in task.sizing.constants if c.second is not None}
    return rewrite(task.source, slots, {**now, **second}, now)


# -- the one entry ---------------------------------------------------------------------------------

class SizingJob(BaseModel):
    source: str
    where: str  # the task's path or id, for messages
    mode: str
    size: str
    env_size: str
    factor: Optional[str] = None
    max_bytes: Optional[int] = None
    max_flops: Optional[float] = None


class SizingReply(BaseModel):
    source: Optional[str] = None  # the rewritten source
    sizing: Optional[Sizing] = None
    error: Optional[str] = None  # it cannot be sized: a bound it cannot fit, a factor it fails at
    note: Optional[str] = None  # not sized, the module's own failure: left to the checks that run it



def sizing_record(req: SizeRequest, p: Plan, measured: Measured, original: Optional[Measured],
                  second: dict[str, int], second_m: Optional[Measured], second_why: str,
                  first_values: dict[str, int]) -> Sizing:
    chosen = p.assignment()
    constants = []
    for s in p.slots:
        role = p.roles[s.key]
        constants.append(SizedConstant(
            name=s.key, original=first_values[s.key], value=chosen[s.key], scaled=role.scaled, why=role.why,
            second=second[s.key] if second.get(s.key, chosen[s.key]) != chosen[s.key] else None))
    return Sizing(
        size=req.size, mode=req.mode, env_size=req.env_size,
        factor=str(req.factor) if req.factor is not None else None,
        max_bytes=req.max_bytes, max_flops=req.max_flops, constants=constants,
        input_shapes=measured.input_shapes, output_shapes=measured.output_shapes,
        input_bytes=measured.input_bytes, output_bytes=measured.output_bytes, param_bytes=measured.param_bytes,
        flops=measured.flops, forward_error=measured.forward_error,
        original_bytes=original.total if original is not None else None,
        original_flops=original.flops if original is not None else None,
        second_shapes=second_m.input_shapes if second_m is not None else [],
        second_why=second_why)


CHILD_TIMEOUT_S = 180.0


def sized_tasks(tasks: list[Task], size: str, device: str, timeout: float = CHILD_TIMEOUT_S) -> list[Task | SizingError]:
    """Each task at `size` on `device`: its source rewritten where the size is derived, and its
    Sizing record; a SizingError in its place where it cannot be sized. One child process sizes them
    all (torch is imported once)."""
    from kernelwright.child import ChildTimeout, run_json_child

    check_size(size)
    if not tasks:
        return []
    jobs = [SizingJob(source=t.source, where=t.path or t.id, mode=(r := request(size, device, has_own_sizes(t.source))).mode,
                      size=size, env_size=r.env_size, factor=r.factor and str(r.factor), max_bytes=r.max_bytes,
                      max_flops=r.max_flops) for t in tasks]
    payload = "[" + ",".join(j.model_dump_json() for j in jobs) + "]"
    try:
        reply, code, tail = run_json_child("kernelwright.tasks.sizing_child", payload, timeout * len(tasks))
    except ChildTimeout:
        raise SizingError(f"sizing {len(tasks)} task(s) took over {timeout * len(tasks):.0f} s") from None
    if reply is None or not reply.get("ok"):
        why = (reply or {}).get("error") or f"the sizing process died (exit {code})" + (f": {tail}" if tail else "")
        raise SizingError(f"cannot size the task(s): {why}")
    out: list[Task | SizingError] = []
    for t, r in zip(tasks, reply["replies"]):
        got = SizingReply.model_validate(r)
        if got.error is not None:
            out.append(SizingError(got.error))
        elif got.sizing is None:
            # the module itself fails (or cannot run without real tensors): the checks that run it
            # for real say why in their words; it runs at the size it was written with
            log.info("%s: not sized: %s", t.path or t.id, got.note)
            out.append(t)
        else:
            out.append(t.model_copy(update={"source": got.source, "sizing": got.sizing}))
    return out


def sized_task(task: Task, size: str, device: str) -> Task:
    """`task` at `size` on `device` (see `sized_tasks`); raises SizingError."""
    [got] = sized_tasks([task], size, device)
    if isinstance(got, SizingError):
        raise got
    return got


def sized_or_failed(tasks: list, size: str, device: str) -> list:
    """A study's tasks (Task or TaskFailure) at `size`: a task that cannot be sized becomes a
    TaskFailure (a failed cell), as a broken file does."""
    from kernelwright.tasks.loader import TaskFailure

    real = [t for t in tasks if isinstance(t, Task)]
    done = dict(zip((t.id for t in real), sized_tasks(real, size, device)))
    out = []
    for t in tasks:
        got = done.get(t.id, t) if isinstance(t, Task) else t
        if isinstance(got, SizingError):
            got = TaskFailure(id=t.id, name=t.name, level=t.level, error=str(got), source_hash=t.source_hash)
        out.append(got)
    return out
