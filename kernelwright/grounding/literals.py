"""The string literals that hold a candidate's C++/CUDA sources, for grounding.

A C++ repair edits the *value* of a string literal and re-emits that one literal with its original
prefix and quotes, so a reviewer's diff shows exactly the repaired lines. `Resolver` follows a
load_inline argument through module-level names, concatenations and f-strings to the literals it is
made of; parts it cannot see are marked unknown, and rules then report instead of rewriting.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Optional, Union

from kernelwright.astutil import flat_targets, module_statements
from kernelwright.grounding.text import Code, Edit

# --- string literals -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Lit:
    """One string token in the code whose value grounding may rewrite."""

    start: int
    end: int
    prefix: str
    quote: str
    value: str

    def emit(self, value: str) -> str:
        raw = "r" in self.prefix.lower()
        if raw and _raw_ok(value, self.quote):
            return f"{self.prefix}{self.quote}{value}{self.quote}"
        prefix = self.prefix.replace("r", "").replace("R", "")
        return f"{prefix}{self.quote}{_escape(value, self.quote)}{self.quote}"


def _raw_ok(value: str, quote: str) -> bool:
    return quote not in value and not value.endswith("\\") and not value.endswith(quote[0]) \
        and (len(quote) == 3 or "\n" not in value)


def _escape(value: str, quote: str) -> str:
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n" and len(quote) == 1:
            out.append("\\n")
        elif ch in "\t\n":
            out.append(ch)
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    body = "".join(out)
    q = quote[0]
    if len(quote) == 1:
        return body.replace(q, "\\" + q)
    body = body.replace(q * 3, (q * 2) + "\\" + q)  # never three quotes in a row
    return body[:-1] + "\\" + q if body.endswith(q) else body


def literal_tokens(code: Code, node: ast.Constant) -> Optional[list[Lit]]:
    """The string tokens a str constant is made of (several for implicit concatenation), or None."""
    start, end = code.span(node)
    segment = code.text[start:end]
    wrapped = "(" + segment + ")"  # so tokens on several lines need no continuation
    starts = [0]
    for line in wrapped.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    lits: list[Lit] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(wrapped).readline):
            if tok.type == tokenize.STRING:
                a = starts[tok.start[0] - 1] + tok.start[1] - 1
                b = starts[tok.end[0] - 1] + tok.end[1] - 1
                lit = _make_lit(tok.string, start + a, start + b)
                if lit is None:
                    return None
                lits.append(lit)
            elif tok.type not in (tokenize.OP, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT,
                                  tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                return None
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    if "".join(lit.value for lit in lits) != node.value:
        return None
    return lits


def _make_lit(token: str, start: int, end: int) -> Optional[Lit]:
    i = 0
    while i < len(token) and token[i] not in "'\"":
        i += 1
    prefix, rest = token[:i], token[i:]
    if any(c in prefix.lower() for c in "bf"):
        return None
    quote = rest[:3] if rest[:3] in ('"""', "'''") else rest[:1]
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError):
        return None
    return Lit(start, end, prefix, quote, value) if isinstance(value, str) else None


# --- resolving the sources handed to load_inline ----------------------------------------------------


@dataclass
class Piece:
    text: str
    lit: Optional[Lit] = None  # editable when set
    offset: int = 0  # of this piece within the whole resolved text
    lit_offset: int = 0  # of this piece within lit.value
    known: bool = True


@dataclass
class Resolved:
    """One source string as load_inline will see it, with where each part of it is written."""

    expr: ast.expr
    pieces: list[Piece] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)

    @property
    def complete(self) -> bool:
        return all(p.known for p in self.pieces)

    def locate(self, start: int, end: int) -> Optional[tuple[Piece, int, int]]:
        """The editable piece holding text[start:end], and the range within its literal's value."""
        for p in self.pieces:
            if p.lit is not None and p.offset <= start and end <= p.offset + len(p.text):
                base = p.lit_offset - p.offset
                return p, start + base, end + base
        return None


class Bindings:
    """Module-level names bound exactly once (so their value is known where they are used)."""

    def __init__(self, code: Code) -> None:
        counts: dict[str, int] = {}
        values: dict[str, ast.expr] = {}
        for stmt in module_statements(code.tree.body):
            for target, value in _assigned(stmt):
                counts[target] = counts.get(target, 0) + 1
                if value is not None:
                    values[target] = value
        # An assignment inside a function under `global` rebinds it too.
        for node in ast.walk(code.tree):
            if isinstance(node, ast.Global):
                for name in node.names:
                    counts[name] = counts.get(name, 0) + 1
        self.values = {k: v for k, v in values.items() if counts.get(k) == 1}
        self.counts = counts

    def get(self, name: str) -> Optional[ast.expr]:
        return self.values.get(name)


def _assigned(stmt: ast.stmt) -> Iterator[tuple[str, Optional[ast.expr]]]:
    if isinstance(stmt, ast.Assign):
        single = len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        for t in flat_targets(stmt.targets):
            if isinstance(t, ast.Name):
                yield t.id, stmt.value if single else None
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        yield stmt.target.id, stmt.value
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        yield stmt.target.id, None
        yield stmt.target.id, None  # `src += more` makes the value unknowable: count twice
    elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield stmt.name, None
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for a in stmt.names:
            yield (a.asname or a.name).split(".")[0], None
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        for t in flat_targets([stmt.target]):
            if isinstance(t, ast.Name):
                yield t.id, None


class Resolver:
    """Turns a load_inline argument into the source strings it denotes."""

    MAX_DEPTH = 20

    def __init__(self, code: Code, bindings: Bindings) -> None:
        self.code, self.bindings = code, bindings

    def is_str(self, expr: ast.expr, depth: int = 0) -> bool:
        if depth > self.MAX_DEPTH:
            return False
        if isinstance(expr, ast.Constant):
            return isinstance(expr.value, str)
        if isinstance(expr, ast.JoinedStr):
            return True
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return self.is_str(expr.left, depth + 1) or self.is_str(expr.right, depth + 1)
        if isinstance(expr, ast.Name):
            value = self.bindings.get(expr.id)
            return value is not None and self.is_str(value, depth + 1)
        return False

    def sources(self, expr: Optional[ast.expr]) -> Optional[list[Resolved]]:
        """A str or a list/tuple of str: one Resolved per string; None when it is something else."""
        for _ in range(self.MAX_DEPTH):
            if expr is None:
                return None
            if isinstance(expr, ast.Name) and not self.is_str(expr):
                expr = self.bindings.get(expr.id)
                continue
            break
        if expr is None:
            return None
        if self.is_str(expr):
            return [self.string(expr)]
        if isinstance(expr, (ast.List, ast.Tuple)) and all(self.is_str(e) for e in expr.elts):
            return [self.string(e) for e in expr.elts]
        return None

    def container(self, expr: Optional[ast.expr]) -> Optional[Union[ast.List, ast.Tuple]]:
        """The list/tuple literal an argument is (directly or through a module-level name)."""
        for _ in range(self.MAX_DEPTH):
            if isinstance(expr, ast.Name):
                expr = self.bindings.get(expr.id)
                continue
            break
        return expr if isinstance(expr, (ast.List, ast.Tuple)) else None

    def string(self, expr: ast.expr) -> Resolved:
        res = Resolved(expr)
        self._pieces(expr, res.pieces, 0)
        offset = 0
        for p in res.pieces:
            p.offset = offset
            offset += len(p.text)
        return res

    def _pieces(self, expr: ast.expr, out: list[Piece], depth: int) -> None:
        if depth > self.MAX_DEPTH:
            out.append(Piece("", known=False))
        elif isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            lits = literal_tokens(self.code, expr)
            if lits is None:
                out.append(Piece(expr.value))  # known, but not safely editable
            else:
                out.extend(Piece(lit.value, lit) for lit in lits)
        elif isinstance(expr, ast.JoinedStr):
            # Python 3.11 gives an f-string's parts no positions of their own: known, not editable.
            for part in expr.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    out.append(Piece(part.value))
                elif isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None \
                        and self.is_str(part.value, depth + 1):
                    inner: list[Piece] = []
                    self._pieces(part.value, inner, depth + 1)
                    out.extend(Piece(p.text, known=p.known) for p in inner)
                else:
                    out.append(Piece("", known=False))
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            self._pieces(expr.left, out, depth + 1)
            self._pieces(expr.right, out, depth + 1)
        elif isinstance(expr, ast.Name) and self.bindings.get(expr.id) is not None:
            self._pieces(self.bindings.get(expr.id), out, depth + 1)  # type: ignore[arg-type]
        else:
            out.append(Piece("", known=False))


LitKey = tuple[int, int]
ValueEdit = tuple[int, int, str]


class LiteralEdits:
    """Edits to literal values, collected per literal and turned into code edits at the end. The same
    literal reached twice (a source variable passed to two calls) is edited once."""

    def __init__(self) -> None:
        self.lits: dict[LitKey, Lit] = {}
        self.edits: dict[LitKey, set[ValueEdit]] = {}

    def add(self, res: Resolved, start: int, end: int, text: str) -> bool:
        """Replace res.text[start:end] with text; False when that range is not editable."""
        found = res.locate(start, end)
        if found is None:
            return False
        piece, a, b = found
        lit = piece.lit
        assert lit is not None
        key = (lit.start, lit.end)
        self.lits[key] = lit
        self.edits.setdefault(key, set()).add((a, b, text))
        return True

    def code_edits(self, code: str) -> list[Edit]:
        out: list[Edit] = []
        for key, lit in self.lits.items():
            edits, pos = [], 0
            for a, b, text in sorted(self.edits[key], key=lambda e: (e[0], e[1])):
                if a < pos:
                    continue  # overlaps an earlier edit of the same literal
                edits.append((a, b, text))
                pos = b
            out += _in_place(code, lit, edits) or [Edit(lit.start, lit.end, lit.emit(_apply(lit.value, edits)))]
        return out


def _apply(value: str, edits: list[ValueEdit]) -> str:
    parts, pos = [], 0
    for a, b, text in edits:
        parts += [value[pos:a], text]
        pos = b
    return "".join(parts + [value[pos:]])


def _in_place(code: str, lit: Lit, edits: list[ValueEdit]) -> Optional[list[Edit]]:
    """One small code edit per value edit, when the literal is written exactly as its value (no escape
    sequences): untouched lines keep their place, so later messages still name the right line."""
    if code[lit.start:lit.end] != lit.emit(lit.value):
        return None
    body = lit.start + len(lit.prefix) + len(lit.quote)
    parts = [Edit(body + a, body + b, lit.emit(text)[len(lit.prefix) + len(lit.quote):-len(lit.quote)])
             for a, b, text in edits]
    rebuilt = code[lit.start:body] + _apply(code[body:lit.end - len(lit.quote)], [(e.start - body, e.end - body, e.text)
                                                                               for e in parts]) + lit.quote
    return parts if rebuilt == lit.emit(_apply(lit.value, edits)) else None


def py_string(text: str) -> str:
    """A Python literal for generated C++ text: triple-quoted when it spans lines."""
    if "\n" in text and '"""' not in text and "\\" not in text and not text.endswith('"'):
        return '"""' + text + '"""'
    return repr(text)
