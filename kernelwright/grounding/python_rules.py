"""Grounding rules on the Python side of a candidate: its classes, demo code, torch/triton attributes,
and the calls into the extension it builds."""

from __future__ import annotations

import ast
from typing import Optional

from kernelwright.grounding import env
from kernelwright.grounding.calls import all_sources, extension_exports, functions_arg, inline_calls
from kernelwright.grounding.cxx import scan_functions
from kernelwright.grounding.rule import Pass
from kernelwright.grounding.text import Edit

# What to say about attributes small models invent, beyond "does not exist".
API_HINTS = {
    "torch.cuda.jit": "torch has no CUDA JIT decorator: write the kernel in CUDA C++ and build it with "
                      "torch.utils.cpp_extension.load_inline, or write a Triton kernel with @triton.jit",
    "torch.cuda.compile": "torch has no CUDA compiler API: build CUDA C++ with torch.utils.cpp_extension.load_inline",
    "torch.utils.cpp_extension.load_inline_cuda": "use torch.utils.cpp_extension.load_inline(name=..., "
                                                  "cpp_sources=..., cuda_sources=..., functions=[...])",
    "torch.nn.functional.swish": "swish is SiLU: use torch.nn.functional.silu",
    "triton.language.relu": "use tl.maximum(x, 0.0)",
    "triton.language.tanh": "use 2 * tl.sigmoid(2 * x) - 1, or tl.extra.cuda.libdevice.tanh(x)",
    "triton.language.pow": "use tl.exp(y * tl.log(x)) for positive x, or tl.extra.cuda.libdevice.pow(x, y)",
}
_DEMO_CALLS = ("get_inputs", "get_init_inputs")


def _line_range(p: Pass, node: ast.stmt, comments: bool = False) -> tuple[int, int]:
    """Offsets of the whole lines a statement (with its decorators) occupies; with `comments`, also the
    comment lines directly above it, which describe it."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    while comments and first > 1 and p.code.lines[first - 2].lstrip().startswith("#"):
        first -= 1
    start = p.code.line_starts[first - 1]
    end = p.code.line_starts[min(node.end_lineno or node.lineno, len(p.code.lines))]
    return start, end


def _shares_lines(p: Pass, node: ast.stmt) -> bool:
    lines = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return any(other is not node and (set(range(other.lineno, (other.end_lineno or other.lineno) + 1)) & lines)
               for other in p.code.tree.body)


# --- ModelNew defined twice --------------------------------------------------------------------------


def rule_duplicate_modelnew(p: Pass) -> None:
    classes = [s for s in p.code.tree.body if isinstance(s, ast.ClassDef) and s.name == "ModelNew"]
    if len(classes) < 2:
        return
    for cls in classes[:-1]:
        if _shares_lines(p, cls):
            p.problem("duplicate_modelnew", "ModelNew is defined more than once; keep one definition", p.at(cls))
            return
    for cls in classes[:-1]:
        p.edits.append(Edit(*_line_range(p, cls), ""))
    lines = ", ".join(str(c.lineno) for c in classes)
    p.repaired("duplicate_modelnew", f"ModelNew was defined {len(classes)} times (lines {lines}); Python keeps the "
               f"last, so the earlier ones were removed", p.at(classes[0]))


# --- module-level example usage --------------------------------------------------------------------------


def rule_example_usage(p: Pass) -> None:
    """Demo code at module level (after the model classes, or under `if __name__ == "__main__":`) runs at
    import, where it crashes (get_inputs undefined) or runs the model before the evaluator does."""
    body = p.code.tree.body
    classes = [i for i, s in enumerate(body) if isinstance(s, ast.ClassDef)]
    model_new = [i for i, s in enumerate(body) if isinstance(s, ast.ClassDef) and s.name == "ModelNew"]
    after = (model_new or classes or [len(body)])[-1]
    defined = set(p.bindings.counts)
    needed = _names_used_in_definitions(p)
    demo_functions = {s.name for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and _demo_reason(s.body, defined, set(), set()) is not None}
    removed: set[str] = set()
    for i, stmt in enumerate(body):
        if _is_main_guard(stmt):
            reason: Optional[str] = "is an `if __name__ == \"__main__\":` block"
        elif i > after and isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Assert,
                                             ast.For, ast.With, ast.If)):
            reason = _demo_reason([stmt], defined, removed, demo_functions)
        else:
            reason = None
        if reason is None:
            continue
        bound = _bound_names(stmt)
        if bound & needed or _shares_lines(p, stmt):
            p.problem("example_usage", f"module-level code {reason}; remove it (the evaluator imports this file and "
                      "calls ModelNew itself)", p.at(stmt))
            continue
        removed |= bound
        p.edits.append(Edit(*_line_range(p, stmt, comments=True), ""))
        p.repaired("example_usage", f"removed module-level example code that {reason}", p.at(stmt))
    _remove_dead_demo_functions(p, body[after + 1:], demo_functions, removed)


def _remove_dead_demo_functions(p: Pass, tail: list[ast.stmt], demo_functions: set[str], removed: set[str]) -> None:
    """A test function after the model whose only callers were just removed is dead demo code too."""
    removed_calls = {id(n) for s in p.code.tree.body if _bound_names(s) & removed or _is_demo_call(s, demo_functions)
                     for n in ast.walk(s)}
    for stmt in tail:
        if not (isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in demo_functions):
            continue
        used = any(isinstance(n, ast.Name) and n.id == stmt.name and id(n) not in removed_calls
                   for n in p.ctx.nodes)
        if not used and not _shares_lines(p, stmt):
            p.edits.append(Edit(*_line_range(p, stmt, comments=True), ""))
            p.repaired("example_usage", f"removed the test function {stmt.name}(): it only runs the model on "
                       "example inputs and nothing calls it any more", p.at(stmt))


def _is_demo_call(stmt: ast.stmt, demo_functions: set[str]) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
        isinstance(stmt.value.func, ast.Name) and stmt.value.func.id in demo_functions


def _is_main_guard(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    parts = [stmt.test.left, *stmt.test.comparators]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in parts) and \
        any(isinstance(x, ast.Constant) and x.value == "__main__" for x in parts)


def _demo_reason(stmts: list[ast.stmt], defined: set[str], removed: set[str],
                 demo_functions: set[str]) -> Optional[str]:
    for stmt in stmts:
        for node in _walk_no_defs(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name in _DEMO_CALLS and name not in defined:
                    return f"calls {name}(), which this file does not define"
                if name in ("ModelNew", "Model"):
                    return f"builds a {name} instance"
                if name == "print":
                    return "prints"
                if name in demo_functions:
                    return f"runs the test function {name}()"
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in removed:
                return f"uses `{node.id}` from removed example code"
    return None


def _walk_no_defs(node: ast.AST):
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(c for c in ast.iter_child_nodes(cur)
                     if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))


def _bound_names(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _names_used_in_definitions(p: Pass) -> set[str]:
    used = set()
    for stmt in p.code.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            used |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used


# --- torch / triton attributes that do not exist ------------------------------------------------------------


def rule_python_api(p: Pass) -> None:
    seen: set[str] = set()
    for node, qual in sorted(_api_references(p), key=lambda ref: p.at(ref[0])):
        missing = env.missing_attribute(qual)
        if missing is None or missing.qualname in seen:
            continue
        seen.add(missing.qualname)
        hint = API_HINTS.get(missing.qualname)
        close = f"; did you mean {', '.join(missing.owner + '.' + c for c in missing.close)}?" if missing.close else ""
        p.problem("python_api", f"`{missing.qualname}` does not exist ({missing.source})"
                  + (f": {hint}" if hint else close), p.at(node))


def _api_references(p: Pass):
    for node, qual in p.ctx.references:
        if qual.split(".")[0] in ("torch", "triton"):
            yield node, qual
    for node in p.ctx.nodes:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.split(".")[0] in ("torch", "triton"):
            for alias in node.names:
                if alias.name != "*":
                    yield node, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("torch", "triton") and "." in alias.name:
                    yield node, alias.name


# --- calls into the extension ---------------------------------------------------------------------------


def rule_extension_calls(p: Pass) -> None:
    """`ext.f(...)` must name a function in functions=; a bare `f(...)` that Python never binds but one
    extension exports is that extension's function."""
    exports = extension_exports(p)
    unbound = _unbound_names(p)
    attr_calls: dict[str, list[ast.Attribute]] = {}
    for node in p.ctx.nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            key = _ext_key(node.func.value)
            if key in exports:
                attr_calls.setdefault(key, []).append(node.func)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in unbound:
            _bare_call(p, node, node.func, exports)
    for key, funcs in attr_calls.items():
        names = exports[key][1]
        if names is None:
            continue
        bad = [f for f in funcs if f.attr not in names]
        attrs = sorted({f.attr for f in bad})
        if not bad:
            continue
        if len(names) == 1 and len(attrs) == 1 and names[0].isidentifier():
            for f in bad:
                end = p.code.span(f)[1]
                p.edits.append(Edit(end - len(f.attr), end, names[0]))
            p.repaired("extension_calls", f"`{key}.{attrs[0]}` is not exported by the extension (functions="
                       f"{names}); calls renamed to `{key}.{names[0]}`", p.at(bad[0]))
        else:
            for attr in attrs:
                p.problem("extension_calls", f"`{key}.{attr}` is not exported by the extension; it exports "
                          f"{', '.join(names) or 'nothing'}", p.at(next(f for f in bad if f.attr == attr)))


def _ext_key(value: ast.expr) -> Optional[str]:
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        return "self." + value.attr
    return None


def _bare_call(p: Pass, call: ast.Call, func: ast.Name, exports: dict) -> None:
    owners = [k for k, (_, names) in exports.items() if names and func.id in names and not k.startswith("self.")]
    if len(owners) == 1 and p.bindings.counts.get(owners[0]) == 1:
        p.edits.append(Edit(*p.code.span(func), f"{owners[0]}.{func.id}"))
        p.repaired("extension_calls", f"`{func.id}` is not defined in Python; it is exported by the extension bound "
                   f"to `{owners[0]}`, so the call is now `{owners[0]}.{func.id}(...)`", p.at(func))


def _unbound_names(p: Pass) -> set[str]:
    return {n.id for n in p.ctx.nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and p.is_unbound(n.id)}


def rule_extension_arguments(p: Pass) -> None:
    """Calls into the extension against the C++ signatures: the number of arguments, and `.data_ptr()`
    passed where C++ takes a tensor (pybind11 rejects both when the call runs)."""
    exports = extension_exports(p)
    signatures: dict[str, dict[str, list[str]]] = {}
    for node in p.ctx.nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        key = _ext_key(node.func.value)
        if key not in exports:
            continue
        if key not in signatures:
            pairs = all_sources(p, exports[key][0]) or []
            signatures[key] = {fn.name: _split_params(fn.params) for _, r in pairs for fn in scan_functions(r.text)
                               if fn.kind == "host" and fn.is_definition}
        params = signatures[key].get(node.func.attr)
        if params is not None:
            _check_arguments(p, f"{key}.{node.func.attr}", node, params)


def _split_params(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        depth += ch in "(<[{"
        depth -= ch in ")>]}"
        if ch == "," and depth == 0:
            parts.append(text[start:k].strip())
            start = k + 1
    parts.append(text[start:].strip())
    return [x for x in parts if x and x != "void"]


def _check_arguments(p: Pass, name: str, call: ast.Call, params: list[str]) -> None:
    if not any(isinstance(a, ast.Starred) for a in call.args) and not call.keywords:
        required = sum("=" not in x for x in params)
        if not required <= len(call.args) <= len(params):
            p.problem("extension_calls", f"`{name}` takes {len(params)} argument(s) ({', '.join(params)}); the call "
                      f"passes {len(call.args)}", p.at(call))
    for i, arg in enumerate(call.args[:len(params)]):
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "data_ptr" \
                and "Tensor" in params[i]:
            p.problem("extension_calls", f"`{name}` takes a tensor as argument {i + 1} ({params[i]}); pass the "
                      "tensor, not `.data_ptr()`", p.at(arg))


# --- imports the answer uses but never wrote ----------------------------------------------------------

# The names a kernel module conventionally binds by one import, and that import. Small models copy a
# taught call (`load_inline(...)`, `tl.load(...)`) without the import line above it; the name means
# one thing only, so the import is added rather than reported.
STANDARD_IMPORTS = {
    "torch": "import torch",
    "nn": "import torch.nn as nn",
    "F": "import torch.nn.functional as F",
    "load_inline": "from torch.utils.cpp_extension import load_inline",
    "triton": "import triton",
    "tl": "import triton.language as tl",
    "math": "import math",
}


def rule_missing_imports(p: Pass) -> None:
    missing = sorted(name for name in _unbound_names(p) if name in STANDARD_IMPORTS)
    if not missing:
        return
    body = p.code.tree.body
    # after a docstring and `from __future__` imports, which must stay first
    lead = [s for s in body[:2] if isinstance(s, ast.Expr) and isinstance(getattr(s, "value", None), ast.Constant)
            or isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    at = p.code.span(lead[-1])[1] if lead else 0
    text = "".join(STANDARD_IMPORTS[n] + "\n" for n in missing)
    p.edits.append(Edit(at, at, ("\n" + text) if lead else text))
    p.repaired("missing_imports", "used but never imported: " + ", ".join(f"`{n}`" for n in missing)
               + "; added " + "; ".join(f"`{STANDARD_IMPORTS[n]}`" for n in missing), at)


# --- final checks ------------------------------------------------------------------------------------


def rule_undefined_names(p: Pass) -> None:
    reported: set[str] = set()
    unbound = _unbound_names(p)
    for node in p.ctx.nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in unbound \
                and node.id not in reported:
            reported.add(node.id)
            func = p.ctx.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            where = f"in {func.name}()" if func is not None else "at module level"  # type: ignore[attr-defined]
            dead = func is not None and p.ctx.class_of(func) is None and not any(
                isinstance(n, ast.Name) and n.id == func.name for n in p.ctx.nodes)  # type: ignore[attr-defined]
            p.problem("undefined_names", f"`{node.id}` is used {where} but never defined (NameError when that line "
                      "runs)" + (": call the extension through the module load_inline returned, e.g. "
                                 f"`ext.{node.id}(...)`" if _exported_anywhere(p, node.id) else ""), p.at(node),
                      "warning" if dead else "error")


def _exported_anywhere(p: Pass, name: str) -> bool:
    return any(name in functions_arg(p, c).names for c in inline_calls(p))


def rule_modelnew(p: Pass) -> None:
    body = p.code.tree.body
    classes = [i for i, s in enumerate(body) if isinstance(s, ast.ClassDef) and s.name == "ModelNew"]
    if not classes:
        if "ModelNew" not in p.bindings.counts:
            p.problem("modelnew", "the code defines no `class ModelNew(nn.Module)`", None)
        return
    for stmt in body[classes[-1] + 1:]:
        if "ModelNew" in _bound_names(stmt):
            p.problem("modelnew", "ModelNew is rebound after its class definition, so the evaluator would get this "
                      "value instead of the class; remove the assignment", p.at(stmt))
