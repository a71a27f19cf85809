"""The package's functions stay short enough to read whole: none over MAX_LINES lines, counted from
its `def` (decorators excluded) to its last line, nested functions inside it included. A longer one
is split where a reader would name the parts."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kernelwright"
MAX_LINES = 80

def _lengths() -> dict[str, int]:
    """Every function and method of the package by `path::Qualified.name`, with its length in lines."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                assert child.end_lineno is not None
                lengths[f"{where}::{name}"] = child.end_lineno - child.lineno + 1
                visit(child, name + ".", where)
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".", where)
            else:
                visit(child, prefix, where)

    for path in sorted(ROOT.rglob("*.py")):
        visit(ast.parse(path.read_text(), str(path)), "", path.relative_to(ROOT).as_posix())
    return lengths


def test_no_function_over_the_limit() -> None:
    long = {name: n for name, n in _lengths().items() if n > MAX_LINES}
    assert not long, f"functions over {MAX_LINES} lines (split them where a reader would name the parts): " + \
        ", ".join(f"{name} ({n})" for name, n in sorted(long.items()))


def test_the_count_sees_methods_and_nested_functions() -> None:
    lengths = _lengths()
    assert "evaluate/judge.py::Judge.run" in lengths and "evaluate/judge.py::main" in lengths
    # functions inside methods are walked too (each counts alone and within its parent)
    assert any(name.split("::")[1].count(".") >= 2 for name in lengths)
