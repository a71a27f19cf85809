"""Level and problem-id selectors of a task spec: ``1``, ``1-10``, ``1-5,7``; empty or ``*`` is all."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from kernelwright.tasks.errors import TaskError

_PART = re.compile(r"^(\d+)(?:-(\d+))?$")
_ALL = ("", "*", "all")


@dataclass(frozen=True)
class NumberSet:
    """A union of closed integer ranges; ``spans is None`` means every number."""

    spans: Optional[tuple[tuple[int, int], ...]]
    text: str

    def __contains__(self, number: int) -> bool:
        if self.spans is None:
            return True
        return any(lo <= number <= hi for lo, hi in self.spans)

    @property
    def is_all(self) -> bool:
        return self.spans is None


EVERYTHING = NumberSet(spans=None, text="*")


def parse_numbers(text: Optional[str], what: str, spec: str) -> NumberSet:
    """Parse ``text`` (e.g. ``"1-10,12"``) naming ``what`` (``"level"``/``"id"``) inside ``spec``."""
    if text is None or text.strip() in _ALL:
        return EVERYTHING
    spans: list[tuple[int, int]] = []
    for part in text.split(","):
        match = _PART.match(part.strip())
        if match is None:
            raise TaskError(f"malformed {what} selector {text!r} in spec {spec!r}: expected numbers and ranges like 1-10,12")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) is not None else lo
        if hi < lo:
            raise TaskError(f"malformed {what} range {part.strip()!r} in spec {spec!r}: the end is below the start")
        spans.append((lo, hi))
    return NumberSet(spans=tuple(spans), text=text.strip())
