"""`ast.parse`, one thread at a time.

CPython before 3.13 (gh-106905) keeps the AST converter's recursion depth in state that all threads
share: two threads parsing at once can fail with "SystemError: AST constructor recursion depth
mismatch" (seen here: a study's cell threads grounding candidates while others extracted theirs).
Every parse of candidate or task code in a process with threads goes through `parse`.
"""

from __future__ import annotations

import ast
import threading

_lock = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _lock:
        return ast.parse(source, filename=filename)
