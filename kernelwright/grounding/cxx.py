"""A small, careful reader of C++/CUDA source text for grounding.

Not a compiler: it masks comments, string literals and preprocessor lines (keeping every offset), then
walks braces to find functions defined or declared at namespace level, with their return type, name,
parameters and CUDA kind. That is enough to say which host functions a `functions=[...]` list can bind,
to write their prototypes, to find the bodies of device code, and to spot a 1-D elementwise kernel.
Anything it cannot read with certainty it leaves alone (callers then report instead of rewriting).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

CUDA_MARKERS = re.compile(r"__global__|__device__|__shared__|<<<|\bthreadIdx\b|\bblockIdx\b|\bblockDim\b")
CONTROL_WORDS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch", "decltype", "static_assert",
                           "alignof", "defined", "new", "delete", "throw", "case", "else", "do", "typeid",
                           "noexcept", "operator", "co_return", "using", "typedef", "goto"})
_ATTRIBUTES = re.compile(r"__launch_bounds__\s*\([^()]*\)|__align__\s*\([^()]*\)|__attribute__\s*\(\([^()]*\)\)|"
                         r"\[\[[^\]]*\]\]|alignas\s*\([^()]*\)")
_TAIL = re.compile(r"\s*(?:(?:const|noexcept|override|final|volatile|&&?)\s*)*(?:->\s*[\w:<>\s,*&]+)?\s*")


def is_cuda(text: str) -> bool:
    return bool(CUDA_MARKERS.search(mask(text)))


def mask(src: str, comments: bool = True, strings: bool = True, preprocessor: bool = True) -> str:
    """`src` with comments, literal contents and preprocessor lines blanked to spaces (newlines kept),
    so offsets into the result are offsets into `src`."""
    out = list(src)
    i, n = 0, len(src)
    line_start = True

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#" and preprocessor:
            j = i
            while j < n and not (src[j] == "\n" and src[j - 1] != "\\"):
                j += 1
            blank(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            if comments:
                blank(i, j)
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            if comments:
                blank(i, j)
            i = j
        elif c == "R" and src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', src[i:])
            if m is None:
                i += 1
                continue
            close = src.find(")" + m.group(1) + '"', i + m.end())
            j = n if close < 0 else close + len(m.group(1)) + 2
            if strings:
                blank(i + m.end(), j - len(m.group(1)) - 2)
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and src[i - 1].isalnum()):  # 1'000 is a number
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            if strings:
                blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def balanced(src: str) -> bool:
    """Brackets pair up outside comments and literals; a source that fails this (cut off, or with a
    stray brace) is not read for its functions: every conclusion from it would be a guess."""
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in mask(src):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack


def match_close(masked: str, open_at: int) -> Optional[int]:
    """Index of the bracket closing the one at `open_at` (masked text: nothing hides in literals)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[masked[open_at]]]
    for k in range(open_at + 1, len(masked)):
        ch = masked[k]
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]}":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return k
    return None


def split_args(masked: str, open_at: int) -> Optional[tuple[int, list[tuple[int, int]]]]:
    """The closing paren of a call and the (start, end) of each top-level argument."""
    close = match_close(masked, open_at)
    if close is None:
        return None
    args, depth, start = [], 0, open_at + 1
    for k in range(open_at + 1, close):
        ch = masked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append((start, k))
            start = k + 1
    if masked[start:close].strip() or args:
        args.append((start, close))
    return close, args


@dataclass
class CFunction:
    name: str
    head: str  # qualifiers and return type, as written (one line)
    params: str  # as written
    kind: str  # "global", "device" or "host"
    start: int  # where the declaration begins (after any template<> line it includes)
    name_start: int
    body: Optional[tuple[int, int]]  # offsets of "{" and its "}"
    scope: tuple[str, ...]  # enclosing namespace / extern "C" blocks

    @property
    def is_definition(self) -> bool:
        return self.body is not None

    @property
    def is_template(self) -> bool:
        return bool(re.search(r"\btemplate\b", self.head))

    @property
    def is_static(self) -> bool:
        return bool(re.search(r"\bstatic\b", self.head))

    @property
    def exportable(self) -> bool:
        """A host function torch's generated binding can name: global scope, not a template, not static."""
        return self.kind == "host" and not self.scope and not self.is_template and not self.is_static \
            and "::" not in self.name and self.name != "main"

    def return_type(self) -> str:
        words = re.sub(r'\bextern\s*"C"|\b(?:inline|__forceinline__|__host__|__noinline__|static|constexpr)\b',
                       " ", self.head)
        return " ".join(words.split())


def scan_functions(src: str) -> list[CFunction]:
    """Functions declared or defined at namespace level (not inside classes or other functions)."""
    masked = mask(src)
    found: list[CFunction] = []
    stack: list[str] = []  # "ns", "extern", "func", "other"
    chunk_start = 0
    for m in re.finditer(r"[{};]", masked):
        ch = m.group()
        if any(kind not in ("ns", "extern") for kind in stack):
            if ch == "{":
                stack.append("other")
            elif ch == "}":
                stack.pop()
                if all(kind in ("ns", "extern") for kind in stack):
                    chunk_start = m.end()
            continue
        chunk = masked[chunk_start:m.start()]
        scope = tuple(kind for kind in stack)
        if ch == "{":
            kind = _block_kind(chunk)
            if kind == "func":
                fn = _function(src, masked, chunk_start, m.start(), scope)
                if fn is not None:
                    close = match_close(masked, m.start())
                    fn.body = (m.start(), close if close is not None else len(src) - 1)
                    found.append(fn)
                else:
                    kind = "other"
            stack.append(kind)
        elif ch == "}":
            if stack:
                stack.pop()
        else:
            fn = _function(src, masked, chunk_start, m.start(), scope)
            if fn is not None:
                found.append(fn)
        chunk_start = m.end()
    return found


def _block_kind(chunk: str) -> str:
    text = chunk.strip()
    if re.fullmatch(r"(?:inline\s+)?namespace(?:\s+[\w:]+)?", text):
        return "ns"
    if re.fullmatch(r'extern\s*"\s*"', text):
        return "extern"
    if re.search(r"\)\s*(?:const|noexcept|override|final|->[^{]*|\s)*$", text):
        return "func"
    return "other"


def _function(src: str, masked: str, a: int, b: int, scope: tuple[str, ...]) -> Optional[CFunction]:
    chunk = _ATTRIBUTES.sub(lambda m: " " * len(m.group()), masked[a:b])
    open_rel = chunk.find("(")
    if open_rel < 0:
        return None
    m = re.search(r"([A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*)\s*$", chunk[:open_rel])
    if m is None:
        return None
    head = chunk[:m.start()]
    name = re.sub(r"\s+", "", m.group(1))
    close_rel = match_close(chunk, open_rel)
    if close_rel is None or not _TAIL.fullmatch(chunk[close_rel + 1:]):
        return None
    words = re.findall(r"[A-Za-z_]\w*", head)
    if not words or "=" in head or "(" in head or name.split("::")[-1] in CONTROL_WORDS \
            or words[-1] in CONTROL_WORDS or re.search(r"\b(?:struct|class|enum|union|typedef|using)\b", head):
        return None
    start = a + len(chunk) - len(chunk.lstrip())
    head_text = " ".join(src[start:a + m.start()].split())
    kind = "global" if "__global__" in head else "device" if ("__device__" in head and "__host__" not in head) \
        else "host"
    return CFunction(name=name, head=head_text, params=src[a + open_rel + 1:a + close_rel], kind=kind, start=start,
                     name_start=a + m.start(), body=None, scope=scope)


@dataclass
class Param:
    type: str  # normalised, e.g. "const float*" or "int"
    name: str
    pointer: bool
    base: str  # the element or scalar type: "float", "int64_t"


def parse_params(params: str) -> Optional[list[Param]]:
    """Simple parameter lists only (`const float* __restrict__ x, int n`): None for anything else."""
    text = " ".join(params.split())
    if text in ("", "void"):
        return []
    out = []
    for raw in text.split(","):
        raw = raw.split("=")[0].strip()
        m = re.fullmatch(r"((?:const\s+|unsigned\s+|signed\s+)*)([A-Za-z_][\w:]*(?:\s+(?:int|long))*)\s*"
                         r"((?:\*|\s|const\b|__restrict__\b|__restrict\b)*)\s*([A-Za-z_]\w*)", raw)
        if m is None:
            return None
        quals, base, stars, name = m.groups()
        pointer = stars.count("*")
        if pointer > 1:
            return None
        base = " ".join((quals.replace("const", "") + " " + base).split())
        const = "const" in quals
        out.append(Param(type=("const " if const else "") + base + ("*" if pointer else ""), name=name,
                         pointer=bool(pointer), base=base))
    return out


@dataclass
class Include:
    start: int  # the whole line, newline included
    end: int
    header: str
    quoted: bool


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?P<open>[<"])(?P<path>[^>"\n]+)[>"][^\n]*(?:\n|$)', re.M)


def includes(src: str) -> list[Include]:
    masked = mask(src, strings=False, preprocessor=False)  # comments only: include paths are quoted
    return [Include(m.start(), m.end(), m.group("path").strip(), m.group("open") == '"')
            for m in _INCLUDE.finditer(masked)]


def pybind_blocks(src: str) -> list[tuple[int, int]]:
    """(start, end) of each PYBIND11_MODULE(...) { ... } block, whole lines."""
    masked = mask(src)
    out = []
    for m in re.finditer(r"\bPYBIND11_MODULE\s*\(", masked):
        close = match_close(masked, m.end() - 1)
        brace = masked.find("{", close) if close is not None else -1
        if brace < 0 or masked[close + 1:brace].strip():
            continue
        end = match_close(masked, brace)
        if end is None:
            continue
        start = src.rfind("\n", 0, m.start()) + 1
        if src[start:m.start()].strip():
            start = m.start()
        end += 1
        while end < len(src) and src[end] in " \t;":
            end += 1
        if end < len(src) and src[end] == "\n":
            end += 1
        out.append((start, end))
    return out


def defines_name(sources: list[str], name: str) -> bool:
    """`name` is given a meaning somewhere in the sources: a function, a macro, a variable or lambda."""
    for src in sources:
        if any(f.name.split("::")[-1] == name for f in scan_functions(src)):
            return True
        if re.search(rf"^[ \t]*#[ \t]*define[ \t]+{re.escape(name)}\b", src, re.M):
            return True
        masked = mask(src)
        for m in re.finditer(rf"(?<![\w.>:])(?:\w+::)*{re.escape(name)}\b", masked):
            after = masked[m.end():].lstrip()
            if not after.startswith("("):
                return True  # a variable, a lambda, a type: not an undefined function
            before = masked[:m.start()].rstrip()
            prev = re.search(r"([A-Za-z_]\w*)$", before)
            if prev and prev.group(1) not in CONTROL_WORDS:
                return True  # `float relu(` inside a struct or a nested declaration
    return False
