"""Whether a text is in a GBNF grammar's language, in Python, without a model.

llama.cpp applies a grammar only while sampling (its parser needs a loaded vocabulary), so this is
how the tests check that a region grammar accepts the regions it must (recorded correct answers,
the suite's oracle regions) and rejects the ones it must not, and how benchmarks/grammar_yield.py
counts which unconstrained answers were in the language at all. It reads the subset of GBNF that
scaffold/grammar.py writes and llama.cpp documents: one rule a line, `"literals"` with escapes,
`[classes]` with ranges and `^`, rule names, `( )`, `|`, and the postfixes `* + ? {m} {m,} {m,n}`.
Matching computes, memoised, the set of positions each node can end at from a start position;
exact for grammars without left recursion (llama.cpp rejects those too). The Python stack grows
with the text's nesting (each parenthesis a few dozen frames), not its length: a caller matching
answers that may nest calls hundreds deep (cut off mid-loop) runs it on a deeper stack
(benchmarks/grammar_yield.py does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Union

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^"}


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    ranges: tuple[tuple[str, str], ...]
    negated: bool

    def has(self, ch: str) -> bool:
        return any(lo <= ch <= hi for lo, hi in self.ranges) != self.negated


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple["Node", ...]


@dataclass(frozen=True)
class Alt:
    options: tuple["Node", ...]


@dataclass(frozen=True)
class Rep:
    node: "Node"
    lo: int
    hi: int | None  # None: unbounded


Node = Union[Lit, Cls, Ref, Seq, Alt, Rep]


class GrammarError(ValueError):
    pass


class _Parser:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def space(self) -> None:
        while self.peek() in (" ", "\t"):
            self.i += 1

    def alternatives(self) -> Node:
        options = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self) -> Node:
        items: list[Node] = []
        self.space()
        while self.peek() and self.peek() not in "|)":
            items.append(self.postfix(self.item()))
            self.space()
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def item(self) -> Node:
        ch = self.peek()
        if ch == '"':
            return Lit(self.chars('"'))
        if ch == "[":
            self.i += 1
            negated = self.peek() == "^"
            self.i += negated
            return Cls(self.ranges(), negated)
        if ch == "(":
            self.i += 1
            node = self.alternatives()
            if self.peek() != ")":
                raise GrammarError(f"unclosed group at {self.i}")
            self.i += 1
            return node
        m = re.compile(r"[A-Za-z0-9-]+").match(self.s, self.i)
        if not m:
            raise GrammarError(f"unexpected {ch!r} at {self.i}")
        self.i = m.end()
        return Ref(m.group())

    def char(self) -> str:
        ch = self.s[self.i]
        self.i += 1
        if ch != "\\":
            return ch
        esc = self.s[self.i]
        self.i += 1
        if esc == "x":
            self.i += 2
            return chr(int(self.s[self.i - 2:self.i], 16))
        return ESCAPES[esc]

    def chars(self, quote: str) -> str:
        self.i += 1
        out = []
        while self.peek() != quote:
            if not self.peek():
                raise GrammarError("unterminated literal")
            out.append(self.char())
        self.i += 1
        return "".join(out)

    def ranges(self) -> tuple[tuple[str, str], ...]:
        out = []
        while self.peek() != "]":
            if not self.peek():
                raise GrammarError("unterminated class")
            lo = self.char()
            hi = lo
            if self.peek() == "-" and self.s[self.i + 1:self.i + 2] != "]":
                self.i += 1
                hi = self.char()
            out.append((lo, hi))
        self.i += 1
        return tuple(out)

    def postfix(self, node: Node) -> Node:
        ch = self.peek()
        if ch and ch in "*+?":
            self.i += 1
            return Rep(node, 1 if ch == "+" else 0, 1 if ch == "?" else None)
        m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.s, self.i)
        if not m:
            return node
        self.i = m.end()
        lo = int(m.group(1))
        hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
        return Rep(node, lo, hi)


def parse(text: str) -> dict[str, Node]:
    rules: dict[str, Node] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, body = line.partition("::=")
        if not sep:
            raise GrammarError(f"not a rule: {line[:60]!r}")
        p = _Parser(body)
        rules[name.strip()] = p.alternatives()
        if p.i != len(body):
            raise GrammarError(f"rule {name.strip()}: cannot read {body[p.i:p.i + 20]!r}")
    for node in rules.values():
        _check_refs(node, rules)
    return rules


def _check_refs(node: Node, rules: dict[str, Node]) -> None:
    if isinstance(node, Ref) and node.name not in rules:
        raise GrammarError(f"undefined rule {node.name}")
    for child in (node.items if isinstance(node, Seq) else node.options if isinstance(node, Alt)
                  else (node.node,) if isinstance(node, Rep) else ()):
        _check_refs(child, rules)


class Matcher:
    def __init__(self, rules: dict[str, Node], text: str) -> None:
        self.rules, self.text = rules, text
        self.memo: dict[tuple[int, int], frozenset[int]] = {}

    def ends(self, node: Node, pos: int) -> frozenset[int]:
        key = (id(node), pos)
        if key not in self.memo:
            self.memo[key] = frozenset()  # a left-recursive path back here ends nowhere
            self.memo[key] = self._ends(node, pos)
        return self.memo[key]

    def _ends(self, node: Node, pos: int) -> frozenset[int]:
        t = self.text
        if isinstance(node, Lit):
            return frozenset([pos + len(node.text)]) if t.startswith(node.text, pos) else frozenset()
        if isinstance(node, Cls):
            return frozenset([pos + 1]) if pos < len(t) and node.has(t[pos]) else frozenset()
        if isinstance(node, Ref):
            return self.ends(self.rules[node.name], pos)
        if isinstance(node, Alt):
            return frozenset().union(*(self.ends(o, pos) for o in node.options))
        if isinstance(node, Seq):
            here = frozenset([pos])
            for item in node.items:
                here = frozenset().union(*(self.ends(item, p) for p in here)) if here else here
            return here
        out, frontier, count = set(), {pos}, 0  # Rep: one more repetition a round
        if node.lo == 0:
            out.add(pos)
        while frontier and (node.hi is None or count < node.hi):
            count += 1
            nxt = set().union(*(self.ends(node.node, p) for p in frontier)) - (frontier if node.hi is None else set())
            if count >= node.lo:
                if node.hi is None:
                    nxt -= out
                out |= nxt
            frontier = nxt
        return frozenset(out)


@lru_cache(maxsize=64)
def _parsed(grammar: str) -> dict[str, Node]:
    return parse(grammar)


def matches(grammar: str, text: str, root: str = "root") -> bool:
    """Whether all of `text` is a sentence of the grammar."""
    rules = _parsed(grammar)
    return len(text) in Matcher(rules, text).ends(rules[root], 0)
