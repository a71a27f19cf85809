"""CoalescingBackend: concurrent callers share inner calls, each gets exactly its own answers."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelwright.llm.base import BackendError, Completion, GenerationRequest
from kernelwright.llm.coalesce import CoalescingBackend


class EchoBackend:
    """A test double: answers each request with its own prompt, n times; slow, like a GPU call."""

    model = "echo"

    def __init__(self, delay: float = 0.3, fail_on: str | None = None) -> None:
        self.delay, self.fail_on = delay, fail_on
        self.calls: list[list[str]] = []
        self.inside = 0
        self.most_inside = 0
        self._guard = threading.Lock()

    def generate(self, requests):
        with self._guard:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            prompts = [r.messages[-1].content for r in requests]
            self.calls.append(prompts)
            time.sleep(self.delay)
            if self.fail_on in prompts:
                raise BackendError(f"refused {self.fail_on}")
            return [[Completion(text=f"{r.messages[-1].content}#{i}", finish_reason="stop", prompt_tokens=1,
                                completion_tokens=1, latency_s=self.delay) for i in range(r.n)] for r in requests]
        finally:
            with self._guard:
                self.inside -= 1


def ask(backend, prompt: str, n: int = 1) -> list[str]:
    return [c.text for c in backend.generate([GenerationRequest.chat(prompt, n=n)])[0]]


def test_concurrent_callers_are_served_together_and_get_their_own_answers():
    inner = EchoBackend()
    shared = CoalescingBackend(inner)
    start = threading.Barrier(8)

    def one(i: int) -> list[str]:
        start.wait()
        return ask(shared, f"p{i}", n=1 + i % 3)

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(8)))
    assert got == [[f"p{i}#{k}" for k in range(1 + i % 3)] for i in range(8)]
    # the first caller runs alone; everyone who arrived meanwhile goes in the next call
    assert inner.most_inside == 1
    assert len(inner.calls) < 8 and shared.largest >= 2
    assert sorted(p for call in inner.calls for p in call) == sorted(f"p{i}" for i in range(8))


def test_a_bad_request_fails_only_its_own_caller():
    inner = EchoBackend(fail_on="bad")
    shared = CoalescingBackend(inner)
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(ask, shared, "first")
        time.sleep(0.1)  # "first" is in the model; the next two wait and go in one call together
        bad, other = pool.submit(ask, shared, "bad"), pool.submit(ask, shared, "other")
        assert first.result() == ["first#0"]
        with pytest.raises(BackendError, match="refused bad"):
            bad.result()
        assert other.result() == ["other#0"]  # its shared call failed; served alone, it is answered
    assert sorted(inner.calls[1]) == ["bad", "other"] and sorted(map(tuple, inner.calls[2:])) == [("bad",), ("other",)]
    assert ask(shared, "good") == ["good#0"]


def test_one_caller_alone_is_one_inner_call_per_request_list():
    inner = EchoBackend(delay=0.0)
    shared = CoalescingBackend(inner)
    out = shared.generate([GenerationRequest.chat("a"), GenerationRequest.chat("b", n=2)])
    assert [[c.text for c in row] for row in out] == [["a#0"], ["b#0", "b#1"]]
    assert inner.calls == [["a", "b"]] and shared.calls == 1


def test_a_lingering_leader_takes_callers_that_start_a_moment_later():
    inner = EchoBackend(delay=0.0)
    shared = CoalescingBackend(inner, linger_s=0.5)
    with ThreadPoolExecutor(3) as pool:
        futures = []
        for i in range(3):
            futures.append(pool.submit(ask, shared, f"p{i}"))
            time.sleep(0.1)
        assert [f.result() for f in futures] == [[f"p{i}#0"] for i in range(3)]
    assert len(inner.calls) == 1 and sorted(inner.calls[0]) == ["p0", "p1", "p2"]
