"""What search writes in an attempt's notes["search"], as records: a drawn sample's fate, a
composed region's sources, a launch variant's origin. `dump()` gives the JSON the attempt keeps
(the key order and the keys left out when unset are part of the record: replays compare them)."""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict

from kernelwright.scaffold.precheck.types import PrecheckResult


class _Note(BaseModel):
    model_config = ConfigDict(frozen=True)

    # fields written only where they say something (absent, not null, in the record)
    _only_when_set: ClassVar[frozenset[str]] = frozenset()

    def dump(self) -> dict[str, Any]:
        out = self.model_dump(mode="json")
        return {k: v for k, v in out.items() if k not in self._only_when_set or v is not None}


class SampleNote(_Note):
    """A drawn answer among its turn's samples: how many were drawn, how many drew the same region
    (on the first of them), which it repeats, whether it was built, whether it was sampled under the
    grammar, and its pre-check (None: not pre-checked)."""

    drawn: int
    votes: int
    duplicate_of: Optional[int]
    built: bool
    constrained: bool
    precheck: Optional[PrecheckResult]
    seen_before: Optional[bool] = None  # True: refuted or built in an earlier turn
    shared_build: Optional[int] = None  # judged as one of this many programs of one extension
    line: Optional[int] = None  # searched a line at a time: the line (1-based) and how many there are
    lines: Optional[int] = None

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"seen_before", "shared_build", "line", "lines"})


class ComposedNote(_Note):
    """A region composed from lines that passed their pre-checks: the attempts it was composed
    from, whether it was built, and its own pre-check as a whole."""

    composed: list[str]
    built: bool
    duplicate_of: None = None
    drawn: int = 0  # no model call of its own
    precheck: PrecheckResult


class TuneNote(_Note):
    """A verified kernel timed under other launch settings (`tune`: the knobs) or in its library
    twin; `of`: the verified attempt; `compile_baseline_of`: whose compile baseline it is timed against."""

    tune: dict[str, Any]
    of: str
    compile_baseline_of: Optional[str] = None

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"compile_baseline_of"})
