"""Grounding rules on the C++/CUDA text handed to load_inline: PYBIND11_MODULE blocks, #includes,
Python spellings, functions CUDA lacks, and `functions=` against what the sources define (renames,
prototypes, generated launchers).

Every change is an edit of the string literal the source comes from (see grounding_literals); a source
that is not a plain literal is reported instead.
"""

from __future__ import annotations

import ast
import os
import re
from typing import Optional

from kernelwright.grounding import env
from kernelwright.grounding.calls import (
    Functions,
    InlineCall,
    Item,
    all_sources,
    append_keyword,
    functions_arg,
    inline_calls,
)
from kernelwright.grounding.cxx import (
    CFunction,
    balanced,
    defines_name,
    includes,
    is_cuda,
    mask,
    pybind_blocks,
    scan_functions,
)
from kernelwright.grounding.kernels import (
    DEVICE_FLOAT_FUNCTIONS,
    device_function_fixes,
    elementwise_launcher,
    kernel_name_uses,
    prototype,
    python_api_fixes,
)
from kernelwright.grounding.literals import Resolved, py_string
from kernelwright.grounding.rule import Pass
from kernelwright.grounding.text import Edit

# Legacy THC headers (removed from torch in 1.11) -> what replaced them.
THC_REPLACEMENTS = {"THC/THCAtomics.cuh": "ATen/cuda/Atomic.cuh", "THC/THCDeviceUtils.cuh": "ATen/cuda/DeviceUtils.cuh"}
THC_DEFAULT = "ATen/cuda/CUDAContext.h"
# torch headers a CPU wheel may lack although a CUDA wheel has them: not judged on a CPU build.
_CUDA_ONLY_TORCH = ("ATen/cuda/", "c10/cuda/", "ATen/native/cuda/", "ATen/cudnn/", "c10/cuda/impl/")


def _each_source(p: Pass, structural: bool = False):
    """Calls with readable sources. `structural` rules (which read functions out of the sources) skip a
    call whose sources have unbalanced brackets; rule_exported reports those once."""
    for call in inline_calls(p):
        pairs = all_sources(p, call)
        if pairs and (not structural or all(balanced(r.text) for _, r in pairs)):
            yield call, pairs


def rule_pybind(p: Pass) -> None:
    for call, pairs in _each_source(p):
        if functions_arg(p, call).kind == "missing":
            continue
        for key, res in pairs:
            for a, b in pybind_blocks(res.text):
                at = p.source_offset(res, a)
                if p.literals.add(res, a, b, ""):
                    p.repaired("pybind_module", f"removed the PYBIND11_MODULE block from {key}: with functions= "
                               "torch generates the bindings itself (two would clash)", at)
                else:
                    p.problem("pybind_module", f"remove the PYBIND11_MODULE block from {key}: with functions= torch "
                              "generates the bindings", at)


def rule_includes(p: Pass) -> None:
    for call, pairs in _each_source(p):
        extra = _extra_include_paths(p, call)
        if extra is None:
            continue  # include paths we cannot read: no header can be judged missing
        has_cuda = any(k == "cuda_sources" and r.text.strip() for k, r in pairs) or p.target == "cuda"
        dirs = env.include_dirs(has_cuda, tuple(extra))
        for key, res in pairs:
            _fix_includes(p, key, res, dirs)


def _extra_include_paths(p: Pass, call: InlineCall) -> Optional[list[str]]:
    """extra_include_paths plus any -I/-isystem in the compiler flags; None when any of them is unreadable."""
    dirs: list[str] = []
    for key in ("extra_include_paths", "extra_cflags", "extra_cuda_cflags"):
        expr = call.bound.get(key)
        if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
            continue
        res = p.resolver.sources(expr)
        if res is None or not all(r.complete for r in res):
            return None
        values = [r.text for r in res]
        if key == "extra_include_paths":
            dirs += values
            continue
        words = [w for v in values for w in v.split()]
        for k, word in enumerate(words):
            if word in ("-I", "-isystem") and k + 1 < len(words):
                dirs.append(words[k + 1])
            elif word.startswith("-I") and len(word) > 2:
                dirs.append(word[2:])
            elif word.startswith("-isystem") and len(word) > len("-isystem"):
                dirs.append(word[len("-isystem"):])
    return dirs


def _fix_includes(p: Pass, key: str, res: Resolved, dirs: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for inc in includes(res.text):
        at = p.source_offset(res, inc.start)
        line = res.text[inc.start:inc.end].strip()
        if inc.header in seen:
            _edit(p, res, inc.start, inc.end, "", "includes", f"removed a repeated `{line}` from {key}", at)
            continue
        seen.add(inc.header)
        if inc.header.startswith("THC/"):
            new = THC_REPLACEMENTS.get(inc.header, THC_DEFAULT)
            repl = "" if new in seen else f"#include <{new}>\n"
            seen.add(new)
            _edit(p, res, inc.start, inc.end, repl, "includes", f"`{line}`: THC was removed from torch (1.11); "
                  + (f"replaced by <{new}>" if repl else f"<{new}> is already included"), at)
            continue
        if env.find_header(inc.header, dirs):
            continue
        if inc.header.startswith(_CUDA_ONLY_TORCH) and not env.torch_is_cuda_build():
            continue  # a CUDA wheel may ship it; this CPU build cannot tell
        kind = "a local file that does not exist (load_inline compiles only the strings it is given)" if inc.quoted \
            else "not in torch, the CUDA toolkit or the system include paths"
        _edit(p, res, inc.start, inc.end, "", "includes", f"removed `{line}` from {key}: {kind}"
              + ("" if inc.quoted else _header_hint(inc.header, dirs)), at)


def _header_hint(header: str, dirs: tuple[str, ...]) -> str:
    close = env.similar_header(header, dirs)
    if close:
        return f"; the closest existing header is <{close}>"
    present = env.folder_headers(header, dirs)
    if not present:
        return ""
    shown = ", ".join(present[:8]) + (", ..." if len(present) > 8 else "")
    return f"; {os.path.dirname(header)}/ holds {shown}"


def _edit(p: Pass, res: Resolved, a: int, b: int, text: str, rule: str, message: str, at: int) -> bool:
    if p.literals.add(res, a, b, text):
        p.repaired(rule, message, at)
        return True
    p.problem(rule, message.replace("removed", "remove", 1).replace("replaced", "replace", 1)
              + " (not repaired: the source is not a plain string literal)", at)
    return False


def rule_python_api_in_cxx(p: Pass) -> None:
    for _, pairs in _each_source(p, structural=True):
        for _, res in pairs:
            fixes, problems = python_api_fixes(res.text)
            for fix in fixes:
                _edit(p, res, fix.start, fix.end, fix.text, "python_api_in_cxx", fix.message,
                      p.source_offset(res, fix.at))
            for prob in problems:
                p.problem("python_api_in_cxx", prob.message, p.source_offset(res, prob.at or 0))


def rule_device_functions(p: Pass) -> None:
    for _, pairs in _each_source(p, structural=True):
        texts = [r.text for _, r in pairs]
        complete = all(r.complete for _, r in pairs)
        defined = {n for n in DEVICE_FLOAT_FUNCTIONS if defines_name(texts, n)}
        for _, res in pairs:
            fixes, problems = device_function_fixes(res.text, defined)
            for fix in fixes:
                at = p.source_offset(res, fix.at)
                if not complete:
                    p.problem("device_functions", fix.message.split(":")[0] + " (not rewritten: part of the "
                              "sources could not be read, so a definition may exist)", at)
                else:
                    _edit(p, res, fix.start, fix.end, fix.text, "device_functions", fix.message, at)
            for prob in problems:
                p.problem("device_functions", prob.message, p.source_offset(res, prob.at or 0))


def rule_exported(p: Pass) -> None:
    for call, pairs in _each_source(p):
        if call.starred or not all(r.complete for _, r in pairs):
            continue
        broken = [key for key, r in pairs if not balanced(r.text)]
        if broken:
            p.problem("exported_functions", f"{broken[0]} has unbalanced braces or parentheses (cut off, or a "
                      "stray bracket), so its functions cannot be read; fix the C++ first", p.at(call.node))
            continue
        _check_exports(p, call, pairs)


def _check_exports(p: Pass, call: InlineCall, pairs: list[tuple[str, Resolved]]) -> None:
    at = p.at(call.node)
    texts = [r.text for _, r in pairs]
    if p.target != "cpp" and any(k == "cpp_sources" and is_cuda(r.text) for k, r in pairs):
        return  # CUDA code left in cpp_sources (see source_placement): which function is which is unclear
    found = [(key, res, fn) for key, res in pairs for fn in scan_functions(res.text)]
    hosts = sorted({fn.name for _, _, fn in found if fn.exportable and fn.is_definition})
    kernels = sorted({fn.name for _, _, fn in found if fn.kind == "global" and fn.is_definition})
    funcs = functions_arg(p, call)
    names = _settle_function_list(p, call, funcs, hosts, kernels, texts)
    if names is None:
        return
    has_cuda = any(k == "cuda_sources" and r.text.strip() for k, r in pairs)
    cpp_texts = [r.text for k, r in pairs if k == "cpp_sources"]
    protos: list[str] = []
    for name in names:
        host = next((fn for k, r, fn in found if fn.name == name and fn.exportable and fn.is_definition), None)
        if host is not None:
            # Any mention `name(` in cpp_sources counts: a broken declaration there is the model's to fix.
            in_cpp = any(re.search(rf"(?<![\w.]){name}\s*\(", mask(t)) for t in cpp_texts)
            if has_cuda and not in_cpp:
                proto, why = prototype(host, texts)
                if proto is None:
                    p.problem("prototypes", f"`{name}` is defined in cuda_sources but not declared in cpp_sources, "
                              f"and no prototype could be written: {why}", at)
                else:
                    protos.append(proto)
            continue
        kernel = next(((k, r, fn) for k, r, fn in found if fn.name == name and fn.kind == "global"
                       and fn.is_definition), None)
        if kernel is not None:
            proto = _launch(p, name, kernel, texts)
            if proto:
                protos.append(proto)
            continue
        if any(fn.name == name and fn.is_definition for _, _, fn in found):
            p.problem("exported_functions", f"functions= lists `{name}`, but it is not a host function the binding "
                      "can call (static, a template, in a namespace, or __device__)", at)
        else:
            p.problem("exported_functions", f"functions= lists `{name}`, which the sources do not define; host "
                      f"functions defined: {', '.join(hosts) or 'none'}", at)
    if protos:
        _add_prototypes(p, call, pairs, protos, cpp_texts)


def _settle_function_list(p: Pass, call: InlineCall, funcs: Functions, hosts: list[str], kernels: list[str],
                          texts: list[str]) -> Optional[list[str]]:
    """The names the binding will export, after repairing an unusable or mismatched functions= list."""
    at = p.at(call.node)
    if funcs.kind == "missing":
        if any(re.search(r"\bPYBIND11_MODULE\b|\bTORCH_LIBRARY", mask(t)) for t in texts):
            return None  # the candidate binds by hand
        if len(hosts) == 1:
            _set_functions(p, call, [hosts[0]])
            p.repaired("exported_functions", f"functions= was missing, so nothing would be exported; exported the "
                       f"one host function: functions=[{hosts[0]!r}]", at)
            return hosts
        p.problem("exported_functions", "functions= is missing and the sources have no PYBIND11_MODULE: the "
                  "extension exports nothing; pass functions=['<host function>', ...]", at)
        return None
    if funcs.kind == "bad":
        pick = hosts if len(hosts) == 1 else kernels if not hosts and len(kernels) == 1 else None
        if pick is None:
            p.problem("exported_functions", "functions= must be a list of the C++ function names to export (strings)",
                      at)
            return None
        _set_functions(p, call, pick)
        p.repaired("exported_functions", f"functions= must be a list of C++ function names; the sources define one "
                   f"candidate, so functions=[{pick[0]!r}]", at)
        return pick
    names = list(funcs.names)
    if not all(n.isidentifier() for n in names):
        p.problem("exported_functions", "functions= must list C++ function names; not names: "
                  + ", ".join(repr(n) for n in names if not n.isidentifier()), at)
        return None
    missing = [n for n in names if n not in hosts and n not in kernels]
    spare = [h for h in hosts if h not in names]
    if len(missing) == 1 and len(spare) == 1 and funcs.elements and len(funcs.elements) == len(names):
        node = funcs.elements[names.index(missing[0])]
        p.edits.append(Edit(*p.code.span(node), repr(spare[0])))
        p.repaired("exported_functions", f"functions= named `{missing[0]}`, which the sources do not define; the one "
                   f"unlisted host function is `{spare[0]}`, so it is exported instead", p.at(node))
        names[names.index(missing[0])] = spare[0]
    return names


def _set_functions(p: Pass, call: InlineCall, names: list[str]) -> None:
    text = "[" + ", ".join(repr(n) for n in names) + "]"
    expr = call.bound.get("functions")
    if expr is not None:
        p.edits.append(Edit(*p.code.span(expr), text))
        return
    p.edits.append(append_keyword(p.code, call.node, Item("functions", text)))


def _launch(p: Pass, name: str, kernel: tuple[str, Resolved, CFunction], texts: list[str]) -> Optional[str]:
    key, res, fn = kernel
    at = p.source_offset(res, fn.name_start)
    base = (f"functions= lists `{name}`, a __global__ kernel: Python cannot call a kernel, only a host function "
            "that launches it")
    if kernel_name_uses(name, texts) != 1:
        p.problem("host_launcher", base + f" (`{name}` is used elsewhere in the sources, so no launcher was "
                  "generated); write `torch::Tensor <name>(torch::Tensor ...)` that launches it with <<<...>>>", at)
        return None
    launcher, why = elementwise_launcher(fn, res.text, texts)
    if launcher is None:
        p.problem("host_launcher", base + f"; no launcher was generated because {why}. Write a host function "
                  f"that takes tensors, computes the grid and launches `{name}<<<blocks, threads>>>(...)`", at)
        return None
    body_end = fn.body[1] + 1  # type: ignore[index]
    name_end = fn.name_start + len(fn.name)
    if res.locate(fn.name_start, name_end) is None or res.locate(body_end, body_end) is None:
        p.problem("host_launcher", base + " (a launcher could be generated, but the source is not a plain string "
                  "literal)", at)
        return None
    p.literals.add(res, fn.name_start, name_end, launcher.kernel_name)
    p.literals.add(res, body_end, body_end, launcher.code)
    returns = "returns the tensor the kernel writes" if launcher.returns else "returns nothing: the kernel " \
        "writes no single pointer parameter"
    p.repaired("host_launcher", f"`{name}` is a __global__ kernel, which cannot be bound; renamed it "
               f"`{launcher.kernel_name}` and generated the host launcher `{launcher.prototype[:-1]}` (one thread "
               f"per element, {returns})", at)
    return launcher.prototype


def _add_prototypes(p: Pass, call: InlineCall, pairs: list[tuple[str, Resolved]], protos: list[str],
                    cpp_texts: list[str]) -> None:
    at = p.at(call.node)
    text = "\n".join(protos) + "\n"
    cpp = [r for k, r in pairs if k == "cpp_sources"]
    target = cpp[-1] if cpp else None
    if target is not None:
        sep = "" if not target.text or target.text.endswith("\n") else "\n"
        if p.literals.add(target, len(target.text), len(target.text), sep + text):
            p.repaired("prototypes", "declared in cpp_sources what the generated bindings call: " + " ".join(protos),
                       at)
            return
    expr = call.bound.get("cpp_sources")
    if expr is not None:
        container = p.resolver.container(expr)
        if container is not None and isinstance(container, ast.List):
            p.edits.append(Edit(*p.code.span(container), "[" + ", ".join(
                [p.code.segment(e) for e in container.elts] + [py_string(text)]) + "]"))
            p.repaired("prototypes", "declared in cpp_sources what the generated bindings call: " + " ".join(protos),
                       at)
            return
    p.problem("prototypes", "the generated bindings live in cpp_sources, which must declare "
              + " ".join(protos), at)
