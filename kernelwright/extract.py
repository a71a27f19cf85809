"""Find the Python program in a model's answer (or in a candidate file). The one place for this.

Answers arrive as markdown with fenced blocks, sometimes several, sometimes cut off before the
closing fence (a model that looped until its token limit). The block that defines `ModelNew`
wins; otherwise the longest block. Plain Python is returned as it is.

The text is a model's (and so a candidate's) choice: it is read with `str.find` and regular
expressions that cannot backtrack (one line at a time, anchored), never a pattern whose cost grows
faster than the text.
"""

from __future__ import annotations

import re
from typing import Optional

from kernelwright import pyast

_FENCE = "```"
_LANG = re.compile(r"[ \t]*([\w+#-]*)")  # the info string's first word, on the fence's own line
_PY_LANGS = {"", "python", "py", "python3"}
_CODE_LINE = re.compile(r"^[ \t]*(?:import |from \S+ import |class |def )", re.M)


def _parses(text: str) -> bool:
    try:
        pyast.parse(text)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # absurd nesting is no program either
        return False


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block in order; an unterminated last fence runs to the
    end of the text. The one fence reader: candidates here, scaffold regions in scaffold/splice.py.
    A fence opens at three backticks followed, on the same line, by the info string; its body runs
    from the next line to the next three backticks."""
    blocks: list[tuple[str, str]] = []
    at = 0
    while True:
        opens = text.find(_FENCE, at)
        if opens < 0:
            return blocks
        line_end = text.find("\n", opens + len(_FENCE))
        if line_end < 0:
            return blocks  # a fence without a line after it opens nothing
        m = _LANG.match(text, opens + len(_FENCE), line_end)
        lang = m.group(1) if m else ""
        closes = text.find(_FENCE, line_end + 1)
        if closes < 0:
            blocks.append((lang, text[line_end + 1:]))
            return blocks
        blocks.append((lang, text[line_end + 1:closes]))
        at = closes + len(_FENCE)


def code_blocks(text: str) -> list[str]:
    """Fenced Python blocks in order."""
    return [body for lang, body in fenced_blocks(text) if lang.lower() in _PY_LANGS and body.strip()]


def extract_code(text: Optional[str]) -> Optional[str]:
    """The candidate program in `text`, or None when there is no code at all."""
    if not text or not text.strip():
        return None
    if "```" not in text and _parses(text):
        return text
    blocks = code_blocks(text)
    if not blocks:
        return text if _looks_like_code(text) else None
    with_model = [b for b in blocks if re.search(r"\bModelNew\b", b)]
    pool = with_model or blocks
    return max(pool, key=len)


def _looks_like_code(text: str) -> bool:
    return bool(_CODE_LINE.search(text))
