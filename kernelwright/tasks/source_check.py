"""Read a task file and check its shape by AST, never importing it.

Task code only ever runs inside the evaluator's sandbox, so the loader must not execute it: a
file is accepted when it parses and defines ``class Model``, ``def get_inputs`` and
``def get_init_inputs`` at module level.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from kernelwright import pyast
from kernelwright.tasks.errors import TaskError

REQUIRED: tuple[tuple[type, str], ...] = (
    (ast.ClassDef, "Model"),
    (ast.FunctionDef, "get_inputs"),
    (ast.FunctionDef, "get_init_inputs"),
)


def _module_level(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements that run at import time, including those inside module-level if/try/with."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.With)):
            yield from _module_level(node.body)
            yield from _module_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)


def parse_source(text: str, where: str) -> ast.Module:
    try:
        return pyast.parse(text, filename=where)
    except SyntaxError as exc:
        raise TaskError(f"{where}: not valid Python: line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # e.g. null bytes, which some Python versions report this way
        raise TaskError(f"{where}: not valid Python: {exc}") from None


def missing_definitions(tree: ast.Module) -> list[str]:
    """The required definitions ``tree`` lacks, as ``"class Model"`` / ``"def get_inputs"``."""
    found = {(type(node), node.name) for node in _module_level(tree.body) if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    return [f"{'class' if kind is ast.ClassDef else 'def'} {name}" for kind, name in REQUIRED if (kind, name) not in found]


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise TaskError(f"cannot read {path}: {exc.strerror or exc}") from None


def require_task_shape(text: str, where: str) -> None:
    """Raise TaskError unless ``text`` parses and defines everything a task needs."""
    missing = missing_definitions(parse_source(text, where))
    if missing:
        raise TaskError(
            f"{where}: not a task file: missing {', '.join(missing)} "
            "(a task defines class Model, def get_inputs and def get_init_inputs)"
        )


def read_task_source(path: Path) -> str:
    """The full text of the task file at ``path``, after checking it is a well-formed task."""
    text = read_text(path)
    require_task_shape(text, str(path))
    return text
