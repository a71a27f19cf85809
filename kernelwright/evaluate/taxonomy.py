"""Turn a build or import failure into a verdict and the few lines worth reading.

A candidate that fails to build failed in one of two ways that matter to us: it used an API, keyword,
header or symbol that does not exist (HALLUCINATED_API, the grounding failure small models make most),
or it wrote code that is wrong in some other way (COMPILE_ERROR). `PATTERNS` is the one table that
decides which; each entry has a short name so the record can say which pattern fired.

The input is whatever the failure left: the exception type and message, and optionally a longer log
(full compiler output from compile-only mode, or torch's "Error building extension" text, which carries
the ninja output). Compiler output is read per compile step (one translation unit each): only the
first error of a step decides, because later errors in the same unit are often consequences of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from kernelwright.records import Verdict

HALLU = Verdict.HALLUCINATED_API
COMPILE = Verdict.COMPILE_ERROR

# gcc quotes names with ASCII quotes under LANG=C and with ‘…’ under a UTF-8 locale.
_Q = "['\u2018\u2019`]"

# Headers that belong to torch or the CUDA toolkit, not to the candidate. A header missing *there*
# (e.g. cusparse.h pulled in by ATen/cuda/CUDAContext.h on a machine with only nvcc, or a header a
# CPU wheel of torch does not ship) is a gap in the environment, not an invented include.
_TOOLCHAIN_DIR = re.compile(r"(?:^|/)torch/include/|/cuda[^/\s]*/(?:targets/[^/\s]+/)?include/|^/usr/include/")

# Where a compiler diagnostic comes from: gcc "file:line:col: error:", nvcc "file(line): error:".
_DIAG_FILE = re.compile(r"^(?P<file>\S+?)(?::\d+(?::\d+)?:|\(\d+\):)\s")

# A line that is a compiler (or linker, or nvcc driver) error.
_COMPILER_ERROR = re.compile(
    r"(?:^|\s)(?:fatal error|catastrophic error|error)\s*:|^nvcc fatal\s*:|undefined reference to|"
    r"undefined symbol:|^collect2: error|cannot find -l"
)
# A Python exception line, as the last line of a traceback or `type: message`.
# `Name: message`, and `Name("message")`: Triton's CompilationError ends its message with the
# repr of the exception its code generator raised, the cause under the source excerpt.
_PY_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)(?::|\(|$)")
# A caret under a column (Triton's and Python's source excerpts): the line above it is the culprit.
_CARET = re.compile(r"^\s*\^+\s*$")
# Lines that start a new compile step in ninja output (torch's path) or our own compile-only log.
_STEP_START = re.compile(r"^\s*(?:\[\d+/\d+\]\s|FAILED:\s|### )")
# Progress and chatter that never helps to find the cause.
_NOISE = re.compile(
    r"^\s*(?:\[\d+/\d+\]|FAILED:|ninja:|### |\$ |In file included from|from \S+:\d+[,:]|compilation terminated|"
    r"\d+ errors? detected in the compilation|Emitting ninja build file|Building extension module|"
    r"Allowing ninja to set|Loading extension module|Using .* as PyTorch extensions root|"
    r"detected during|Traceback \(most recent call last\)|File \"|\^|\|)"
)
_SOURCE_EXTS = (".cpp", ".cu", ".cc", ".cxx", ".c")  # translation units; errors in headers belong to one
_LONG_LINE = 400  # longer lines are shortened to this, or dropped when they are command lines
# A compiler or linker invocation: a long line of flags, never the message a reader needs.
_COMMAND = re.compile(r"(?:^|\s)(?:-I\S|-D\S|-isystem|-o\s|--compiler-options|-fPIC|-std=)")
_CONTEXT_LINES = 3  # source-context lines a compiler prints after an error (code line, caret, hint)


@dataclass(frozen=True)
class Pattern:
    name: str
    verdict: Verdict
    regex: re.Pattern[str]
    # Extra evidence the regex alone cannot carry: (match, diagnostic line, context after it, whole text).
    when: Optional[Callable[[re.Match[str], str, str, str], bool]] = None


def _last_component(name: str) -> str:
    return name.rsplit("::", 1)[-1]


def _used_as_call(m: re.Match[str], line: str, context: str, text: str) -> bool:
    """The undefined name is called (`relu(x)`), not a variable: an invented function."""
    name = re.escape(_last_component(m.group("name")))
    call = re.compile(rf"\b{name}\s*(?:<[^;()]*>)?\s*\(")  # relu(x) or relu<float>(x)
    # The compiler prints the offending source line right after the error; trust it when present.
    if re.search(rf"\b{name}\b", context):
        return bool(call.search(context))
    return bool(call.search(text))


def _bound_by_pybind(m: re.Match[str], line: str, context: str, text: str) -> bool:
    """The undeclared name appears in the generated binding: `functions=[...]` names a missing function."""
    name = re.escape(m.group("name"))
    binding = re.compile(rf"wrap_pybind_function\(\s*{name}\s*\)|m\.def\(\s*\"{name}\"\s*,\s*{name}\b")
    return bool(binding.search(context) or binding.search(text))


def _in_toolchain(m: re.Match[str], line: str, context: str, text: str) -> bool:
    where = _DIAG_FILE.match(line.strip())
    return bool(where and _TOOLCHAIN_DIR.search(where.group("file")))


def _p(name: str, verdict: Verdict, regex: str, when: Optional[Callable[..., bool]] = None) -> Pattern:
    return Pattern(name, verdict, re.compile(regex), when)


_MISSING_HEADER = (
    r"fatal error: (?P<name>[^:\s]+): No such file or directory|"
    r"catastrophic error: cannot open source file \"(?P<name2>[^\"]+)\""
)
_UNDECLARED = rf"error: {_Q}(?P<name>[\w:]+){_Q} was not declared in this scope"
_NAME = rf"{_Q}(?P<name>[\w:]+){_Q}"

# The table. First match wins, so the narrow (environment, binding) cases sit above the broad ones.
PATTERNS: tuple[Pattern, ...] = (
    # --- Python side: the build call or the candidate's imports ---------------------------------
    _p("unexpected_keyword", HALLU, r"got an unexpected keyword argument '(?P<name>\w+)'"),
    # real packages this machine may lack: the environment's gap, not an invented module
    _p("missing_dependency", COMPILE, r"No module named '(?P<name>triton|cupy|numba|pycuda|cutlass|tilelang)'"),
    _p("no_such_module", HALLU, r"No module named '(?P<name>[\w.]+)'"),
    _p("cannot_import_name", HALLU, r"cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)'"),
    _p("module_has_no_attribute", HALLU, r"module '(?P<module>[\w.]+)' has no attribute '(?P<name>\w+)'"),
    _p("tensor_has_no_attribute", HALLU, r"'Tensor' object has no attribute '(?P<name>\w+)'"),
    _p("bad_call_arguments", COMPILE,
       r"missing \d+ required (?:positional|keyword-only) argument|takes (?:from \d+ to )?\d+ positional"),
    # --- compiler side ---------------------------------------------------------------------------
    _p("toolchain_header_missing", COMPILE, _MISSING_HEADER, _in_toolchain),
    _p("missing_header", HALLU, _MISSING_HEADER),
    _p("pybind_unbound_function", HALLU, _UNDECLARED, _bound_by_pybind),
    _p("undeclared_function", HALLU, _UNDECLARED, _used_as_call),
    _p("undefined_function", HALLU, r"error: identifier \"(?P<name>\w+)\" is undefined", _used_as_call),
    _p("no_such_member", HALLU,
       rf"has no member named {_Q}\w+{_Q}|has no member \"\w+\"|no member named {_Q}\w+{_Q}"),
    _p("not_a_member", HALLU, rf"{_NAME} is not a member of {_Q}[\w:]+{_Q}"),
    _p("not_a_type_in_namespace", HALLU, rf"{_NAME} in namespace {_Q}[\w:]+{_Q} does not name a type"),
    _p("undeclared_qualifier", HALLU,
       rf"{_NAME} (?:is not a namespace-name|has not been declared)|name must be a namespace name"),
    _p("undeclared_name", COMPILE, r"was not declared in this scope|identifier \"\w+\" is undefined"),
    _p("link_error", COMPILE, r"undefined reference to|undefined symbol:"),
    _p("compiler_flags", COMPILE, r"^nvcc fatal|unrecognized command[- ]line option|Unknown option"),
    _p("syntax_error", COMPILE,
       r"error: expected|does not name a type|error: stray|error: unexpected|missing terminating"),
    _p("type_error", COMPILE,
       r"cannot convert|no matching function|no instance of|invalid conversion|incompatible|no suitable"),
)


def _unglue(text: str) -> str:
    """torch puts the whole ninja log on the first line of its "Error building extension" message."""
    return text.replace(": [1/", ":\n[1/")


def _error_lines(text: str) -> list[tuple[str, str]]:
    """The first compiler error of each compile step, with the context lines printed after it.

    A step starts at a ninja or compile-only step line, or where errors move to another source file
    (main.cpp -> cuda.cu): the distilled message keeps no step lines, only the errors of each file.
    """
    lines = _unglue(text).splitlines()
    found: list[tuple[str, str]] = []
    step_has_error, unit = False, None
    for i, line in enumerate(lines):
        if _STEP_START.match(line):
            step_has_error, unit = False, None
            continue
        if len(line) > _LONG_LINE or not _COMPILER_ERROR.search(line):
            continue
        where = _DIAG_FILE.match(line.strip())
        source = where.group("file") if where and where.group("file").endswith(_SOURCE_EXTS) else None
        if source and source != unit:
            if unit is not None:  # errors moved on to another translation unit
                step_has_error = False
            unit = source
        if step_has_error:
            continue
        step_has_error = True
        found.append((line.strip(), "\n".join(lines[i + 1 : i + 1 + _CONTEXT_LINES])))
    return found


def _match(line: str, context: str, text: str) -> Optional[Pattern]:
    for pattern in PATTERNS:
        m = pattern.regex.search(line)
        if m is None:
            continue
        if pattern.when is not None and not pattern.when(m, line, context, text):
            continue
        return pattern
    return None


def explain(exc_type: str, message: str, log: str = "") -> tuple[Verdict, Optional[str]]:
    """The verdict for a failed build or import, and the name of the pattern that decided it.

    The name is None when no pattern matched (the verdict is then COMPILE_ERROR).
    """
    text = f"{message}\n{log}" if log else message
    errors = _error_lines(text)
    if errors:
        decided = [_match(line, context, text) for line, context in errors]
        for pattern in decided:
            if pattern is not None and pattern.verdict is HALLU:
                return HALLU, pattern.name
        first = next((p for p in decided if p is not None), None)
        return COMPILE, first.name if first else None
    # No compiler output: a Python exception from the build call or an import.
    candidates = [f"{exc_type}: {message}"] + [ln.strip() for ln in log.splitlines() if _PY_EXCEPTION.match(ln.strip())]
    for line in candidates:
        pattern = _match(line, "", text)
        if pattern is not None:
            return pattern.verdict, pattern.name
    return COMPILE, None


# A build's own words for a full disk. Only the trusted builder's failure text is read with it (a
# failure that says so is not kept as the arguments' own: buildcache.record_failures); whether the
# machine's disk is full is never decided from text (evaluate/diskroom.py).
_DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded|\[Errno (?:28|122)\]")


def is_disk_full(text: str) -> bool:
    return _DISK_FULL.search(text) is not None


def classify_build_failure(exc_type: str, message: str, log: str = "") -> Verdict:
    """COMPILE_ERROR or HALLUCINATED_API for a failure to build or import a candidate."""
    return explain(exc_type, message, log)[0]


# Paths a reader does not need: the build directory in front of load_inline's own files, and the
# install prefix in front of torch's headers.
_BUILD_FILE = re.compile(r"(?<![\w.])/(?:[^\s:()'\"/]+/)+(?=(?:main\.cpp|cuda\.cu)\b)")
_TORCH_PREFIX = re.compile(r"(?<![\w.])/\S*?/(?=torch/include/)")


def _shorten(line: str) -> str:
    return _TORCH_PREFIX.sub("", _BUILD_FILE.sub("", line))


def _is_relevant(line: str) -> bool:
    return bool(_COMPILER_ERROR.search(line) or _PY_EXCEPTION.match(line))


def _source_context(lines: list[str], i: int) -> Optional[str]:
    """The offending code line a compiler prints under an error (gcc: `  10 | code`, nvcc: indented)."""
    if i + 1 >= len(lines):
        return None
    nxt = lines[i + 1]
    gutter = re.match(r"^\s*\d+\s*\|\s?(.*)$", nxt)
    if gutter:
        return "    " + gutter.group(1).strip()
    if nxt.startswith((" ", "\t")) and nxt.strip() and not re.match(r"^\s*[\^~|]", nxt) and not _NOISE.match(nxt):
        return "    " + nxt.strip()
    return None


def first_relevant_lines(text: str, max_lines: int = 12) -> str:
    """The lines a human or a model needs to see to fix the failure, in order, without noise.

    Keeps compiler errors (with file:line and the offending code line under each), fatal errors and
    Python exception lines; drops ninja progress, include chains, command lines and duplicates, and
    the build directory in front of main.cpp / cuda.cu. When nothing looks like an error, falls back
    to the last meaningful lines, and when nothing is meaningful, to the first line, shortened: the
    text is never empty while there is any.
    """
    lines = _unglue(text).splitlines()
    kept: list[str] = []
    seen: set[str] = set()

    def keep(line: str) -> None:
        if line not in seen and len(kept) < max_lines:
            seen.add(line)
            kept.append(line)

    for i, raw in enumerate(lines):
        line = _fit(raw.rstrip())
        if line is None or not line.strip():
            continue
        if _is_relevant(line.strip()):
            keep(_shorten(line.strip()))
            context = _source_context(lines, i)
            if context:
                keep(context)
        elif _CARET.match(line) and i > 0 and lines[i - 1].strip():
            keep("    " + lines[i - 1].strip())
    if kept:
        return "\n".join(kept)
    fitted = [_fit(ln) for ln in lines]
    tail = [ln.strip() for ln in fitted if ln is not None and ln.strip() and not _NOISE.match(ln)]
    unique = list(dict.fromkeys(tail))
    if unique:
        return "\n".join(unique[-max_lines:])
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    return _shorten_to_fit(first)


def _fit(line: str) -> Optional[str]:
    """A line as a reader should get it: a long message shortened (an out-of-memory message runs
    to 600 characters on one line, and its start says what happened), a long command line dropped."""
    if len(line) <= _LONG_LINE:
        return line
    if _COMMAND.search(line):
        return None
    return _shorten_to_fit(line)


def _shorten_to_fit(line: str) -> str:
    return line if len(line) <= _LONG_LINE else line[: _LONG_LINE - 1].rstrip() + "…"
