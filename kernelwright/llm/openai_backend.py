"""Any OpenAI-compatible chat-completions server: vLLM, SGLang, llama.cpp's server, Ollama.

Servers differ in what they honour. Some (llama.cpp's) answer n=2 with one choice and HTTP 200,
so the backend counts what came back and fills up with further calls, concurrently, each with
its own seed (seed + index of its first sample) so that the extra samples differ. Once a server
has shown that it caps n, later requests are split up front. top_k and the repeat penalty are not
in the OpenAI schema; they go in `extra_body` under the names the common servers read
(vLLM/SGLang: repetition_penalty; llama.cpp: repeat_penalty), and servers ignore the other name.

Grammars (a request's GBNF) have no place in the OpenAI schema and each server reads them under
its own name, so they are sent only when the spec says which kind of server it is,
`?grammar=llamacpp|vllm|vllm-legacy|sglang` (GRAMMAR_FIELDS); otherwise the request goes
unconstrained and each Completion says so (`constrained=False`).

Several servers of one model (N vLLM/SGLang replicas, docs/scaling.md): list their base URLs
separated by commas, `openai:http://a:8000/v1,http://b:8000/v1#MODEL`. Calls go round-robin over
them, and a retry goes to the next server, so one server down slows a run instead of failing it.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import openai

from kernelwright.llm.base import (
    BackendError,
    Completion,
    GenerationRequest,
    ServerUnreachable,
    check_counts,
    first_line,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


def api_key_from_env() -> str:
    # Local servers need no key, but the client insists on one.
    return os.environ.get("KERNELWRIGHT_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"


# Where each server kind reads a GBNF grammar in the request body: llama.cpp's server `grammar`;
# vLLM `structured_outputs.grammar` (before v0.12 `guided_grammar`); SGLang `ebnf` (XGrammar reads GBNF).
GRAMMAR_FIELDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "llamacpp": lambda g: {"grammar": g},
    "vllm": lambda g: {"structured_outputs": {"grammar": g}},
    "vllm-legacy": lambda g: {"guided_grammar": g},
    "sglang": lambda g: {"ebnf": g},
}


def _grammar_kind(value: str) -> str:
    if value not in GRAMMAR_FIELDS:
        raise BackendError(f"openai option grammar={value!r}: choose from {', '.join(GRAMMAR_FIELDS)}")
    return value


@dataclass(frozen=True)
class _Call:
    index: int  # which request
    n: int
    seed: int | None


class OpenAIBackend:
    # spec options, taken out of the base URL's query: openai:http://h:8000/v1?concurrency=8#model
    SPEC_OPTIONS: dict[str, Callable[[str], Any]] = {"concurrency": int, "timeout": float, "retries": int,
                                                     "grammar": _grammar_kind}

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
        concurrency: int = 4,
        backoff_s: float = 0.25,
        grammar: str | None = None,
    ) -> None:
        self.grammar = _grammar_kind(grammar) if grammar else None  # the server kind, for grammars
        self.base_urls = [u.strip().rstrip("/") for u in base_url.split(",") if u.strip()]
        if not self.base_urls:
            raise BackendError("openai spec names no server URL")
        self.base_url = ",".join(self.base_urls)
        self.retries, self.backoff_s = max(0, retries), backoff_s
        self.concurrency = max(1, concurrency)
        self.timeout = timeout
        self._clients = [
            openai.OpenAI(base_url=u, api_key=api_key or api_key_from_env(), timeout=timeout, max_retries=0)
            for u in self.base_urls
        ]  # retries are ours, so that the final error can say what happened in one line
        self._turn = itertools.count()  # round-robin over the servers; next() is atomic in CPython
        self._max_n: int | None = None  # the most choices this server returned for one call
        self._lock = threading.Lock()
        self.model = model or self._served_model()

    @classmethod
    def from_spec(cls, target: str, options: Mapping[str, str]) -> OpenAIBackend:
        from kernelwright.llm.registry import take_options

        parts = urlsplit(target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in cls.SPEC_OPTIONS}
        url = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if k not in ours])))
        kwargs = take_options(ours, cls.SPEC_OPTIONS, "openai")
        return cls(url, model=options.get("model") or None, **kwargs)

    def _served_model(self) -> str:
        models = self._with_retries(lambda client: client.models.list().data)
        if not models:
            raise BackendError(f"model server at {self.base_url} serves no models; name one: openai:URL#MODEL")
        if len(models) > 1:
            log.info(
                "%s serves %d models; using %s (name one with openai:URL#MODEL)",
                self.base_url,
                len(models),
                models[0].id,
            )
        return models[0].id

    def _with_retries(self, fn: Callable[[openai.OpenAI], T]) -> T:
        """Retries connection errors and 5xx with exponential backoff; anything else fails at once.
        A call starts at the next server in turn; each retry moves on to the server after."""
        attempts = self.retries + 1
        start = next(self._turn)
        refused = 0  # tries that could not connect: all of them means no server answers at all
        for attempt in range(attempts):
            index = (start + attempt) % len(self._clients)
            client, url = self._clients[index], self.base_urls[index]
            try:
                return fn(client)
            except openai.APITimeoutError:
                raise BackendError(
                    f"model server at {url} did not answer within {self.timeout:g} s"
                ) from None
            except openai.APIConnectionError as e:
                failure = f"cannot reach model server at {url}: {first_line(e.__cause__ or e)}"
                refused += 1
            except openai.InternalServerError as e:
                failure = f"model server at {url} failed: HTTP {e.status_code}: {first_line(e.message)}"
            except openai.APIStatusError as e:
                raise BackendError(
                    f"model server at {url} refused the request: "
                    f"HTTP {e.status_code}: {first_line(e.message)}"
                ) from None
            if attempt + 1 < attempts:
                delay = self.backoff_s * 2**attempt
                log.debug("%s; retrying in %.2f s", failure, delay)
                time.sleep(delay)
        raise (ServerUnreachable if refused == attempts else BackendError)(f"{failure} (tried {attempts} times)")

    def _call(self, req: GenerationRequest, n: int, seed: int | None) -> list[Completion]:
        kwargs: dict[str, Any] = dict(
            model=self.model, messages=req.messages_as_dicts(), n=n,
            temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens,
        )  # fmt: skip
        if seed is not None:
            kwargs["seed"] = seed
        extra: dict[str, Any] = {}
        if req.top_k:
            extra["top_k"] = req.top_k
        if req.repeat_penalty != 1.0:
            extra["repeat_penalty"] = extra["repetition_penalty"] = req.repeat_penalty
        constrained = bool(req.grammar) and self.grammar is not None
        if constrained:
            extra.update(GRAMMAR_FIELDS[self.grammar](req.grammar))  # type: ignore[index,arg-type]
        if extra:
            kwargs["extra_body"] = extra
        start = time.perf_counter()
        resp = self._with_retries(lambda client: client.chat.completions.create(**kwargs))
        latency = time.perf_counter() - start
        choices = list(resp.choices)[:n]
        usage = resp.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        # Usage is per response; with several choices each gets an equal share of the total.
        completion_tokens = (usage.completion_tokens if usage else 0) // max(1, len(choices))
        return [
            Completion(
                text=c.message.content or "",
                finish_reason=c.finish_reason or "stop",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_s=latency,
                constrained=constrained,
            )  # fmt: skip
            for c in choices
        ]

    def _plan(self, req: GenerationRequest, index: int, have: int) -> list[_Call]:
        """Calls that ask for the samples still missing, no bigger than the server's known cap."""
        calls, offset = [], have
        cap = self._max_n or req.n - have
        while offset < req.n:
            n = min(cap, req.n - offset)
            calls.append(_Call(index, n, req.sample_seed(offset)))
            offset += n
        return calls

    def _learn_cap(self, asked: int, got: int) -> None:
        if got == 0:
            raise BackendError(f"model server at {self.base_url} returned no choices (asked for {asked})")
        with self._lock:
            if got < asked and (self._max_n is None or got < self._max_n):
                log.info("%s returned %d of %d choices asked; filling up with further calls", self.base_url, got, asked)
                self._max_n = got

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        results: list[list[Completion]] = [[] for _ in requests]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            # Each round every short request gains at least one sample (or fails), so this ends.
            while True:
                calls = [c for i, r in enumerate(requests) for c in self._plan(r, i, len(results[i]))]
                if not calls:
                    break
                futures = [pool.submit(self._call, requests[c.index], c.n, c.seed) for c in calls]
                for call, fut in zip(calls, futures, strict=True):
                    got = fut.result()
                    self._learn_cap(call.n, len(got))
                    results[call.index].extend(got)
        check_counts(requests, results, f"openai {self.base_url}")
        return results

    def close(self) -> None:
        for client in self._clients:
            client.close()
