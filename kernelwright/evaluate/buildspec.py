"""A candidate's `load_inline` calls whose every argument is a literal, read without running it.

The trusted builder (builder.py) builds these ahead of the candidate, into the build cache's
shared scope (buildcache.py), so candidates with the same sources and flags share one build. A
call is taken only when each argument is a literal or a module-level name bound once to one:
strings, numbers, booleans, None, lists/tuples of those, and `+` of strings or lists. Anything
else (an f-string, a function's result, `**kwargs`, a second positional argument) leaves the
call to the candidate's own worker, which builds it as before. Reading one wrongly costs only a
cache miss: the worker keys its build by the arguments it really passes.
"""

from __future__ import annotations

import ast
from typing import Any, Optional

from pydantic import BaseModel


class LiteralBuild(BaseModel):
    """One call's arguments, as the candidate will pass them."""

    arguments: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.arguments.get("name"))


class BuildSpecs(BaseModel):
    builds: list[LiteralBuild]
    calls: int  # load_inline calls found in the source, literal or not

    @property
    def complete(self) -> bool:
        """Every load_inline call of the source is among `builds`."""
        return self.calls == len(self.builds)


class _Unresolved(Exception):
    pass


def literal_builds(code: str) -> BuildSpecs:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return BuildSpecs(builds=[], calls=0)
    consts = _module_constants(tree)
    builds, calls = [], 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node.func) == "load_inline":
            calls += 1
            args = _arguments(node, consts)
            if args is not None and isinstance(args.get("name"), str):
                builds.append(LiteralBuild(arguments=args))
    return BuildSpecs(builds=builds, calls=calls)


def _callee(func: ast.expr) -> Optional[str]:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level names bound exactly once in the whole module, to a literal value."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound[node.id] = bound.get(node.id, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = bound.get(node.name, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bound[name] = bound.get(name, 0) + 2  # rebound from elsewhere: never a constant
    consts: dict[str, Any] = {}
    for stmt in tree.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        if target is None or bound.get(target) != 1:
            continue
        try:
            consts[target] = _value(value, consts)
        except _Unresolved:
            pass
    return consts


def _arguments(call: ast.Call, consts: dict[str, Any]) -> Optional[dict[str, Any]]:
    if len(call.args) > 1 or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    out: dict[str, Any] = {}
    try:
        if call.args:
            out["name"] = _value(call.args[0], consts)
        for kw in call.keywords:
            if kw.arg is None:  # **kwargs
                return None
            out[kw.arg] = _value(kw.value, consts)
    except _Unresolved:
        return None
    return out


def _value(node: ast.expr, consts: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in consts:
            return consts[node.id]
        raise _Unresolved(node.id)
    if isinstance(node, ast.List):
        return [_value(e, consts) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e, consts) for e in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, consts), _value(node.right, consts)
        if isinstance(left, str) and isinstance(right, str):
            return left + right
        if isinstance(left, list) and isinstance(right, list):
            return left + right
    raise _Unresolved(type(node).__name__)
