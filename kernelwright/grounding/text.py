"""Text plumbing for grounding: positions in the Python source, edits, and line mapping.

Repairs are text edits on the candidate's own source, never `ast.unparse`: comments, layout and
everything grounding does not touch stay byte for byte.
"""

from __future__ import annotations

import ast
import bisect
import logging
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Edit:
    """Replace code[start:end] with text (character offsets into one version of the code)."""

    start: int
    end: int
    text: str


class Code:
    """One version of the candidate's source with its AST and position helpers."""

    def __init__(self, text: str, tree: ast.Module) -> None:
        self.text = text
        self.tree = tree
        self.lines = text.splitlines(keepends=True)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))

    def offset(self, lineno: int, col_bytes: int) -> int:
        """ast positions count UTF-8 bytes within a line; edits need characters."""
        if lineno - 1 >= len(self.lines):
            return len(self.text)
        line = self.lines[lineno - 1]
        return self.line_starts[lineno - 1] + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)


def apply_edits(text: str, edits: Iterable[Edit]) -> tuple[str, list[Edit]]:
    """Apply non-overlapping edits; an edit overlapping one already accepted is dropped (logged)."""
    accepted: list[Edit] = []
    for e in sorted(set(edits), key=lambda e: (e.start, e.end)):
        if accepted and e.start < accepted[-1].end or (accepted and e.start == accepted[-1].start == e.end):
            log.debug("grounding: dropped an overlapping edit at %d", e.start)
            continue
        accepted.append(e)
    out, pos = [], 0
    for e in accepted:
        out.append(text[pos:e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:])
    return "".join(out), accepted


class LineMap:
    """Where each line of the original code is now, so every message can name the line the model wrote."""

    def __init__(self, text: str) -> None:
        starts = [0]
        for line in text.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.now = starts[:-1] or [0]  # current offset of each original line's start

    def update(self, edits: list[Edit]) -> None:
        shifted = []
        for off in self.now:
            delta = 0
            for e in edits:
                if e.end <= off:
                    delta += len(e.text) - (e.end - e.start)
                elif e.start < off:  # inside a replaced region: now at its start
                    delta += e.start - off
                    break
                else:
                    break
            shifted.append(off + delta)
        self.now = shifted

    def original_line(self, offset: int) -> int:
        """The original line at or just before `offset` of the current code."""
        i = bisect.bisect_right(self.now, offset)
        return max(1, i)
