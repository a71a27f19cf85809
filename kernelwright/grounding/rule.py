"""The state one grounding rule works on: the parsed code, name resolution, and what the rule wants
changed (edits) or said (notes). `grounding.ground` runs one Pass per rule and applies its edits."""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from kernelwright.grounding.literals import Bindings, LiteralEdits, Resolved, Resolver
from kernelwright.grounding.text import Code, Edit

MODULE_DUNDERS = frozenset({"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__",
                            "__builtins__", "__annotations__", "__dict__", "__class__"})


@dataclass
class Note:
    """What a pass found: a repair it made (repaired=True) or a problem it leaves to the model."""

    rule: str
    message: str
    at: Optional[int]  # offset in this pass's code
    repaired: bool
    severity: str = "error"  # for problems: "error", or "warning" when it would not stop a build


class Pass:
    """The state one rule works on: the parsed code, name resolution, and what it wants changed."""

    def __init__(self, code: Code, target: str) -> None:
        from kernelwright.astutil import Context

        self.code = code
        self.target = target
        self.ctx = Context(code.tree)
        self.bindings = Bindings(code)
        self.resolver = Resolver(code, self.bindings)
        self.edits: list[Edit] = []
        self.literals = LiteralEdits()
        self.notes: list[Note] = []

    def repaired(self, rule: str, message: str, at: Optional[int]) -> None:
        self.notes.append(Note(rule, message, at, True, "warning"))

    def problem(self, rule: str, message: str, at: Optional[int], severity: str = "error") -> None:
        self.notes.append(Note(rule, message, at, False, severity))

    def at(self, node: ast.AST) -> int:
        return self.code.span(node)[0]

    def source_offset(self, res: Resolved, text_offset: int) -> int:
        """The code offset of a position inside a resolved source (exact for literals without escapes)."""
        for piece in res.pieces:
            if piece.lit is not None and piece.offset <= text_offset <= piece.offset + len(piece.text):
                lit = piece.lit
                return min(lit.end, lit.start + len(lit.prefix) + len(lit.quote) + text_offset - piece.offset)
        return self.at(res.expr)

    @cached_property
    def bound_names(self) -> set[str]:
        """Every name the module binds anywhere (any scope): a name outside this set is a NameError."""
        bound: set[str] = set(self.bindings.counts)
        for node in self.ctx.nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and getattr(node, "name", None):
                bound.add(node.name)  # type: ignore[arg-type]
        return bound

    def is_unbound(self, name: str) -> bool:
        return name not in self.bound_names and not hasattr(builtins, name) and name not in MODULE_DUNDERS

    def all_edits(self) -> list[Edit]:
        return self.edits + self.literals.code_edits(self.code.text)
