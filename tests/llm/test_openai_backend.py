"""The openai backend against a real llama.cpp server on 127.0.0.1 (slow), and its error paths."""

from __future__ import annotations

import time

import pytest

from kernelwright.llm import BackendError, GenerationRequest, make_backend
from tests.llm.conftest import free_port

pytest.importorskip("openai", reason="openai not installed (pip install 'kernelwright[openai]')")

OPEN_PROMPT = GenerationRequest.chat("Write a two-line poem about GPU kernels.", max_tokens=24)


def test_unreachable_server_is_one_clear_line_and_fast() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    backend = make_backend(f"openai:{url}#some-model")
    start = time.monotonic()
    with pytest.raises(BackendError) as e:
        backend.generate([OPEN_PROMPT])
    elapsed = time.monotonic() - start
    msg = str(e.value)
    assert msg.startswith(f"cannot reach model server at {url}: ") and "tried 4 times" in msg
    assert "\n" not in msg and elapsed < 5, (msg, elapsed)


def test_spec_options_come_out_of_the_url() -> None:
    backend = make_backend("openai:http://127.0.0.1:1/v1?concurrency=2&retries=0&api-version=3#m")
    assert (backend.concurrency, backend.retries, backend.model) == (2, 0, "m")
    assert backend.base_url == "http://127.0.0.1:1/v1?api-version=3"
    with pytest.raises(BackendError, match="bad value 'x' for option retries"):
        make_backend("openai:http://127.0.0.1:1/v1?retries=x#m")


def test_api_key_from_env(monkeypatch) -> None:
    from kernelwright.llm.openai_backend import api_key_from_env

    monkeypatch.delenv("KERNELWRIGHT_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert api_key_from_env() == "none"
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    assert api_key_from_env() == "o"
    monkeypatch.setenv("KERNELWRIGHT_API_KEY", "k")
    assert api_key_from_env() == "k"


@pytest.mark.slow
def test_fill_up_when_server_returns_fewer_choices(llama_server: str) -> None:
    # llama-cpp-python's server answers n=3 with one choice and HTTP 200
    backend = make_backend(f"openai:{llama_server}")  # the model name comes from /v1/models
    req = OPEN_PROMPT.model_copy(update={"n": 3, "seed": 11})
    (first,) = backend.generate([req])
    assert len(first) == 3 and all(c.completion_tokens > 0 and c.prompt_tokens > 0 for c in first)
    assert len({c.text for c in first}) >= 2, "seed + i should make the extra samples differ"
    assert backend._max_n == 1  # it learned the cap: the next request is split up front
    (again,) = backend.generate([req.model_copy(update={"n": 2})])
    assert len(again) == 2
    # No equality check with the first run: llama.cpp's server reuses the KV cache of the last
    # prompt, which shifts the logits by rounding, so its seeded reruns can differ.


@pytest.mark.slow
def test_batch_of_requests_and_greedy(llama_server: str) -> None:
    backend = make_backend(f"openai:{llama_server}#anything")  # llama.cpp's server serves any name
    greedy = GenerationRequest.chat("Say hi.", temperature=0.0, n=2, max_tokens=8)
    results = backend.generate([greedy, OPEN_PROMPT.model_copy(update={"seed": 1})])
    assert [len(r) for r in results] == [2, 1]
    assert results[0][0].text == results[0][1].text
