"""Record what a backend answers to a JSONL file, and answer from such a file later.

Each line is one `Recording`: a request, the model it went to, and the completions that came
back. Its key is the sha256 of the canonical JSON of the messages, the sampling parameters and
the model name, so a replayed run gets exactly the answers the recorded run got. A request that
was never recorded is an error naming its key: a replay never makes an answer up.

One looseness, for the judge's measurements: every check draws its inputs from secret seeds, so
the numbers a feedback prompt quotes (max abs diff, relative error, timings) differ from run to
run. A request that matches no recording exactly is matched with its measurements masked
(`loose_key`): the same prompt with other measurements gets the recorded answer. A measurement is
told from a size or a line number by its form: kernelwright writes every one with a decimal point
or an exponent (`records.measured`), and a count that depends on the draw as a share.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kernelwright.llm.base import Backend, BackendError, Completion, GenerationRequest, check_counts
from kernelwright.records import MEASUREMENT

log = logging.getLogger(__name__)


def request_key(request: GenerationRequest, model: str) -> str:
    # A request without a grammar keys as it did before the field existed: old recordings replay.
    payload = {"model": model, **request.model_dump(mode="json", exclude={"grammar"} if request.grammar is None else None)}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def loose_key(request: GenerationRequest, model: str) -> str:
    """request_key with the measurements of the messages ("6.79", "124.0", "1e-05") masked; a
    plain integer (a size, a line number) stays part of the key."""
    masked = request.model_copy(update={"messages": tuple(m.model_copy(update={"content": MEASUREMENT.sub("#", m.content)})
                                                          for m in request.messages)})
    return "loose:" + request_key(masked, model)


class Recording(BaseModel):
    key: str
    model: str
    request: GenerationRequest
    completions: list[Completion]
    recorded_at: float  # unix time


def read_recordings(path: Path) -> list[Recording]:
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Recording.model_validate_json(line))
            except ValidationError as e:
                raise BackendError(f"{path}:{lineno}: not a recording ({e.error_count()} errors)") from None
    return out


class ReplayBackend:
    """Answers from a recording file. Several recordings of one key (a request without a seed,
    sent twice) are served in order; after the last, the last one repeats."""

    def __init__(self, path: str | Path, model: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise BackendError(f"replay file not found: {self.path}")
        recordings = read_recordings(self.path)
        models = sorted({r.model for r in recordings})
        if model is None:
            if len(models) > 1:
                raise BackendError(
                    f"{self.path} holds several models ({', '.join(models)}); pick one: replay:FILE#MODEL"
                )
            model = models[0] if models else "unknown"
        self.model = model
        self._by_key: dict[str, list[list[Completion]]] = defaultdict(list)
        for r in recordings:
            if r.model == model:
                self._by_key[r.key].append(r.completions)
                self._by_key[loose_key(r.request, model)].append(r.completions)
        self._served: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, target: str, options: Mapping[str, str]) -> ReplayBackend:
        from kernelwright.llm.registry import take_options

        return cls(target, **take_options(options, {"model": str}, "replay"))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        results = []
        with self._lock:
            for req in requests:
                key = request_key(req, self.model)
                if key not in self._by_key:
                    key = loose_key(req, self.model)
                answers = self._by_key.get(key)
                if not answers:
                    raise BackendError(
                        f"no recording for request {request_key(req, self.model)} (model {self.model}) in {self.path}; "
                        "record it first with record:FILE=SPEC"
                    )
                i = min(self._served[key], len(answers) - 1)
                self._served[key] += 1
                results.append(list(answers[i]))
        check_counts(requests, results, f"replay {self.path}")
        return results


class RecordingBackend:
    """Wraps any backend and appends each answered request to a JSONL file, flushed per line so
    that a run that dies half-way keeps everything answered before it died."""

    def __init__(self, path: str | Path, inner: Backend) -> None:
        self.path = Path(path)
        self.inner = inner
        self.model = inner.model
        # what a study asks of the backend it shares (llm/coalesce.py, study/runner.py)
        self.device = getattr(inner, "device", None)
        self.batches_requests = getattr(inner, "batches_requests", False)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        results = self.inner.generate(requests)
        now = time.time()
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            for req, completions in zip(requests, results, strict=True):
                rec = Recording(
                    key=request_key(req, self.model), model=self.model, request=req,
                    completions=completions, recorded_at=now,
                )  # fmt: skip
                f.write(rec.model_dump_json() + "\n")
                f.flush()
        return results

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
