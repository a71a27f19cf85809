"""API grounding: check a candidate against the APIs that are really installed, before any compile,
and apply deterministic repairs.

Small models fail mostly on grounding: they call `relu()` in device code, pass `sources=` to
load_inline, include files that do not exist, swap the C++ and CUDA sources, bind `__global__`
kernels, call `torch.cuda.jit.script`, leave demo code that crashes at import. Every rule below
checks one such thing against the installed torch, CUDA toolkit and compiler wherever they can answer
(the exceptions are two tables: the device functions CUDA lacks, and a bundled Triton name list used
only when triton is not installed), repairs it when exactly one repair is right, and otherwise says
precisely what is wrong. Repairs are text edits of the candidate's own source: `original` and `code`
are both kept, and every change has its `Repair` entry.

`ground()` never raises: unparsable input yields one `syntax` finding and no repairs; a rule that
fails internally is skipped (logged, and noted as a warning).
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, Field

from kernelwright import pyast
from kernelwright.grounding import ext_rules as ext
from kernelwright.grounding import python_rules as py
from kernelwright.grounding import source_rules as src
from kernelwright.grounding.rule import Note, Pass
from kernelwright.grounding.text import Code, LineMap, apply_edits
from kernelwright.records import Finding

log = logging.getLogger(__name__)

TARGETS = ("cuda", "cpp", "triton")
# The longest program grounding reads. Its C++ scanners are linear but walk the text once per rule
# (about 1.4 s of CPU for 100 KB), and a model's answer is a few KB (max_tokens); a longer text is
# judged as written, ungrounded, rather than costing the caller seconds it chose.
MAX_GROUNDED_CHARS = 32_000
ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class GroundingRule:
    name: str
    item: int  # the numbered check of the grounding spec it implements
    kind: str  # "repair" (repairs when unambiguous, else reports) or "check" (reports only)
    description: str


RULES: dict[str, GroundingRule] = {r.name: r for r in (
    GroundingRule("syntax", 10, "check", "the Python must parse; a truncated answer (unterminated string, a loop of "
                  "near-identical lines) is named as such; nothing else runs on unparsable code"),
    GroundingRule("duplicate_modelnew", 10, "repair", "ModelNew defined more than once: keep the last (what Python "
                  "would use)"),
    GroundingRule("example_usage", 9, "repair", "module-level demo code after the model classes (calls to undefined "
                  "get_inputs/get_init_inputs, model instantiation, print, test functions, code using their results) "
                  "and `if __name__ == '__main__':` blocks are removed"),
    GroundingRule("missing_imports", 8, "repair", "a standard name used but never imported (load_inline, torch, nn, "
                  "F, triton, tl, math) gets its conventional import"),
    GroundingRule("load_inline_keywords", 1, "repair", "load_inline arguments against the installed signature: "
                  "invented keywords mapped (sources= by content), unknown ones without code dropped, sources passed "
                  "positionally moved to keywords, a missing or invalid name= supplied, functions= made a list of "
                  "strings"),
    GroundingRule("source_placement", 2, "repair", "CUDA code belongs in cuda_sources: swapped sources swapped back, "
                  "kernels only in cpp_sources moved (target cuda), duplicate copies of a source dropped, a missing "
                  "cpp_sources added"),
    GroundingRule("pybind_module", 4, "repair", "a PYBIND11_MODULE block while functions= is given is removed"),
    GroundingRule("includes", 5, "repair", "each #include must exist in torch's, the CUDA toolkit's or the "
                  "compiler's include paths: local and nonexistent headers removed, THC mapped to ATen, repeats "
                  "removed"),
    GroundingRule("python_api_in_cxx", 6, "repair", "Python spellings in C++ host code: torch.relu( -> "
                  "torch::relu( (when ATen has the op), torch.float32 -> torch::kFloat32, t.shape[i] -> t.size(i)"),
    GroundingRule("device_functions", 6, "repair", "functions CUDA lacks called in device code (relu, sigmoid, "
                  "gelu, silu/swish, relu6, also torch::/at:: spelled) rewritten for float kernels when the sources "
                  "define no such name"),
    GroundingRule("exported_functions", 3, "repair", "functions= names must be host functions in the sources: a "
                  "missing or unusable list is filled when exactly one candidate exists; one unknown name is renamed "
                  "to the one unlisted host function"),
    GroundingRule("host_launcher", 3, "repair", "a __global__ kernel in functions= gets a generated host launcher "
                  "when it is unambiguously 1-D elementwise; otherwise a precise finding"),
    GroundingRule("prototypes", 3, "repair", "every exported function defined in cuda_sources gets its prototype in "
                  "cpp_sources, where torch's generated bindings are compiled"),
    GroundingRule("extension_calls", 8, "repair", "ext.f(...) must name an exported function (one mismatch with one "
                  "export is renamed); a bare call of an unbound name one extension exports becomes ext.f(...); "
                  "argument counts against the C++ signature and .data_ptr() passed for a tensor are reported"),
    GroundingRule("load_inline_misuse", 1, "check", "load_inline as a decorator, file names or non-code as sources, "
                  "builds inside functions"),
    GroundingRule("python_api", 7, "check", "torch.* / triton.* / tl.* attribute chains and imports that do not "
                  "exist in the installed modules (or, without triton, the bundled name list)"),
    GroundingRule("undefined_names", 8, "check", "names used but never bound in the module (NameError at run time)"),
    GroundingRule("modelnew", 10, "check", "a ModelNew class exists and is not rebound after its definition"),
)}

# The passes in the order they run; each reparses the code the previous one left. Later passes rely on
# earlier ones (the C++ rules need load_inline's arguments in their real places).
PASSES: tuple[tuple[str, Callable[[Pass], None]], ...] = (
    ("duplicate_modelnew", py.rule_duplicate_modelnew),
    ("example_usage", py.rule_example_usage),
    ("missing_imports", py.rule_missing_imports),
    ("load_inline_keywords", ext.rule_keywords),
    ("source_placement", ext.rule_duplicate_sources),
    ("source_placement", ext.rule_placement),
    ("pybind_module", src.rule_pybind),
    ("includes", src.rule_includes),
    ("python_api_in_cxx", src.rule_python_api_in_cxx),
    ("device_functions", src.rule_device_functions),
    ("exported_functions", src.rule_exported),
    ("extension_calls", py.rule_extension_calls),
    ("extension_calls", py.rule_extension_arguments),
    ("load_inline_misuse", ext.rule_misuse),
    ("python_api", py.rule_python_api),
    ("undefined_names", py.rule_undefined_names),
    ("modelnew", py.rule_modelnew),
)


class Repair(BaseModel):
    rule: str
    message: str
    line: Optional[int] = None  # in `original`


class GroundingReport(BaseModel):
    """What grounding did to one candidate. Line numbers refer to `original`."""

    original: str
    code: str  # after the repairs (== original when nothing changed)
    target: str = "cuda"
    repairs: list[Repair] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)  # "error": left unrepaired; "warning": otherwise

    @property
    def changed(self) -> bool:
        return self.code != self.original

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    def feedback(self) -> str:
        """A short message for the model: what was repaired, what is still wrong and how to fix it."""
        out: list[str] = []
        if self.repairs:
            out.append("Repaired automatically (checked against the installed torch and CUDA):")
            out += [f"- {_where(r.line)}{r.message}" for r in self.repairs]
        if self.errors:
            out.append("Still wrong; fix these:")
            out += [f"- {_where(f.line)}{f.message}" for f in self.errors]
        repaired = {(r.rule, r.message) for r in self.repairs}
        notes = [f for f in self.findings if f.severity == WARNING and (f.rule, f.message) not in repaired]
        if notes:
            out.append("Also note:")
            out += [f"- {_where(f.line)}{f.message}" for f in notes]
        return "\n".join(out)


def _where(line: Optional[int]) -> str:
    return f"line {line}: " if line else ""


def ground(code: str, target: str = "cuda") -> GroundingReport:
    """Check `code` (Python source, already extracted) against the installed APIs and repair what is
    unambiguous. Never raises."""
    text = code if isinstance(code, str) else ("" if code is None else str(code))
    if len(text) > MAX_GROUNDED_CHARS:
        return GroundingReport(original=text, code=text, target=str(target), findings=[Finding(
            rule="grounding_skipped", severity=WARNING,
            message=f"grounding skipped: {len(text)} characters, more than {MAX_GROUNDED_CHARS}")])
    try:
        return _ground(text, target if target in TARGETS else "cuda", target)
    except Exception as e:  # noqa: BLE001 - grounding must never stop an evaluation
        log.exception("grounding failed")
        return GroundingReport(original=text, code=text, target=str(target), findings=[Finding(
            rule="grounding_internal", severity=WARNING, message=f"grounding skipped: {type(e).__name__}: {e}")])


def _ground(text: str, target: str, asked: str) -> GroundingReport:
    report = GroundingReport(original=text, code=text, target=target)
    if asked != target:
        report.findings.append(Finding(rule="grounding_internal", severity=WARNING,
                                       message=f"unknown target {asked!r}; grounded for {target!r}"))
    tree, problem = _parse(text)
    if tree is None:
        report.findings.append(problem)  # type: ignore[arg-type]
        return report
    lines = LineMap(text)
    current = text
    seen: set[tuple[str, str, Optional[int], bool]] = set()
    for label, run in PASSES:
        p = Pass(Code(current, tree), target)
        try:
            run(p)
        except Exception as e:  # noqa: BLE001 - one broken rule must not take the others down
            log.warning("grounding rule %s failed: %s", label, e, exc_info=log.isEnabledFor(logging.DEBUG))
            report.findings.append(Finding(rule="grounding_internal", severity=WARNING,
                                           message=f"rule {label} skipped: {type(e).__name__}: {e}"))
            continue
        new_text, applied = apply_edits(current, p.all_edits())
        new_tree = tree
        if applied:
            new_tree, _ = _parse(new_text)
            if new_tree is None:  # a bug in a repair must never hand back broken Python
                log.warning("grounding rule %s produced unparsable code; its edits were discarded", label)
                report.findings.append(Finding(rule="grounding_internal", severity=WARNING,
                                               message=f"rule {label}: repair discarded (it broke the Python)"))
                p.notes = [n for n in p.notes if not n.repaired]
                applied, new_text, new_tree = [], current, tree
        for note in p.notes:
            _record(report, note, lines, seen)
        if applied:
            lines.update(applied)
            current, tree = new_text, new_tree
    report.code = current
    return report


def _record(report: GroundingReport, note: Note, lines: LineMap, seen: set) -> None:
    line = lines.original_line(note.at) if note.at is not None else None
    key = (note.rule, note.message, line, note.repaired)
    if key in seen:
        return
    seen.add(key)
    if note.repaired:
        report.repairs.append(Repair(rule=note.rule, message=note.message, line=line))
        report.findings.append(Finding(rule=note.rule, severity=WARNING, message=note.message, line=line))
    else:
        report.findings.append(Finding(rule=note.rule, severity=note.severity, message=note.message, line=line))


def _parse(text: str) -> tuple[Optional[ast.Module], Optional[Finding]]:
    try:
        return pyast.parse(text), None
    except SyntaxError as e:
        return None, Finding(rule="syntax", severity=ERROR, message=_syntax_message(text, e), line=e.lineno)
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:  # null bytes, absurd nesting
        return None, Finding(rule="syntax", severity=ERROR, message=f"the code cannot be parsed ({type(e).__name__})")


def _syntax_message(text: str, e: SyntaxError) -> str:
    msg = e.msg or "invalid syntax"
    loop = _repeated_run(text)
    truncated = re.search(r"unterminated|was never closed|unexpected EOF|EOF while", msg)
    if truncated or loop:
        what = f"the code is cut off ({msg}, line {e.lineno})"
        if loop:
            what += f"; lines {loop[0]}-{loop[1]} are a run of near-identical lines (a generation loop)"
        return what + ": write the complete program, once, without repeating lines"
    return f"SyntaxError: {msg} (line {e.lineno}); nothing was repaired"


def _repeated_run(text: str, prefix: int = 20, minimum: int = 8) -> Optional[tuple[int, int]]:
    """The longest run of >= `minimum` consecutive lines sharing their first `prefix` characters."""
    best: Optional[tuple[int, int]] = None
    start, key = 0, None
    lines = text.splitlines() + [""]
    for i, line in enumerate(lines):
        k = line.strip()[:prefix] if len(line.strip()) >= prefix else None
        if k != key or k is None:
            if key is not None and i - start >= minimum and (best is None or i - start > best[1] - best[0] + 1):
                best = (start + 1, i)
            start, key = i, k
    return best
