"""Put a model's answer into a scaffold's region.

Small models rarely answer with exactly the lines asked for: they wrap them in prose, repeat the
whole kernel, re-declare `y`, or `return` the value. Each of those is undone here by a named,
deterministic rule that is recorded with the attempt, so the evaluator judges the model's math
and the record shows what the splicer changed.
"""

from __future__ import annotations

import re
import textwrap

from kernelwright.extract import fenced_blocks
from kernelwright.scaffold.types import BEGIN, END, Assembly, Scaffold, SegmentKind

C_DECL_Y = re.compile(r"^(\s*)(?:const\s+)?(?:float|double|auto|half|__half)\s+y\s*=")
C_RETURN = re.compile(r"^(\s*)return\s+(.+?);\s*$")
# min/max on a float and an integer literal (`max(x + 3, 0)`) is ambiguous in CUDA and a template
# mismatch for std::max; the float functions take both
C_MIN_MAX = re.compile(r"(?<![\w.>:])(?:std::)?(min|max)\s*\(")
C_CONTROL = re.compile(r"^\s*(?:(?:for|if|while|switch)\s*\(|else\b|do\b|#)")
C_CONTINUES = ("+", "-", "*", "/", "%", "?", ":", "&", "|", "^", ".", ")", "]", "{", ",", "=", "<", ">")
PY_RETURN = re.compile(r"^(\s*)return\b\s*(.*)$")
WHOLE_KERNEL = {"cuda": ("__global__", "#include", "torch::Tensor kw_fused_impl", "load_inline"),
                "cpp": ("static void kw_fused_kernel", "#include", "torch::Tensor kw_fused_impl", "load_inline"),
                "python": ("@triton.jit", "def kw_fused_kernel", "import triton", "def kw_launch")}


def assemble(scaffold: Scaffold, answer: str) -> Assembly:
    region, repairs = extract_region(scaffold, answer)
    return Assembly(region=region, code=scaffold.program_with(region), repairs=repairs,
                    empty=not has_statement(region, scaffold.language))


def has_statement(region: str, language: str) -> bool:
    """Does the region do anything: a comment alone (`# compute y as above`) leaves y as it came in,
    which a line whose op is nearly the identity (`+ 1e-6`) passes within tolerance, and its
    composition then fails (an RMSNorm's epsilon line did that)."""
    if language == "python":
        code = "\n".join(ln for ln in region.splitlines() if not ln.lstrip().startswith("#"))
    else:
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", region, flags=re.S)
    return bool(code.strip())


def extract_region(scaffold: Scaffold, answer: str) -> tuple[str, list[str]]:
    repairs: list[str] = []
    text = _code_block(answer, scaffold.language, repairs)
    text = _between_markers(text, repairs)
    text = _out_of_whole_kernel(scaffold, text, repairs)
    lines = textwrap.dedent(text).strip("\n").splitlines()
    lines = _drop_skeleton_lines(scaffold, lines, repairs)
    row = scaffold.segment is not None and scaffold.segment.kind == SegmentKind.ROW
    if scaffold.language == "python":
        lines = _python_fixes(lines, repairs, row)
    else:
        lines = _c_fixes(scaffold, lines, repairs)
    return textwrap.dedent("\n".join(lines)).strip("\n"), repairs


def _code_block(answer: str, language: str, repairs: list[str]) -> str:
    blocks = fenced_blocks(answer)
    if not blocks:
        return answer
    want = {"python": ("python", "py"), "cuda": ("cuda", "cpp", "c++", "c", "cu"),
            "cpp": ("cpp", "c++", "c", "cuda")}[language]
    for lang, body in blocks:
        if lang.lower() in want:
            return body
    if len(blocks) > 1:
        repairs.append("several code blocks and none in the region's language: took the first")
    return blocks[0][1]


def _between_markers(text: str, repairs: list[str]) -> str:
    if BEGIN in text and END in text.split(BEGIN, 1)[1]:
        inner = text.split(BEGIN, 1)[1].split(END, 1)[0]
        repairs.append("the answer repeated the region markers: took the lines between them")
        # drop the rest of the BEGIN line and the comment leader in front of END
        return "\n".join(inner.split("\n")[1:-1])
    return text


def _out_of_whole_kernel(scaffold: Scaffold, text: str, repairs: list[str]) -> str:
    """An answer that rewrote the whole kernel: keep what sits where the region sits, i.e. the
    lines between the last line the skeleton has before the region and the first one after it."""
    if not any(m in text for m in WHOLE_KERNEL[scaffold.language]):
        return text
    lines = text.splitlines()
    stripped = [ln.strip() for ln in lines]
    for before, after in _anchors(scaffold):
        start = max((i for i, s in enumerate(stripped) if s == before), default=None)
        if start is None:
            continue
        end = next((i for i in range(start + 1, len(lines)) if stripped[i] == after), None)
        if end is None:
            continue
        repairs.append("the answer rewrote the whole kernel: took the lines where the region goes")
        return "\n".join(lines[start + 1:end])
    return text


def _kernel_sides(scaffold: Scaffold) -> list[tuple[list[str], list[str]]]:
    """The kernel's lines before and after the region (stripped), as the model was shown it (the
    view, which abridges launch machinery) and as the program has it: from the kernel's signature to
    its end only, so the program's other lines (the task's constants, the host code) are not the
    kernel's."""
    sides = []
    for text, mark in ((scaffold.kernel_view, BEGIN), (scaffold.program, scaffold.placeholder)):
        head, _, tail = text.partition(mark)
        before = head.split("\n")[:-1]  # without the marker's own line (the view's `// ` before REGION BEGIN)
        before = before[max((i for i, ln in enumerate(before) if "kw_fused_kernel(" in ln), default=0):]
        after = tail.split("\n")[1:]
        # the kernel ends at its first line back at column 0 (C's closing brace; Python's next statement)
        end = next((i for i, ln in enumerate(after) if ln[:1].strip() and not ln.startswith("#pragma")), len(after))
        sides.append(([ln.strip() for ln in before], [ln.strip() for ln in after[:end + 1]]))
    return sides


def _anchors(scaffold: Scaffold) -> list[tuple[str, str]]:
    """The kernel's last line before the region and first line after it, shown and in the program."""
    out = []
    for before, after in _kernel_sides(scaffold):
        before = [ln for ln in before if ln and BEGIN not in ln]
        after = [ln for ln in after if ln and END not in ln and "... your code ..." not in ln]
        out.append(((before[-1] if before else ""), (after[0] if after else "")))
    return out


def _skeleton_lines(scaffold: Scaffold) -> set[str]:
    """The kernel's lines around the region, as shown and as in the program (the view abridges some)."""
    return {ln for before, after in _kernel_sides(scaffold) for ln in before + after
            if len(ln) > 3 and not ln.startswith(("//", "#"))}


def _drop_skeleton_lines(scaffold: Scaffold, lines: list[str], repairs: list[str]) -> list[str]:
    """Leading/trailing lines copied from the skeleton (loads, declarations, the store) would
    redeclare variables; drop them from both ends of the answer."""
    known = _skeleton_lines(scaffold) | {"y = x", "float y = x;"}
    lo, hi = 0, len(lines)
    while lo < hi and (lines[lo].strip() in known or not lines[lo].strip()):
        lo += 1
    while hi > lo and (lines[hi - 1].strip() in known or not lines[hi - 1].strip()):
        hi -= 1
    # a closing brace at the end is the kernel's own (copied) only if the answer's braces do not
    # balance with it; the model's last loop needs its brace
    kept = lines[lo:hi]
    if scaffold.language != "python":
        while kept and _brace_balance(kept) < 0 and kept[-1].strip() == "}":
            kept = kept[:-1]
        if _brace_balance(kept) > 0:
            kept = kept + ["}"] * _brace_balance(kept)
            repairs.append("closed the braces the answer left open")
        trimmed = lines[lo:hi] != lines and (lo > 0 or hi < len(lines))
        if trimmed and any(ln.strip() and ln.strip() not in ("{", "}") for ln in lines[:lo] + lines[hi:]):
            repairs.append("dropped lines copied from the skeleton around the region")
    elif lo > 0 or hi < len(lines):
        if any(ln.strip() for ln in lines[:lo] + lines[hi:]):
            repairs.append("dropped lines copied from the skeleton around the region")
    return kept


def _brace_balance(lines: list[str]) -> int:
    text = "\n".join(lines)
    return text.count("{") - text.count("}")


def _c_fixes(scaffold: Scaffold, lines: list[str], repairs: list[str]) -> list[str]:
    out = []
    seg = scaffold.segment
    elementwise = seg is not None and seg.kind != SegmentKind.ROW  # a GEMM's region: elementwise on its product
    scalar_y = elementwise or (seg is not None and seg.per_row_output)  # `float y` declared before the region
    accessors = [a.name for a in seg.args] if seg is not None and not elementwise else []
    for line in lines:
        for name in accessors:  # row inputs are read as x(j); x[j] indexes the lambda itself
            new = re.sub(rf"\b{re.escape(name)}\[([^\[\]]+)\]", rf"{name}(\1)", line)
            if new != line:
                repairs.append(f"`{name}[...]` reads a row input: turned into `{name}(...)`")
                line = new
        if scalar_y and C_DECL_Y.match(line):
            line = C_DECL_Y.sub(r"\1y =", line, count=1)
            repairs.append("`y` is already declared: turned the declaration into an assignment")
        m = C_RETURN.match(line)
        if scalar_y and m and m.group(2).strip() != "y":
            line = f"{m.group(1)}y = {m.group(2)};"
            repairs.append("`return value;` in the region: assigned the value to y instead")
        elif scalar_y and m:
            repairs.append("dropped `return y;` (the skeleton stores y)")
            continue
        new = C_MIN_MAX.sub(lambda mm: f"f{mm.group(1)}f(", line)
        if new != line:
            repairs.append(f"float math: `{line.strip()}` -> `{new.strip()}`")
            line = new
        out.append(line)
    return _semicolons(out, repairs)


def _semicolons(lines: list[str], repairs: list[str]) -> list[str]:
    """A statement line that ends like an expression and is not continued on the next line gets
    its missing `;` (the model's one-line answers often lack it: `y = x * 0.5f`)."""
    out = list(lines)
    for i, line in enumerate(lines):
        code, sep, comment = line.partition("//")
        body = code.rstrip()
        if not body.strip() or C_CONTROL.match(body) or body.count("(") != body.count(")"):
            continue
        if not re.search(r"[\w)\]]$", body) or body.strip() in ("else", "do"):
            continue
        following = next((ln.strip() for ln in lines[i + 1:] if ln.strip() and not ln.strip().startswith("//")), "")
        if following.startswith(C_CONTINUES):
            continue
        out[i] = body + ";" + (("  " + sep + comment) if sep else "")
        repairs.append(f"added the missing `;` after `{body.strip()}`")
    return out


TL_NAMES = ("exp", "log", "sqrt", "rsqrt", "sigmoid", "erf", "abs", "maximum", "minimum", "where", "cumsum")
CONST_CALL = re.compile(r"\b(?:tl\.|math\.|np\.|torch\.)?(sqrt|exp|log)\((\d+(?:\.\d*)?)\)")
BARE_CALL = re.compile(rf"(?<![\w.])({'|'.join(TL_NAMES)})\(")
OTHER_MODULE = re.compile(rf"\b(?:math|np|numpy|torch)\.({'|'.join(TL_NAMES)})\(")
AXIS = re.compile(r"axis\s*=\s*(?:-1|1)\b")
KEEPDIMS = re.compile(r",\s*keep_?dims?\s*=\s*True")
TL_MEAN = re.compile(r"\btl\.mean\(")
SQUARE = re.compile(r"(\([^()]*\)|[A-Za-z_]\w*)\s*\*\*\s*2(?![\d.])")  # Triton tensors have no **
ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*=(?!=)")


def _python_fixes(lines: list[str], repairs: list[str], row: bool = False) -> list[str]:
    """Triton regions: the math a small model writes as Python (`erf(`, `math.sqrt(2)`) or as
    NumPy on 2-D arrays (`axis=-1`, `keepdims=True`, `tl.mean`) becomes what Triton has: rows
    here are 1-D blocks."""
    import math

    fixed = []
    for line in lines:
        new = CONST_CALL.sub(lambda m: repr(getattr(math, m.group(1))(float(m.group(2)))), line)
        new = OTHER_MODULE.sub(lambda m: f"tl.{m.group(1)}(", new)
        new = BARE_CALL.sub(lambda m: f"tl.{m.group(1)}(", new)
        new = SQUARE.sub(lambda m: f"({m.group(1)} * {m.group(1)})", new)
        if row:
            new = AXIS.sub("axis=0", new)
            new = KEEPDIMS.sub("", new)
            new = TL_MEAN.sub("(1.0 / cols) * tl.sum(", new)
        if new != line:
            repairs.append(f"Triton spelling: `{line.strip()}` -> `{new.strip()}`")
        fixed.append(new)
    lines = fixed
    out = []
    for line in lines:
        m = PY_RETURN.match(line)
        if m:
            value = m.group(2).strip()
            if value and value != "y":
                out.append(f"{m.group(1)}y = {value}")
                repairs.append("`return value` in the region: assigned the value to y instead")
            else:
                repairs.append("dropped `return` (the skeleton stores y)")
            continue
        out.append(line)
    return _result_in_y(out, repairs)


def _result_in_y(lines: list[str], repairs: list[str]) -> list[str]:
    """The region must leave its result in `y`; an answer that computed it into another name last
    gets `y = <that name>`."""
    names = [m.group(1) for m in (ASSIGN.match(ln) for ln in lines) if m]
    if names and "y" not in names and lines and not lines[-1].startswith((" ", "\t")):
        repairs.append(f"the result was left in `{names[-1]}`: assigned it to y")
        return lines + [f"y = {names[-1]}"]
    return lines
