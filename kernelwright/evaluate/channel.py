"""The result pipe from the evaluating process to its parent (sandbox.py reads it).

One JSON message per line, each carrying the nonce handed over on stdin: `stage_start`, `stage`
(name, seconds, ok, detail) and one final `result`. Written by the judge, which alone holds the pipe.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Any, Iterator

from kernelwright.evaluate.candidate_load import Finish


class Channel:
    def __init__(self, fd: int, nonce: str):
        self.fd, self.nonce = fd, nonce

    def send(self, **msg: Any) -> None:
        data = json.dumps({**msg, "nonce": self.nonce}, default=str).encode()
        # A leading newline re-synchronises the stream if a candidate wrote a partial line here.
        os.write(self.fd, b"\n" + data + b"\n")

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Reports a stage's start, and its end: seconds, ok, and the verdict or exception it ended with."""
        self.send(type="stage_start", name=name)
        start = time.monotonic()
        ok, detail = False, None
        try:
            yield
            ok = True
        except Finish as f:
            detail = f.verdict
            raise
        except BaseException as e:  # noqa: BLE001 - reported as a stage failure, then re-raised
            detail = type(e).__name__
            raise
        finally:
            self.send(type="stage", name=name, seconds=round(time.monotonic() - start, 4), ok=ok, detail=detail)
