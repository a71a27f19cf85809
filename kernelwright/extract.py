"""Find the Python program in a model's answer (or in a candidate file). The one place for this.

Answers arrive as markdown with fenced blocks, sometimes several, sometimes cut off before the
closing fence (a model that looped until its token limit). The block that defines `ModelNew`
wins; otherwise the longest block. Plain Python is returned as it is.
"""

from __future__ import annotations

import re
from typing import Optional

from kernelwright import pyast

_FENCE = re.compile(r"```[ \t]*([\w+#-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_PY_LANGS = {"", "python", "py", "python3"}


def _parses(text: str) -> bool:
    try:
        pyast.parse(text)
        return True
    except (SyntaxError, ValueError):
        return False


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block in order; an unterminated last fence runs to the
    end of the text. The one fence reader: candidates here, scaffold regions in scaffold/splice.py."""
    return _FENCE.findall(text)


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
    return bool(re.search(r"^\s*(import |from \S+ import |class |def )", text, re.M))
