"""The load_inline calls of a candidate, read for grounding: which calls there are (under any import
name), their arguments bound by the installed signature, the sources they resolve to, the names in
`functions=`, and the module names their results are bound to.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

from kernelwright.astutil import matches
from kernelwright.grounding import env
from kernelwright.grounding.cxx import mask
from kernelwright.grounding.literals import Resolved
from kernelwright.grounding.rule import Pass
from kernelwright.grounding.text import Code, Edit

LOAD_INLINE = ("torch.utils.cpp_extension.load_inline",)
SOURCE_KEYS = ("cpp_sources", "cuda_sources")
CODE_LIKE = re.compile(r"[;{}]|#\s*include|\w\s*\([^)]*\)")


@dataclass
class InlineCall:
    node: ast.Call
    bound: dict[str, ast.expr]  # parameter -> expression, positionals bound in the installed order
    unknown: list[ast.keyword]
    starred: bool
    decorator: bool = False
    in_function: bool = False


@dataclass
class Item:
    """One argument of a call as text: `key=value`, or a positional value when key is None."""

    key: Optional[str]
    text: str
    node: Optional[ast.AST] = None

    def render(self) -> str:
        return f"{self.key}={self.text}" if self.key else self.text


@dataclass
class Functions:
    kind: str  # "missing", "names" or "bad"
    names: list[str] = field(default_factory=list)
    elements: list[ast.Constant] = field(default_factory=list)  # the string nodes, when written in the call
    node: Optional[ast.expr] = None


def inline_calls(p: Pass) -> list[InlineCall]:
    params = env.load_inline_parameters()
    positional = env.positional_parameters()
    decorators = {id(d) for n in p.ctx.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  for d in n.decorator_list}
    calls = []
    for node in p.ctx.nodes:
        if not (isinstance(node, ast.Call) and matches(p.ctx.qualname(node.func), LOAD_INLINE)):
            continue
        starred = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        bound: dict[str, ast.expr] = dict(zip(positional, node.args, strict=False))
        bound.update({k.arg: k.value for k in node.keywords if k.arg in params})
        unknown = [k for k in node.keywords if k.arg is not None and k.arg not in params]
        inside = p.ctx.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) is not None
        calls.append(InlineCall(node, bound, unknown, starred, id(node) in decorators, inside))
    return calls


def call_items(code: Code, call: ast.Call) -> list[Item]:
    nodes: list[tuple[int, Item]] = []
    for a in call.args:
        nodes.append((code.span(a)[0], Item(None, code.segment(a), a)))
    for k in call.keywords:
        nodes.append((code.span(k)[0], Item(k.arg, code.segment(k.value), k)))
    return [item for _, item in sorted(nodes, key=lambda t: t[0])]


def insert_keyword(items: list[Item], item: Item) -> None:
    """Add a keyword argument after every positional one (Python allows no positional after a keyword)."""
    last_positional = max((i for i, it in enumerate(items) if it.key is None), default=-1)
    at = last_positional + 1
    if at == 0 and items and items[0].key == "name":
        at = 1
    items.insert(at, item)


def _layout(code: Code, call: ast.Call) -> tuple[int, int, str]:
    """Where the call's arguments start and end, and the separator its layout uses (one per line or not)."""
    spans = sorted([code.span(a) for a in call.args] + [code.span(k) for k in call.keywords])
    if not spans:
        end = code.span(call)[1] - 1
        return end, end, ", "
    start, end = spans[0][0], max(e for _, e in spans)
    gap = code.text[spans[0][1]:spans[1][0]] if len(spans) > 1 else code.text[code.span(call.func)[1]:start]
    return start, end, ",\n" + gap.rsplit("\n", 1)[1] if "\n" in gap else ", "


def rebuild(code: Code, call: ast.Call, items: list[Item]) -> Edit:
    """Replace the call's argument list, keeping its one-per-line layout when it had one."""
    start, end, sep = _layout(code, call)
    return Edit(start, end, sep.join(item.render() for item in items))


def append_keyword(code: Code, call: ast.Call, item: Item) -> Edit:
    """Insert one keyword argument after the last argument, touching nothing else (so other edits of
    the same pass, inside the arguments, still apply)."""
    start, end, sep = _layout(code, call)
    return Edit(end, end, (sep if call.args or call.keywords else "") + item.render())


def sources(p: Pass, call: InlineCall, key: str) -> Optional[list[Resolved]]:
    expr = call.bound.get(key)
    if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
        return []
    return p.resolver.sources(expr)


def all_sources(p: Pass, call: InlineCall) -> Optional[list[tuple[str, Resolved]]]:
    out = []
    for key in SOURCE_KEYS:
        res = sources(p, call, key)
        if res is None:
            return None
        out += [(key, r) for r in res]
    return out


def functions_arg(p: Pass, call: InlineCall) -> Functions:
    expr = call.bound.get("functions")
    if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
        return Functions("missing")
    node = expr
    if isinstance(node, ast.Name) and p.bindings.get(node.id) is not None:
        node = p.bindings.get(node.id)  # type: ignore[assignment]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return Functions("names", [node.value], [node], expr)
    elts = node.elts if isinstance(node, (ast.List, ast.Tuple)) else node.keys if isinstance(node, ast.Dict) else None
    if elts is not None and elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
        return Functions("names", [e.value for e in elts], list(elts), expr)  # type: ignore[union-attr,misc]
    return Functions("bad", node=expr)


def looks_like_code(p: Pass, expr: ast.expr) -> bool:
    res = p.resolver.sources(expr)
    return bool(res) and any(CODE_LIKE.search(r.text) and ("\n" in r.text or len(r.text) > 40) for r in res)


def extension_exports(p: Pass) -> dict[str, tuple[InlineCall, Optional[list[str]]]]:
    """Module-level names bound to a built extension -> (its call, the names it exports or None)."""
    out: dict[str, tuple[InlineCall, Optional[list[str]]]] = {}
    for call in inline_calls(p):
        parent = p.ctx.parents.get(call.node)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            target = parent.targets[0]
            key = target.id if isinstance(target, ast.Name) else (
                "self." + target.attr if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                and target.value.id == "self" else None)
            if key is None or (isinstance(target, ast.Name) and p.bindings.counts.get(key) != 1):
                continue  # a name bound twice may not be the extension where it is used
            funcs = functions_arg(p, call)
            pairs = all_sources(p, call)
            if funcs.kind == "names":
                out[key] = (call, funcs.names)
            elif funcs.kind == "missing" and pairs is not None and not any(
                    re.search(r"\bPYBIND11_MODULE\b|\bTORCH_LIBRARY", mask(r.text)) for _, r in pairs):
                out[key] = (call, [])
            else:
                out[key] = (call, None)
    return out
