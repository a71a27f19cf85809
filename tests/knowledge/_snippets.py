"""The code in our notes, taken out so that tests can compile and run it.

A note's fenced blocks tagged `cpp`, `cuda` or `python` are code we vouch for; `text` blocks (wrong
code shown as an example of an error, command lines) are not checked. Python blocks that call
`load_inline` are read statically (AST) to get their C++/CUDA source strings and arguments, so the
sources can be compiled without running the program; blocks with `if __name__ == "__main__":` are
complete programs that check themselves and can be run as they are.

Compiling many sources that include torch's headers is slow (a minute or more each on two cores),
so `translation_unit` puts several sources into one file, each in its own namespace and with a
`#line` directive that points compiler messages at the note's own file and line.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
NOTES_DIR = REPO / "kernelwright" / "knowledge" / "notes"

_LANGS = {"cpp": "cpp", "c++": "cpp", "cxx": "cpp", "cuda": "cuda", "cu": "cuda", "python": "python", "py": "python"}
_FENCE_OPEN = re.compile(r"^```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$")
_INCLUDE = re.compile(r"^\s*#\s*include\b.*$")


@dataclass(frozen=True)
class Snippet:
    note_id: str
    ordinal: int  # the block's place among the note's fenced blocks
    lang: str  # cpp | cuda | python | the fence's own tag for anything else
    code: str
    line: int  # the note line of the block's first code line (1-based)

    @property
    def path(self) -> Path:
        return NOTES_DIR / f"{self.note_id}.md"

    @property
    def label(self) -> str:
        return f"{self.note_id}.md:{self.line}"

    @property
    def is_program(self) -> bool:
        """A complete, self-checking program (see the module docstring)."""
        return self.lang == "python" and bool(re.search(r"^if __name__ == ['\"]__main__['\"]:", self.code, re.M))

    @property
    def uses_triton(self) -> bool:
        return self.lang == "python" and bool(re.search(r"^import triton\b", self.code, re.M))

    @property
    def needs_gpu(self) -> bool:
        return self.uses_triton or "cuda_sources" in self.code or '"cuda"' in self.code


def snippets(notes_dir: Path = NOTES_DIR) -> list[Snippet]:
    found: list[Snippet] = []
    for path in sorted(notes_dir.glob("*.md")):
        lines = path.read_text(encoding="utf-8").splitlines()
        ordinal, i = 0, 0
        while i < len(lines):
            m = _FENCE_OPEN.match(lines[i])
            if not m:
                i += 1
                continue
            start = i + 1
            end = start
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            tag = m.group(1).lower()
            found.append(Snippet(note_id=path.stem, ordinal=ordinal, lang=_LANGS.get(tag, tag),
                                 code="\n".join(lines[start:end]) + "\n", line=start + 1))
            ordinal += 1
            i = end + 1
    return found


# --- load_inline calls, read statically --------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One source string given to load_inline, with the note line where its text starts."""

    text: str
    line: int


@dataclass
class LoadInlineCall:
    snippet: Snippet
    keywords: list[str]
    positional: int
    values: dict[str, Any] = field(default_factory=dict)  # the statically known arguments
    cpp_sources: list[Source] = field(default_factory=list)
    cuda_sources: list[Source] = field(default_factory=list)

    @property
    def functions(self) -> list[str]:
        f = self.values.get("functions")
        if f is None:
            return []
        if isinstance(f, str):
            return [f]
        if isinstance(f, dict):
            return list(f)
        return list(f)


def _module_strings(tree: ast.Module) -> dict[str, ast.Constant]:
    out: dict[str, ast.Constant] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            out[node.targets[0].id] = node.value
    return out


def _resolve(node: ast.AST, strings: dict[str, ast.Constant]) -> tuple[Any, list[ast.Constant]]:
    """The value of an argument if it is literal or names a module-level string; with the string
    nodes it came from (for their line numbers)."""
    if isinstance(node, ast.Name) and node.id in strings:
        return strings[node.id].value, [strings[node.id]]
    if isinstance(node, ast.Constant):
        return node.value, [node] if isinstance(node.value, str) else []
    if isinstance(node, (ast.List, ast.Tuple)):
        values, nodes = [], []
        for elt in node.elts:
            v, n = _resolve(elt, strings)
            values.append(v)
            nodes += n
        return values, nodes
    if isinstance(node, ast.Dict):
        return {(_resolve(k, strings)[0] if k else None): _resolve(v, strings)[0]
                for k, v in zip(node.keys, node.values, strict=True)}, []
    return None, []


def load_inline_calls(snippet: Snippet) -> list[LoadInlineCall]:
    if snippet.lang != "python":
        return []
    tree = ast.parse(snippet.code)
    strings = _module_strings(tree)
    calls: list[LoadInlineCall] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name != "load_inline":
            continue
        call = LoadInlineCall(snippet=snippet, keywords=[k.arg or "**" for k in node.keywords],
                              positional=len(node.args))
        for kw in node.keywords:
            if kw.arg is None:
                continue
            value, nodes = _resolve(kw.value, strings)
            call.values[kw.arg] = value
            if kw.arg in ("cpp_sources", "cuda_sources"):
                # a string constant's node.lineno is the line of its opening quotes
                sources = [Source(text=n.value, line=snippet.line + n.lineno - 1) for n in nodes]
                setattr(call, kw.arg, sources)
        calls.append(call)
    return calls


# --- compiling ---------------------------------------------------------------------------------


# Compile flags, include paths and the header stand-in come from kernelwright.evaluate.compile_only:
# the one place that mirrors what torch's own extension build passes.


@dataclass(frozen=True)
class Part:
    """One source for a combined translation unit."""

    text: str
    path: Path  # the note file, for #line
    line: int  # the note line where `text` starts
    namespace: str


def translation_unit(parts: Sequence[Part], prelude: Sequence[str] = (), epilogue: str = "") -> str:
    """Several sources in one file: every #include moves to the top (an include inside a namespace
    would put the header's declarations in it), each source goes in its own namespace, and `#line`
    makes compiler messages name the note and line the code came from. An include line is blanked,
    not removed, so that the lines after it keep their numbers."""
    includes: list[str] = list(prelude)
    bodies: list[str] = []
    for part in parts:
        lines = part.text.split("\n")
        for i, line in enumerate(lines):
            if _INCLUDE.match(line):
                if line.strip() not in includes:
                    includes.append(line.strip())
                lines[i] = ""
        bodies.append(f"namespace {part.namespace} {{\n#line {part.line} \"{part.path}\"\n" + "\n".join(lines) + "\n}\n")
    return "\n".join(includes) + "\n\n" + "\n".join(bodies) + epilogue


def run(cmd: Sequence[str], timeout: float, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    log.info("running: %s", " ".join(cmd))
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout)


def first_errors(output: str, limit: int = 25) -> str:
    """The first lines of a compiler log that name an error, with a little context."""
    lines = output.splitlines()
    keep = [i for i, line in enumerate(lines) if re.search(r"\berror\b", line, re.I)]
    if not keep:
        return "\n".join(lines[-limit:])
    start = max(0, keep[0] - 3)
    return "\n".join(lines[start:start + limit])


def cache_dir() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_TEST_CACHE", Path.home() / ".cache" / "kernelwright" / "tests"))


# torch's build lock (cpp_extension's FileBaton) is a bare file that a killed build leaves behind;
# torch then waits on it forever, in every later run that shares the folder. No test build here lives
# longer than this, so an older lock is a dead build's.
STALE_LOCK_S = 900.0


def extensions_dir() -> Path:
    """The extensions folder shared by test runs (a rerun with unchanged source reuses a build, as a
    user's would), with the locks of builds killed in earlier runs removed."""
    import time

    root = cache_dir() / "torch_extensions"
    for lock in root.glob("*/lock"):
        try:
            if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
                log.warning("removing a dead build's lock %s", lock)
                lock.unlink()
        except OSError:
            pass  # another worker removed it first
    return root


def success_stamp(kind: str, *inputs: str) -> Path:
    """Where a passed compile of exactly these inputs is remembered: the compile is deterministic,
    so a second run with identical sources, flags and compilers need not pay for it again.
    KERNELWRIGHT_TEST_NO_STAMPS=1 ignores the stamps."""
    digest = hashlib.sha256("\0".join(inputs).encode()).hexdigest()[:32]
    return cache_dir() / "notes-compile" / f"{kind}-{digest}.ok"


def stamps_enabled() -> bool:
    return os.environ.get("KERNELWRIGHT_TEST_NO_STAMPS", "") not in ("1", "true", "yes")


def tool_version(tool: str) -> str:
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
