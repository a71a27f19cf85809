"""What every skeleton writer shares, and the protocol a writer follows.

A writer turns a plan's segment into a ``Scaffold`` for one target (``cpp.py``, ``cuda.py``,
``triton.py``) or one family of segments on a target (``triton_gemm.py``); ``writers/__init__.py``
finds the writer of a (target, segment kind). Here: the region's placeholder and its marking, the
Python around every kernel (``kw_fused``: the extra inputs shaped, broadcasting resolved at call
time by ``_kw_bcast``), the extension's name, the launch-settings line, and the record.

Every input is loaded (converted to float) before the region and the result is stored after it,
so the region is only the math. Broadcasting is resolved in Python at call time: an extra input
arrives as a flat vector read at ``(i / inner) % span`` (``_kw_bcast``), which is exact for any
broadcast against the main input's shape.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Optional, Protocol

from kernelwright.scaffold.types import BEGIN, END, KernelArg, Scaffold, ScaffoldPlan, Segment, SegmentKind

PLACEHOLDER = "@@KW_REGION@@"
PY_DTYPES = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16"}


class SkeletonWriter(Protocol):
    """The skeletons of one target for the segment kinds in `kinds`: a new layout or target is one
    class that follows this, registered in writers/__init__.py."""

    target: str  # cuda | triton | cpp
    kinds: tuple[SegmentKind, ...]

    def write(self, plan: ScaffoldPlan, seg: Segment) -> Scaffold:
        """The complete candidate around `seg` (the plan's segment), region marked."""
        ...

    def default_launch(self, seg: Segment) -> dict[str, int]:
        """The settings of the program's `KW_LAUNCH` line ({} where it has none)."""
        ...

    def launch_grid(self, seg: Segment) -> list[dict[str, int]]:
        """The launch settings worth timing once a region is correct (the default may be among them)."""
        ...

    def shared_programs(self, sc: Scaffold, regions: list[str]) -> Optional[list[str]]:
        """One program per region, all with one extension; None where nothing is shared."""
        ...


@dataclass(frozen=True)
class RegionWords:
    """How a target's prompt words what the region reads and writes (`variables`)."""

    value: str  # an input's type in the region
    element: str  # an elementwise input: "<element> <what it is>"
    elementwise_y: str
    row_input: str  # a row kernel's input, over {name} and {describe}
    row_loop: tuple[str, ...]  # how the region loops over a row, where the target says so
    per_row_y: str  # one value per row
    row_y: str  # a whole row


def region_words(seg: Segment) -> set[str]:
    """The words of the segment's lines and definitions: what the math line is chosen by."""
    text = "\n".join(seg.torch_lines + seg.op_notes)
    return set(re.findall(r"[a-z0-9_]+", text.lower())) | ({"abs"} if "|" in text else set())


def variables(seg: Segment, words: RegionWords, math: str) -> list[str]:
    """What the region can read and must write, one line each, for the prompt; `math`: the line on
    the math functions it may call."""
    lines = []
    if seg.kind == SegmentKind.ELEMENTWISE:
        for a in seg.args:
            lines.append(f"`{a.name}` ({words.value}): {words.element} {a.describe}")
        lines.append(words.elementwise_y)
        return lines + [math]
    rows_word = f"a row is the last {seg.row_dims} dims of x, {seg.cols} values" if seg.row_dims > 1 \
        else f"a row is the last dim of x, {seg.cols} values"
    lines.append(f"{rows_word}; `row` is this program's row, `cols` its length")
    for a in seg.args:
        lines.append(words.row_input.format(name=a.name, describe=a.describe))
    lines += words.row_loop
    lines.append(words.per_row_y if seg.per_row_output else words.row_y)
    return lines + [math]


BCAST_HELPER = '''
def _kw_bcast(t, shape, cols=0):
    """t broadcast against `shape`, as (flat contiguous values, inner, span): element i of the
    broadcast tensor (row-major) is values[(i // inner) % span]. `cols`: a row kernel's row length;
    a pattern that is neither one value a row nor a vector along it is laid out like x, so that the
    kernel finds a row's values once (the CUDA kernel reads those two shapes only)."""
    nd, td = len(shape), t.dim()
    if td and tuple(t.shape) == shape[nd - td:]:
        # x's trailing dims (a bias): the common case first, as a small kernel's call is mostly
        # this Python (the general path and a reshape: 4-5 us a call on the 2-core CPU)
        if not cols or t.numel() % cols == 0:
            return (t if td == 1 else t.reshape(-1)).contiguous(), 1, t.numel()
    dims = [1] * (nd - td) + list(t.shape)
    varying = [d for d in range(nd) if dims[d] != 1]
    a, b = (varying[0], varying[-1]) if varying else (nd, nd - 1)
    if all(dims[d] == shape[d] for d in range(a, b + 1)):
        inner, span = math.prod(shape[b + 1:]) if varying else 1, math.prod(shape[a:b + 1])
        if not cols or inner % cols == 0 or (inner == 1 and span % cols == 0):
            return t.reshape(-1).contiguous(), inner, span
    full = t.expand(shape).contiguous()  # a pattern with gaps, or across a row: materialize it once
    return full.reshape(-1), 1, full.numel()
'''


# ---- launch settings -----------------------------------------------------------------------------
# A program's launch settings are one Python line, `KW_LAUNCH = {...}`, read at call time: a variant
# of the launch is the same extension (no new build) with another line, so speed search can time
# several of them on one correct region.

LAUNCH_LINE = re.compile(r"^KW_LAUNCH = .*$", re.M)


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def launch_line(knobs: dict[str, int]) -> str:
    return f"KW_LAUNCH = {knobs!r}"


def with_launch(program: str, knobs: dict[str, int]) -> Optional[str]:
    """The program with other launch settings; None for a program without a KW_LAUNCH line."""
    if not LAUNCH_LINE.search(program):
        return None
    return LAUNCH_LINE.sub(lambda _: launch_line(knobs), program, count=1)


# ---- shared pieces -------------------------------------------------------------------------------

def ext_name(plan: ScaffoldPlan, target: str) -> str:
    slug = "".join(ch if ch.isalnum() else "_" for ch in plan.task_id.split("/")[-1])[:40]
    # the probes are the pre-check's, not the program's: leaving them out keeps names (and so the
    # prompts of recorded runs) what they were
    # (nor the GEMM alternative, which these targets never use: the names stay what they were before it)
    dump = plan.model_dump_json(exclude={"probes": True, "gemm": True, "segment": {"gemm"}})
    digest = hashlib.sha256((dump + target).encode()).hexdigest()[:8]
    return f"kw_{slug}_{target}_{digest}"


def extra_shaping(extras: list[KernelArg], shape: str, like: str, cols: str = "") -> list[str]:
    """`kw_fused`'s lines that shape each extra input for the kernel: contiguous when shaped like
    `like` (whose shape is the expression `shape`), one value when a scalar, else flat with its
    broadcast pattern (`_kw_bcast`; `cols`, a row kernel's row length, the expression)."""
    lines = []
    for a in extras:
        if a.pattern == "same":
            lines.append(f"    {a.name} = {a.name}.contiguous()")
            lines.append(f"    assert {a.name}.shape == {shape}, 'kw_fused: {a.name} must be shaped like {like}'")
        elif a.pattern == "scalar":
            lines.append(f"    {a.name} = {a.name}.reshape(1).contiguous()")
        else:
            lines.append(f"    {a.name}, {a.name}_inner, {a.name}_span = _kw_bcast({a.name}, shape"
                         + (f", {cols})" if cols else ")"))
    return lines


def segment_wrapper(seg: Segment, call: str) -> str:
    """Python `kw_fused(x, *extras)`: shapes extras for the kernel, calls it, shapes the output."""
    extras = seg.extras
    params = ", ".join(["x"] + [a.name for a in extras])
    lines = [f"def kw_fused({params}):", "    x = x.contiguous()", "    shape = tuple(x.shape)"]
    if seg.kind == SegmentKind.ROW:
        lines.append(f"    cols = math.prod(shape[len(shape) - {seg.row_dims}:])")
    lines += extra_shaping(extras, "x.shape", "x", "cols" if seg.kind == SegmentKind.ROW else "")
    if seg.kind == SegmentKind.ROW:
        if seg.per_row_output:
            keep = f" + (1,) * {seg.row_dims}" if seg.out_keepdim else ""
            lines.append(f"    out_shape = shape[:len(shape) - {seg.row_dims}]{keep}")
        else:
            lines.append("    out_shape = shape")
    else:
        lines.append("    out_shape = shape")
    lines.append(f"    out = {call}")
    lines.append("    return out.reshape(out_shape)")
    return "\n".join(lines) + "\n"


def extra_params(seg: Segment) -> list[str]:
    """The extra inputs as the kernel's launcher takes them: each one's name, a broadcast one's
    inner and span after it."""
    out = []
    for a in seg.extras:
        out.append(a.name)
        if a.pattern == "broadcast":
            out += [f"{a.name}_inner", f"{a.name}_span"]
    return out


def ext_args(seg: Segment) -> list[str]:
    """Arguments after x passed from Python to the compiled function, in order."""
    return extra_params(seg) + (["cols"] if seg.kind == SegmentKind.ROW else [])


def assemble_program(plan: ScaffoldPlan, header: str, kernel_part: str, wrapper: str) -> str:
    seg = plan.segment
    helper = BCAST_HELPER + "\n\n" if seg is not None and any(a.pattern == "broadcast" for a in seg.args) else ""
    return f"{header}\n{plan.prelude}\n{kernel_part}\n{helper}\n{wrapper}\n\n{plan.model_new}"


def make_scaffold(plan: ScaffoldPlan, seg: Segment, target: str, program: str, kernel_view: str, indent: str,
                  default: str, language: str, region_variables: list[str]) -> Scaffold:
    return Scaffold(task_id=plan.task_id, target=target, available=True, reason=plan.reason, segment=seg,
                    program=program, placeholder=indent + PLACEHOLDER, default_region=default, indent=indent,
                    language=language, kernel_view=kernel_view, variables=region_variables)


def marked_kernel(body: str, indent: str, comment: str, view_body: Optional[str] = None) -> tuple[str, str]:
    """(program text, view text) of a kernel whose region sits at PLACEHOLDER. `view_body`, where
    given, is the kernel as the model is shown it (see `cuda.cuda_view`); the program is `body`."""
    program = body.replace(f"{indent}{PLACEHOLDER}",
                           f"{indent}{comment} {BEGIN}\n{indent}{PLACEHOLDER}\n{indent}{comment} {END}")
    view_body = body if view_body is None else view_body
    view_indent = re.search(rf"^([ \t]*){PLACEHOLDER}", view_body, re.M)[1]  # a view may indent it otherwise
    view = view_body.replace(f"{view_indent}{PLACEHOLDER}", f"{view_indent}{comment} {BEGIN}\n{view_indent}{comment} "
                             f"... your code ...\n{view_indent}{comment} {END}")
    return program, view


def abridge(kernel: str, first: str, last: str, summary: str) -> str:
    """`kernel` with the lines from the one starting (stripped) with `first` to the one starting with
    `last` replaced by `summary` (a comment line, indented like `first`'s line): for a view."""
    lines = kernel.split("\n")
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith(first))
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(last))
    pad = lines[start][:len(lines[start]) - len(lines[start].lstrip())]
    return "\n".join(lines[:start] + [pad + summary] + lines[end + 1:])

