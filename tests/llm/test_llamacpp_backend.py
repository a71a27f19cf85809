"""llama.cpp in-process on the small embedded model (slow: needs the model and llama-cpp-python)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kernelwright.llm import GenerationRequest, local_model, make_backend

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend(small_model: Path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'kernelwright[local]')")
    b = make_backend("gguf:qwen2.5-coder-0.5b")
    yield b
    b.close()


def test_seeded_reruns_are_byte_identical_and_samples_differ(backend) -> None:
    req = GenerationRequest.chat("Write a two-line poem about GPU kernels.", n=3, seed=5, max_tokens=32)
    first = backend.generate([req])[0]
    # another request in between leaves KV state behind; the reset before each call clears it
    backend.generate([GenerationRequest.chat("Say hi.", max_tokens=8, seed=1)])
    again = backend.generate([req])[0]
    assert [c.text for c in again] == [c.text for c in first]
    assert len({c.text for c in first}) >= 2
    assert backend.model == "qwen2.5-coder-0.5b"


def test_greedy_and_counts(backend) -> None:
    req = GenerationRequest.chat("Reply with the word OK.", temperature=0.0, n=2, max_tokens=16)
    (a, b), (c,) = backend.generate([req, req.model_copy(update={"n": 1, "max_tokens": 1})])
    assert a.text == b.text and a.finish_reason == "stop"
    assert a.prompt_tokens > 5 and 0 < a.completion_tokens <= 16 and a.latency_s > 0
    assert c.finish_reason == "length" and c.completion_tokens == 1


def test_a_grammar_constrains_the_answer_and_a_bad_one_is_one_line(backend) -> None:
    from kernelwright.llm import BackendError

    grammar = 'root ::= "answer: " ("yes" | "no")'
    req = GenerationRequest.chat("Is a GPU faster than a CPU? Explain in detail.", n=2, seed=2, max_tokens=16,
                                 grammar=grammar)
    got = backend.generate([req])[0]
    assert {c.text for c in got} <= {"answer: yes", "answer: no"} and all(c.constrained for c in got)
    plain = backend.generate([req.model_copy(update={"grammar": None, "n": 1})])[0][0]
    assert not plain.constrained and not plain.text.startswith("answer: ")
    with pytest.raises(BackendError, match="cannot parse the request's grammar"):
        backend.generate([req.model_copy(update={"grammar": "root ::= undefined-rule"})])


def test_embedded_name_says_where_it_runs_in_one_line(small_model: Path, caplog) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'kernelwright[local]')")
    with caplog.at_level(logging.INFO, logger="kernelwright.llm"):
        b = make_backend("qwen2.5-coder-0.5b")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("kernelwright.llm")]
    assert len(lines) == 1 and lines[0].startswith("model qwen2.5-coder-0.5b: llama.cpp on the CPU (no GPU found)")
    b.close()


def test_no_spec_is_the_default_model(caplog) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'kernelwright[local]')")
    if local_model.cached_path(local_model.DEFAULT_MODEL) is None:
        pytest.skip(f"{local_model.DEFAULT_MODEL} not pulled (kernelwright model pull)")
    with caplog.at_level(logging.INFO, logger="kernelwright.llm"):
        b = make_backend(None)
    assert b.model == "qwen2.5-coder-1.5b" and "model qwen2.5-coder-1.5b: llama.cpp on the CPU" in caplog.text
    b.close()


def test_a_deadline_stops_sampling_between_samples(backend) -> None:
    import time

    req = GenerationRequest.chat("Say hi.", n=3, seed=2, max_tokens=8)
    past = backend.generate([req, req], deadline=time.monotonic() - 1)
    assert [len(got) for got in past] == [1, 0]  # one sample, however late: never an empty call
    assert [len(got) for got in backend.generate([req], deadline=time.monotonic() + 600)] == [3]
