"""The package's import graph: no cycles between modules, and no import from a lower layer to a
higher one (../shared/ARCHITECTURE.md: folders in pipeline order, each importing only from below).

Every `import` and `from ... import` in the package counts, also those inside functions (a lazy
import still ties the two modules together); only those under `if TYPE_CHECKING:` do not (no module
ever loads them). `from pkg import name` is an edge to `pkg.name` when
that is a module (importing a submodule is not a dependency on the package's other contents).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kernelwright"

# The layers, low to high: a module may import from its own layer and the layers before it. The
# spine holds the records and the primitives every stage shares (devices and their locks, child
# processes, OS confinement); measure/ is how the judge, the analysis and the scaffold feed,
# compare and time a forward.
LAYERS = [
    {"kernelwright", "records", "errors", "events", "device", "devmem", "child", "pyast", "astutil", "extract",
     "confine", "confine_mounts"},
    {"measure"},
    {"tasks"},
    {"analysis"},
    {"knowledge"},
    {"prompts"},
    {"llm"},
    {"scaffold"},
    {"grounding"},
    {"evaluate"},
    {"executors"},
    {"strategies"},
    {"study"},
    {"optimize"},
    {"report"},
    {"cli"},
]
# Upward imports that remain; no new entry belongs here.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking_only(node):
                node.body = []  # a type checker's import: no module loads it, so it ties nothing together
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _source(node, package)
                subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in mods]
                targets = subs + ([source] if len(subs) < len(node.names) else [])
            for target in targets:
                found = known(target) if target.startswith("kernelwright") else None
                if found and found != name:
                    edges[name].add(found)
    return edges


def _source(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` reads from, a relative one resolved against `package`."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer(module: str) -> int:
    unit = _unit(module)
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"{module}: its folder {unit!r} has no layer in LAYERS (add it where it belongs)")


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert _cycles(_edges(_modules())) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_runs_up_the_layers():
    edges = _edges(_modules())
    upward = sorted((a, b) for a, targets in edges.items() for b in targets if _layer(b) > _layer(a))
    new = [f"{a} -> {b}" for a, b in upward if (a, b) not in KNOWN_UPWARD]
    assert not new, "imports from a lower layer to a higher one:\n" + "\n".join(new)
    gone = sorted(KNOWN_UPWARD - set(upward))
    assert not gone, f"no longer imported, remove from KNOWN_UPWARD: {gone}"


def test_the_scaffold_oracle_answers_no_task():
    """The oracle writes a correct region from the reference itself: a stage that imported it could
    hand the model's job to the system. Only tests and benchmarks use it."""
    edges = _edges(_modules())
    users = sorted(a for a, targets in edges.items() if "kernelwright.scaffold.oracle" in targets)
    assert users == [], users


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_reaches(mods: dict[str, Path]) -> list[str]:
    """Every place a module takes another module's private name (`_x`, not a dunder): imported by
    name (`from kernelwright.m import _x`), or read through the module (`m._x` after
    `from kernelwright import m` or `import kernelwright.m as m`). A name another module needs is
    that module's public interface, and should be named as such."""
    found: list[tuple[str, int, str]] = []
    for name, path in sorted(mods.items()):
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}  # a local name bound to a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _source(node, package)
                if not source.startswith("kernelwright") or source == name:
                    continue
                for a in node.names:
                    if f"{source}.{a.name}" in mods:
                        aliases[a.asname or a.name] = f"{source}.{a.name}"
                    elif _private(a.name):
                        found.append((name, node.lineno, f"imports {a.name} from {source}"))
            elif isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in mods})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)
                    and aliases.get(node.value.id, name) != name):
                found.append((name, node.lineno, f"reads {node.value.id}.{node.attr} ({aliases[node.value.id]})"))
    return [f"{name}:{line} {what}" for name, line, what in sorted(found)]


def test_no_module_takes_another_modules_private_name():
    found = _private_reaches(_modules())
    assert not found, "private names used outside their module (make them public there):\n" + "\n".join(found)


def test_the_private_name_finder_finds_both_ways(tmp_path):
    pkg = tmp_path / "kernelwright"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "home.py").write_text("_hidden = 1\n__all__ = []\n")
    (pkg / "sub" / "user.py").write_text(
        "from kernelwright.sub.home import _hidden, __all__\nfrom .home import _hidden as h\n"
        "from kernelwright.sub import home\nimport torch._dynamo\nx = home._hidden + home.__all__\n")
    mods = {".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
            for p in pkg.rglob("*.py")}
    assert _private_reaches(mods) == [
        "kernelwright.sub.user:1 imports _hidden from kernelwright.sub.home",
        "kernelwright.sub.user:2 imports _hidden from kernelwright.sub.home",
        "kernelwright.sub.user:5 reads home._hidden (kernelwright.sub.home)"]
