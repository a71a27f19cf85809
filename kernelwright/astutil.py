"""AST helpers behind the static rules: alias resolution, scopes, string constants.

The rules must not be fooled by renaming (`import torch.cuda as tc`, `from time import
perf_counter as pc`, `sync = torch.cuda.synchronize`, `getattr(torch.cuda, "synchronize")`), so a
rule never matches the text an expression was written as: it asks `Context.qualname` for the
dotted name the expression denotes, after following imports and simple module-level renames.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from functools import cached_property
from typing import Optional, Union

FuncNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]
FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)

# Builtins a rule cares about. A bare name resolves to `builtins.<name>` unless the file imports it,
# defines a function or class of that name at top level, or binds it in an enclosing function (see
# `Context.builtin`). Module-level assignments do not count: `if False: eval = 1` leaves the
# builtin reachable and would otherwise hide a real `eval(...)` from the rules.
BUILTINS_OF_INTEREST = frozenset({
    "eval", "exec", "compile", "__import__", "open", "exit", "quit", "globals", "locals", "vars",
    "setattr", "delattr", "getattr", "type", "breakpoint", "object",
})
# Methods that mutate a dict/list in place; writing through them is as good as an assignment.
MUTATORS = frozenset({"update", "setdefault", "__setitem__", "__delitem__", "pop", "popitem", "clear",
                      "append", "extend", "insert"})  # not `add`: tensors have an out-of-place add()
BUILD_CALLS = ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load")
TRITON_JIT = ("triton.jit", "triton.runtime.jit.jit", "triton.autotune", "triton.heuristics")


def matches(qual: Optional[str], names: Iterable[str]) -> bool:
    """`qual` is one of `names` or an attribute below one (`sys.modules.get` matches `sys.modules`)."""
    return qual is not None and any(qual == n or qual.startswith(n + ".") for n in names)


def flat_targets(targets: Iterable[ast.expr]) -> Iterator[ast.expr]:
    """Assignment targets with tuple/list/starred unpacking flattened."""
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from flat_targets(t.elts)
        elif isinstance(t, ast.Starred):
            yield from flat_targets([t.value])
        else:
            yield t


def store_targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment-like statement writes to (or deletes)."""
    if isinstance(node, ast.Assign):
        return list(flat_targets(node.targets))
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return list(flat_targets([node.target]))
    if isinstance(node, ast.Delete):
        return list(flat_targets(node.targets))
    return []


def root_name(node: ast.AST) -> Optional[ast.Name]:
    """The Name an attribute/subscript/call chain starts from: `self` in `self.a[0].b()`."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node if isinstance(node, ast.Name) else None


def module_statements(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at import time, including those nested in module-level if/try/with/for."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            yield from module_statements(stmt.body)
            yield from module_statements(getattr(stmt, "orelse", []))
        elif isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from module_statements(block)
            for handler in stmt.handlers:
                yield from module_statements(handler.body)


def string_hits(nodes: Iterable[ast.AST], pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    """(line, matched text) of `pattern` in string literals -- kernel sources live in them."""
    for const in nodes:
        if not (isinstance(const, ast.Constant) and isinstance(const.value, str)):
            continue
        for m in pattern.finditer(const.value):
            # Exact for one triple-quoted literal, approximate for implicit concatenations.
            yield const.lineno + const.value.count("\n", 0, m.start()), m.group(0)


class Context:
    """One parsed candidate, with the lookups every rule shares, computed once."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.nodes: list[ast.AST] = list(ast.walk(tree))  # walked once; every rule iterates this
        self.parents: dict[ast.AST, ast.AST] = {
            child: node for node in self.nodes for child in ast.iter_child_nodes(node)
        }
        self.own_defs = self._own_defs()
        self._bindings: dict[ast.AST, set[str]] = {}  # function -> its local names, filled lazily
        self._module_attrs: dict[Optional[ast.ClassDef], dict[str, str]] = {}  # class -> nn attributes
        self.aliases: dict[str, str] = {}
        self._build_aliases()

    # --- names ---------------------------------------------------------------------------
    def _own_defs(self) -> set[str]:
        deleted = {t.id for n in self.nodes if isinstance(n, ast.Delete)
                   for t in flat_targets(n.targets) if isinstance(t, ast.Name)}
        defined = {s.name for s in self.tree.body if isinstance(s, (*FUNC_TYPES, ast.ClassDef))}
        return defined - deleted

    def _build_aliases(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.aliases.setdefault(local, a.name if a.asname else local)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.aliases.setdefault(a.asname or a.name, f"{node.module}.{a.name}")
        # `tc = torch.cuda`, `sync = tc.synchronize`: follow renames until nothing new appears.
        pairs = list(self._rename_pairs())
        changed = True
        while changed:
            changed = False
            for name, value in pairs:
                qual = self.qualname(value)
                if name not in self.aliases and qual is not None and qual != f"builtins.{name}":
                    self.aliases[name] = qual
                    changed = True

    def _rename_pairs(self) -> Iterator[tuple[str, ast.expr]]:
        for node in self.nodes:
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        yield t.id, node.value
                    elif isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                            and len(t.elts) == len(node.value.elts):
                        yield from ((e.id, v) for e, v in zip(t.elts, node.value.elts) if isinstance(e, ast.Name))
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name) \
                    and node.value is not None:
                yield node.target.id, node.value

    def builtin(self, node: ast.AST) -> Optional[str]:
        """The builtin a bare name refers to (`eval`), or None when the file binds the name itself."""
        if not (isinstance(node, ast.Name) and node.id in BUILTINS_OF_INTEREST) \
                or node.id in self.aliases or node.id in self.own_defs:
            return None
        child, scope = node, self.parents.get(node)
        while scope is not None:
            # Only a function's body is its scope: defaults and decorators (`def f(eval=eval)`)
            # are evaluated outside it.
            if isinstance(scope, (*FUNC_TYPES, ast.Lambda)) and node.id in self._function_bindings(scope) \
                    and any(child is b for b in (scope.body if isinstance(scope.body, list) else [scope.body])):
                return None
            child, scope = scope, self.parents.get(scope)
        return node.id

    def _function_bindings(self, func: ast.AST) -> set[str]:
        """Names local to `func` by Python's rules: any binding anywhere in its own body makes a name
        local for the whole body, so shadowing there is sound (unlike `if False: eval = 1` at module
        level, which leaves the builtin reachable). Nested functions, classes and comprehensions are
        separate scopes and are not looked into."""
        if func in self._bindings:
            return self._bindings[func]
        args = func.args  # type: ignore[attr-defined]
        names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg] if a}
        declared: set[str] = set()
        stack = list(ast.iter_child_nodes(func))
        while stack:
            node = stack.pop()
            if isinstance(node, (*FUNC_TYPES, ast.ClassDef)):
                names.add(node.name)
                continue
            if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                                 ast.arguments)):
                continue  # own scopes; a walrus inside a comprehension is missed, which only flags more
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                declared |= set(node.names)
            stack.extend(ast.iter_child_nodes(node))
        self._bindings[func] = names - declared
        return self._bindings[func]

    def qualname(self, node: ast.AST) -> Optional[str]:
        """The dotted name `node` denotes (`tc.synchronize` -> `torch.cuda.synchronize`), or None."""
        parts: list[str] = []
        while True:  # iterative: a deep attribute chain must not hit the recursion limit
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Call) and self.builtin(node.func) == "getattr" and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                parts.append(node.args[1].value)
                node = node.args[0]
            elif isinstance(node, ast.Name):
                base = self.aliases.get(node.id)
                if base is None and node.id == "__builtins__":
                    base = "builtins"
                elif base is None and self.builtin(node):
                    base = f"builtins.{node.id}"
                if base is None:
                    return None
                parts.append(base)
                return ".".join(reversed(parts))
            else:
                return None

    @cached_property
    def references(self) -> list[tuple[ast.expr, str]]:
        """Every maximal name/attribute chain with a known qualname (`torch.cuda.synchronize`
        once, not also `torch.cuda` and `torch`)."""
        return list(self._references())

    def _references(self) -> Iterator[tuple[ast.expr, str]]:
        for node in self.nodes:
            if not isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
                continue
            parent = self.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue
            if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node \
                    and self.builtin(parent.func) == "getattr" and self.qualname(parent) is not None:
                continue  # the object of a resolved getattr(...): the call itself is the reference
            qual = self.qualname(node)
            if qual is not None and (not isinstance(node, ast.Call) or self.builtin(node.func) == "getattr"):
                yield node, qual

    def is_called(self, node: ast.AST) -> bool:
        parent = self.parents.get(node)
        return isinstance(parent, ast.Call) and parent.func is node

    # --- scopes --------------------------------------------------------------------------
    def enclosing(self, node: ast.AST, kinds: tuple[type, ...]) -> Optional[ast.AST]:
        node = self.parents.get(node)
        while node is not None and not isinstance(node, kinds):
            node = self.parents.get(node)
        return node

    def class_of(self, func: ast.AST) -> Optional[ast.ClassDef]:
        parent = self.parents.get(func)
        return parent if isinstance(parent, ast.ClassDef) else None

    @staticmethod
    def self_name(func: FuncNode) -> Optional[str]:
        args = func.args.posonlyargs + func.args.args
        return args[0].arg if args else None

    @cached_property
    def classes(self) -> dict[str, ast.ClassDef]:
        return {s.name: s for s in module_statements(self.tree.body) if isinstance(s, ast.ClassDef)}

    @cached_property
    def module_functions(self) -> dict[str, FuncNode]:
        return {s.name: s for s in module_statements(self.tree.body) if isinstance(s, FUNC_TYPES)}

    @cached_property
    def forward_functions(self) -> list[FuncNode]:
        """`forward`/`__call__` of every class, plus the methods (`self.m()`) and module-level
        functions (`f()`) they call, transitively: everything that runs when the model runs."""
        todo: list[FuncNode] = [f for c in self.classes.values() for f in c.body
                                if isinstance(f, FUNC_TYPES) and f.name in ("forward", "__call__")]
        seen: list[FuncNode] = []  # in discovery order, for stable messages
        while todo:
            func = todo.pop()
            if func in seen:  # AST nodes compare by identity
                continue
            seen.append(func)
            cls, me = self.class_of(func), self.self_name(func)
            methods = {m.name: m for m in cls.body if isinstance(m, FUNC_TYPES)} if cls else {}
            for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
                f = call.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == me \
                        and f.attr in methods:
                    todo.append(methods[f.attr])
                elif isinstance(f, ast.Name) and f.id in self.module_functions:
                    todo.append(self.module_functions[f.id])
        return seen

    @cached_property
    def extension_names(self) -> set[str]:
        """Names (or `self.<attr>` attributes) bound to a built extension: calls on them are the
        candidate's own kernels even when named like torch ops (`ext.matmul`)."""
        names: set[str] = set()
        for node in self.nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and matches(self.qualname(node.value.func), BUILD_CALLS):
                for t in flat_targets(node.targets):
                    if isinstance(t, (ast.Name, ast.Attribute)):
                        names.add(t.id if isinstance(t, ast.Name) else t.attr)
        return names

    def module_attrs(self, cls: Optional[ast.ClassDef]) -> dict[str, str]:
        """`self.<attr>` -> what constructed it, for attributes built from `torch.nn.*` or `Model`."""
        if cls in self._module_attrs:
            return self._module_attrs[cls]
        found = self._module_attrs[cls] = {}
        for node in ast.walk(cls) if cls else ():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                qual = self.qualname(node.value.func)
                func = node.value.func
                ctor = qual if matches(qual, ("torch.nn",)) else (
                    "Model" if isinstance(func, ast.Name) and func.id == "Model" else None)
                for t in flat_targets(node.targets):
                    if ctor and isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                            and t.value.id == "self":
                        found[t.attr] = ctor
        return found


# --- detectors: small questions the rules ask about a node ------------------------------------
# Policy (which modules are protected, which ops are heavy) lives in static_checks; these only
# answer "does this node do X", taking the policy as arguments where they need it.

def is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def local_names(func: ast.AST) -> set[str]:
    """Parameters and names assigned anywhere inside `func` (closures included)."""
    names = {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    names |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    return names


def reraises(handler: ast.ExceptHandler) -> bool:
    """A handler that always ends in `raise` (and never returns) cannot fall back."""
    return bool(handler.body) and isinstance(handler.body[-1], ast.Raise) \
        and not any(isinstance(n, ast.Return) for n in ast.walk(handler))


def failure_path(ctx: Context, try_node: ast.AST, handler: ast.ExceptHandler) -> list[ast.AST]:
    """What runs only when the try body failed: the handler, and -- when the try body ends in
    `return` and the handler falls through (`except: pass`) -- the statements after the try."""
    path: list[ast.AST] = [handler]
    body = getattr(try_node, "body", [])
    if body and isinstance(body[-1], ast.Return) and not isinstance(handler.body[-1], (ast.Return, ast.Raise)):
        parent = ctx.parents.get(try_node)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and any(s is try_node for s in block):
                path += block[[id(s) for s in block].index(id(try_node)) + 1:]
    return path


def base_names(ctx: Context, expr: ast.expr) -> list[str]:
    """Class names a base expression may denote; an import alias counts by its original name."""
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [n for e in expr.elts for n in base_names(ctx, e)]
    if isinstance(expr, ast.Name):
        return [ctx.aliases.get(expr.id, expr.id).rsplit(".", 1)[-1]]
    return [expr.attr] if isinstance(expr, ast.Attribute) else []


def import_hits(ctx: Context, modules: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of one of `modules` (or a submodule, or a name from one)."""
    modules = tuple(modules)
    for node in ctx.nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        hit = next((n for n in names if matches(n, modules)), None)
        if hit:
            yield node.lineno, hit


# Namespaces whose calls are bookkeeping, not computing: calling them in a handler is no fallback.
_NOT_COMPUTE = ("torch.cuda", "torch.backends", "torch.utils", "torch.version", "torch.compiler")
# Data rather than functions: binding `dtype = torch.float32` in a handler is no fallback either.
_TORCH_VALUE = re.compile(r"^(u?int\d*|float\d*|bfloat16|half|double|long|short|bool|complex\d*|cfloat|cdouble"
                          r"|device|dtype|finfo|iinfo|Size|__\w+__)$")


# Tensor methods that compute: `x.relu()` in a handler is a fallback unless `x` is an extension.
_TENSOR_COMPUTE = re.compile(r"^(relu|sigmoid|tanh|gelu|silu|exp|log|sqrt|rsqrt|abs|neg|sum|mean|amax|amin|add|sub|"
                             r"mul|div|pow|clamp|clamp_min|clamp_max|matmul|mm|bmm|addmm|baddbmm|softmax|"
                             r"log_softmax|conv\w*|linear|norm|var|std|cumsum)_?$")


def runs_pytorch(qual: Optional[str]) -> bool:
    return matches(qual, ("torch",)) and not matches(qual, _NOT_COMPUTE)


def owner_name(node: ast.AST) -> Optional[str]:
    """`ext` for `ext.f` and for `self.ext.f`: what extension_names holds."""
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def reference_use(ctx: Context, node: ast.AST, cls: Optional[ast.ClassDef]) -> Optional[tuple[int, str]]:
    """The first thing under `node` that computes with PyTorch or the reference instead of a kernel.
    Tensor methods (`x.relu()`) cannot be told from the candidate's own calls and are left out."""
    held = ctx.module_attrs(cls)
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
            return n.lineno, "the @ operator"
        if not isinstance(n, ast.Call):
            continue
        f, qual = n.func, ctx.qualname(n.func)
        if runs_pytorch(qual):
            return n.lineno, str(qual)
        if (qual or "").rsplit(".", 1)[-1] == "Model" or isinstance(f, ast.Name) and f.id in ("Model", "self"):
            return n.lineno, f"{ast.unparse(f)}(...)"
        if isinstance(f, ast.Attribute) and f.attr == "forward":
            return n.lineno, f"{ast.unparse(f)}(...)"
        if isinstance(f, ast.Attribute) and is_self(f.value) and f.attr in held:
            return n.lineno, f"self.{f.attr} ({held[f.attr]})"
        if isinstance(f, ast.Attribute) and qual is None and _TENSOR_COMPUTE.match(f.attr) \
                and owner_name(f.value) not in ctx.extension_names:
            return n.lineno, f"tensor method .{f.attr}()"
    return None


def module_fallback(ctx: Context, handler: ast.ExceptHandler) -> Optional[tuple[int, str]]:
    """At import time a handler falls back by binding something: `relu = torch.relu`, a def, a class."""
    for n in ast.walk(handler):
        if isinstance(n, (*FUNC_TYPES, ast.Lambda)):
            hit = reference_use(ctx, n, ctx.class_of(n))
            if hit:
                return hit
        elif isinstance(n, ast.Assign):
            qual = ctx.qualname(n.value)
            if runs_pytorch(qual) and not _TORCH_VALUE.match(str(qual).rsplit(".", 1)[-1]) \
                    or isinstance(n.value, ast.Name) and n.value.id == "Model":
                return n.lineno, f"binding {qual or 'Model'}"
    return None


def namespace_of(ctx: Context, node: ast.AST, protected: tuple[str, ...]) -> Optional[str]:
    """`torch.__dict__` or `vars(torch)` for a protected module, as text; else None."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__" and matches(ctx.qualname(node.value), protected):
        return f"{ctx.qualname(node.value)}.__dict__"
    if isinstance(node, ast.Call) and ctx.builtin(node.func) == "vars" and node.args \
            and matches(ctx.qualname(node.args[0]), protected):
        return f"vars({ctx.qualname(node.args[0])})"
    return None


def patched_target(ctx: Context, t: ast.expr, protected: tuple[str, ...], exempt: tuple[str, ...],
                   critical: frozenset[str]) -> Optional[str]:
    """What shared object an assignment/del target modifies, or None for the candidate's own objects.
    `critical` attribute names count on any object but self: a module passed in as a parameter or
    loop variable cannot be resolved, but nobody's own object has a `.synchronize` to overwrite."""
    if isinstance(t, ast.Attribute):
        owner = ctx.qualname(t.value)
        if matches(owner, protected):
            return f"{owner}.{t.attr}"
        if t.attr in critical and not is_self(t.value):
            return f"{ast.unparse(t)} (a timing/comparison attribute)"
        # type(x).__eq__ = f / x.__class__.f = g / x.__class__ = Fake: changes a class the evaluator uses
        obj = t.value
        if isinstance(obj, ast.Call) and ctx.builtin(obj.func) == "type" and obj.args and not is_self(obj.args[0]) \
                or isinstance(obj, ast.Attribute) and obj.attr == "__class__" and not is_self(obj.value) \
                or t.attr == "__class__" and not is_self(obj):
            return f"the class of an object ({ast.unparse(t)})"
    elif isinstance(t, ast.Subscript):
        namespace = namespace_of(ctx, t.value, protected)
        qual = ctx.qualname(t.value)
        if namespace or matches(qual, protected) and not matches(qual, exempt):
            return f"{namespace or qual}[...]"
    return None


def patching_call(ctx: Context, call: ast.Call, protected: tuple[str, ...], critical: frozenset[str]) -> Optional[str]:
    """setattr/delattr/__setattr__/__dict__.update/mock.patch on a protected module (or of a
    `critical` name on anything but self), or a torch.library registration for aten ops; as text."""
    f, fname = call.func, ctx.builtin(call.func)
    if fname in ("setattr", "delattr") and call.args and matches(ctx.qualname(call.args[0]), protected):
        return f"{fname}({ctx.qualname(call.args[0])}, ...)"
    if fname in ("setattr", "delattr") and len(call.args) > 1 and not is_self(call.args[0]) \
            and isinstance(call.args[1], ast.Constant) and call.args[1].value in critical:
        return f"{fname}(..., {call.args[1].value!r})"
    if isinstance(f, ast.Attribute) and f.attr in ("__setattr__", "__delattr__"):
        explicit = ctx.qualname(f.value) in ("builtins.object", "builtins.type") and call.args
        obj = ctx.qualname(call.args[0] if explicit else f.value)
        if matches(obj, protected):
            return f"{obj}.{f.attr}(...)"
    if isinstance(f, ast.Attribute) and f.attr in MUTATORS and namespace_of(ctx, f.value, protected):
        return f"{namespace_of(ctx, f.value, protected)}.{f.attr}(...)"
    qual = ctx.qualname(f)
    if matches(qual, ("unittest.mock.patch", "mock.patch")) and call.args:
        arg = call.args[0]
        target = arg.value if isinstance(arg, ast.Constant) else ctx.qualname(arg)
        if isinstance(target, str) and matches(target, protected):
            return f"{qual}({target})"
    if matches(qual, ("torch.library",)) and any(
            isinstance(a, ast.Constant) and str(a.value).startswith("aten") for a in call.args):
        return f"{qual} on aten ops"
    return None


_ENVIRON = ("os.environ", "os.environb")
_NAMESPACE_BUILTINS = ("globals", "locals", "vars")
_WRITE_MODE = re.compile(r"^[rbtU]*[wax+][rwxabtU+]*$")


def _scope_dict(ctx: Context, node: ast.AST) -> bool:
    """`globals()`, `locals()` or an argument-less `vars()`: the live namespace of the module."""
    return isinstance(node, ast.Call) and ctx.builtin(node.func) in _NAMESPACE_BUILTINS and not node.args


def write_call(ctx: Context, call: ast.Call, writers: tuple[str, ...]) -> Optional[str]:
    """A call that writes files or the environment, or writes through globals(); as text."""
    f, qual = call.func, ctx.qualname(call.func)
    if matches(qual, writers):
        return f"calls {qual}"
    if isinstance(f, ast.Attribute) and f.attr in MUTATORS and (
            matches(ctx.qualname(f.value), _ENVIRON) or _scope_dict(ctx, f.value)):
        return f"mutates {ast.unparse(f.value)} via .{f.attr}()"
    if isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes"):
        return f"writes a file via .{f.attr}()"
    is_open = qual in ("builtins.open", "io.open", "codecs.open", "os.fdopen")
    if is_open or isinstance(f, ast.Attribute) and f.attr == "open":
        mode = next((k.value for k in call.keywords if k.arg == "mode"), None)
        if mode is None and is_open and len(call.args) > 1:
            mode = call.args[1]
        modes = [mode] if mode is not None else [] if is_open else call.args
        for m in modes:  # a generic `.open(...)` (Path, tarfile): any constant that looks like a mode
            if isinstance(m, ast.Constant) and isinstance(m.value, str) and _WRITE_MODE.match(m.value) \
                    or is_open and not isinstance(m, ast.Constant):
                return f"opens a file for writing ({ast.unparse(m)})"
    return None


def write_target(ctx: Context, t: ast.expr) -> Optional[str]:
    """`os.environ[k] = v` / `globals()[k] = v` (or del), as text."""
    if isinstance(t, ast.Subscript):
        if matches(ctx.qualname(t.value), _ENVIRON):
            return "writes os.environ"
        if _scope_dict(ctx, t.value):
            return f"writes {ast.unparse(t.value)}[...]"
    return None


def state_write(ctx: Context, node: ast.AST, me: Optional[str], local: set[str]) -> Optional[str]:
    """A write that outlives the call: to self (`me`), a global, or a module-level container."""
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return f"declares {type(node).__name__.lower()} {', '.join(node.names)}"
    for t in store_targets(node):
        base = root_name(t)
        if base is None or t is base:
            continue  # rebinding a plain local name is no state
        if base.id == me or base.id not in local and ctx.qualname(base) is None:
            return f"writes {ast.unparse(t)}"
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if me is not None and ctx.builtin(f) == "setattr" and node.args \
            and getattr(root_name(node.args[0]), "id", None) == me:
        return "calls setattr on self"
    if not isinstance(f, ast.Attribute):
        return None
    base = root_name(f.value)
    owned = base is not None and (base.id == me and f.value is not base
                                  or base.id not in local and ctx.qualname(base) is None)
    if owned and (f.attr in MUTATORS or f.attr.endswith("_") and not f.attr.startswith("_")):
        return f"mutates {ast.unparse(f.value)} via .{f.attr}()"  # a container update or in-place tensor op
    return None


def heavy_call(ctx: Context, node: ast.AST, held: dict[str, str], op: re.Pattern[str],
               module: re.Pattern[str]) -> Optional[str]:
    """A heavy PyTorch computation (`op` names functions, `module` names nn classes), as text."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return "the @ operator"
    if not isinstance(node, ast.Call):
        return None
    f, qual = node.func, ctx.qualname(node.func)
    if qual is not None:
        return qual if matches(qual, ("torch",)) and op.match(qual.rsplit(".", 1)[-1]) else None
    if isinstance(f, ast.Name) and f.id == "Model":
        return "the reference Model"
    if not isinstance(f, ast.Attribute):
        return None
    if is_self(f.value) and f.attr in held:
        return f"self.{f.attr} ({held[f.attr]})" if module.match(held[f.attr].rsplit(".", 1)[-1]) else None
    if op.match(f.attr) and owner_name(f.value) not in ctx.extension_names:  # `ext.matmul` is the candidate's own
        return f"tensor method .{f.attr}()"
    return None


_EMPTY = ("torch.empty", "torch.empty_like", "torch.empty_strided")
# Legacy constructors: `torch.Tensor(3, 4)` / `torch.cuda.FloatTensor(n)` allocate without filling.
_LEGACY_TENSOR = re.compile(r"^torch\.(cuda\.)?(\w*Tensor)$")
_KEEPS_MEMORY = {"to", "cuda", "cpu", "contiguous", "view", "reshape", "float", "half", "bfloat16", "type",
                 "flatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "expand", "as_strided"}
_READ_ONLY = {"size", "numel", "dim", "stride", "element_size", "nelement", "is_contiguous", "get_device",
              *_KEEPS_MEMORY}


def strip_views(expr: Optional[ast.AST]) -> Optional[ast.AST]:
    """`out.view(-1).to(x)` -> `out`: calls that return the same (or a view of the same) memory."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _KEEPS_MEMORY:
        expr = expr.func.value
    return expr


def empty_alloc(ctx: Context, expr: Optional[ast.AST]) -> bool:
    """torch.empty*(...), x.new_empty(...), torch.Tensor(*shape), maybe followed by .view()/.to()."""
    expr = strip_views(expr)
    if not isinstance(expr, ast.Call):
        return False
    qual = ctx.qualname(expr.func)
    legacy = bool(qual and _LEGACY_TENSOR.match(qual)) and bool(expr.args) \
        and not isinstance(expr.args[0], (ast.List, ast.Tuple, ast.ListComp))  # a list literal is data
    return qual in _EMPTY or legacy or \
        isinstance(expr.func, ast.Attribute) and expr.func.attr in ("new_empty", "new_empty_strided", "new")


def filled_names(ctx: Context, func: ast.AST) -> set[str]:
    """Names that may have been written: passed to a call, written into, or rebound to something else.
    Deliberately generous (no flow analysis): the rule is a warning and must not cry wolf."""
    names: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            for arg in node.args + [k.value for k in node.keywords]:
                names |= {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
            receiver = root_name(node.func.value) if isinstance(node.func, ast.Attribute) else None
            if receiver is not None and node.func.attr not in _READ_ONLY:  # type: ignore[union-attr]
                names.add(receiver.id)
        for t in store_targets(node):
            base = root_name(t)
            if base is not None and (t is not base or not empty_alloc(ctx, getattr(node, "value", None))):
                names.add(base.id)
    return names
