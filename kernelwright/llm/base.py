"""The one interface every model backend implements, and the records that cross it.

A backend takes a whole list of requests at once so that it can batch them (many prompts x n
samples in one forward pass on a GPU, concurrent HTTP calls against a server). Each request
gets back exactly `request.n` completions, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from kernelwright.errors import KernelwrightError

# Qwen's recommended sampling for the Qwen2.5-Coder instruct models. Greedy decoding of the
# small quantised models tends to loop (repeated `#include` lines until max_tokens); these
# settings stop cleanly, so they are the request defaults.
DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_P = 0.8
DEFAULT_TOP_K = 20
DEFAULT_REPEAT_PENALTY = 1.05
DEFAULT_MAX_TOKENS = 1024


class BackendError(KernelwrightError, RuntimeError):
    """A model backend cannot do what was asked. The message is one line, meant for a user."""


class ServerUnreachable(BackendError):
    """The model server cannot be reached at all (refused, no route, DNS): a fault of the setup,
    not of the request. A study stops and leaves its cells pending instead of failing them."""


def first_line(error: object) -> str:
    """The first line of an error's text: library errors can run to pages, ours stay one line."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class GenerationRequest(BaseModel):
    """One prompt (a chat) and how to sample `n` answers to it."""

    model_config = ConfigDict(frozen=True)

    messages: tuple[ChatMessage, ...]
    n: int = Field(default=1, ge=1)
    temperature: float = Field(default=DEFAULT_TEMPERATURE, ge=0.0)  # 0 means greedy
    top_p: float = Field(default=DEFAULT_TOP_P, gt=0.0, le=1.0)
    top_k: int = Field(default=DEFAULT_TOP_K, ge=0)  # 0 turns top-k filtering off
    repeat_penalty: float = Field(default=DEFAULT_REPEAT_PENALTY, gt=0.0)  # 1.0 turns it off
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    # With a seed, sample i of the request uses seed + i, so samples differ but a rerun repeats.
    seed: int | None = None
    # A GBNF grammar (llama.cpp's format) the answer must be a sentence of, e.g. a scaffold region's
    # language (scaffold/grammar.py). Backends that cannot apply it answer unconstrained and say so
    # on each Completion (`constrained`).
    grammar: str | None = None

    @classmethod
    def chat(cls, user: str, system: str | None = None, **sampling: object) -> GenerationRequest:
        """Shorthand for the common system + user prompt."""
        messages = [ChatMessage(role="system", content=system)] if system else []
        messages.append(ChatMessage(role="user", content=user))
        return cls(messages=tuple(messages), **sampling)  # type: ignore[arg-type]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def sample_seed(self, i: int) -> int | None:
        return None if self.seed is None else self.seed + i

    def messages_as_dicts(self) -> list[dict[str, str]]:
        return [m.model_dump() for m in self.messages]


class Completion(BaseModel):
    """One generated answer."""

    model_config = ConfigDict(frozen=True)

    text: str
    finish_reason: str  # "stop" (end of turn) or "length" (hit max_tokens), as servers say it
    prompt_tokens: int
    completion_tokens: int
    # Wall time of the call that produced it; for a batched call, the whole batch's time.
    latency_s: float
    # Whether the request's grammar was applied while sampling (False when there was none, or the
    # backend could not apply it; recordings made before the field read as False).
    constrained: bool = False

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.latency_s if self.latency_s > 0 else 0.0


@runtime_checkable
class Backend(Protocol):
    """What every model backend provides."""

    # Names the model for record/replay keys and logs, e.g. "qwen2.5-coder-1.5b".
    model: str

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """Returns, for each request in order, exactly `request.n` completions."""
        ...


def check_counts(requests: Sequence[GenerationRequest], results: list[list[Completion]], who: str,
                 until_deadline: bool = False) -> None:
    """Backends call this last: a short answer is a bug, never something to pass on silently
    (`until_deadline`: a backend that stopped sampling at a deadline returns 1 to n for the first
    request, 0 to n for the others)."""
    if len(results) != len(requests):
        raise BackendError(f"{who} returned {len(results)} results for {len(requests)} requests")
    for i, (req, got) in enumerate(zip(requests, results, strict=True)):
        if len(got) != req.n and not (until_deadline and (1 if i == 0 else 0) <= len(got) < req.n):
            raise BackendError(f"{who} returned {len(got)} completions for request {i}, asked for n={req.n}")


def generate_until(backend: Backend, requests: Sequence[GenerationRequest],
                   deadline: float | None) -> list[list[Completion]]:
    """`backend.generate`, stopping at `deadline` (time.monotonic()) where the backend can: one that
    draws its n samples one after another (`stops_at_deadline`) starts no new sample once the
    deadline has passed, and returns the samples drawn so far (at least one, in the first request:
    a call is never empty; the later requests of a call may get none). Others generate all n (a
    batch cannot be cut short)."""
    if deadline is not None and getattr(backend, "stops_at_deadline", False):
        return backend.generate(requests, deadline=deadline)  # type: ignore[call-arg]
    return backend.generate(requests)
