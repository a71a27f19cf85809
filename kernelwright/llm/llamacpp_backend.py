"""llama.cpp in-process through llama-cpp-python: a GGUF file on the CPU (or offloaded to a GPU).

One context generates one sample at a time, so n samples are n calls. The n samples of one
request share the prompt's evaluated prefix: llama-cpp-python keeps the KV state of the longest
common token prefix, so samples 2..n evaluate only the prompt's last token, not the whole prompt
again (a search regime draws many samples of one region). Each *request* starts from a reset
context and no prompt cache is attached: otherwise the KV state an earlier request left behind
changes the next answer and a seeded rerun is no longer byte-identical. The seed is set per
sample (seed + sample index).

A request's grammar (GBNF) is applied by llama.cpp's grammar sampler: a token that would leave the
grammar's language is never sampled, and generation ends where the grammar does. The grammar is
parsed once before use (llama.cpp's parser returns nothing for a bad grammar, which its sampler
chain would dereference), so a bad one is a BackendError, not a crash.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import llama_cpp

from kernelwright.llm import local_model
from kernelwright.llm.base import BackendError, Completion, GenerationRequest, check_counts, first_line

log = logging.getLogger(__name__)


def cpu_threads() -> int:
    """Half the usable cores. llama.cpp's threads spin while they wait for each other, so when
    every core is taken and anything else runs, they stall: on the 2-core machine, with other work
    running, 2 threads decoded the 0.5B at 1 token/s and 1 thread at 29 (docs/backends.md)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


class LlamaCppBackend:
    stops_at_deadline = True  # samples are drawn one after another: a budget can stop between them
    SPEC_OPTIONS = {"model": str, "n_ctx": int, "threads": int, "gpu_layers": int}

    def __init__(
        self,
        model_path: str | Path,
        *,
        n_ctx: int = 8192,
        threads: int | None = None,
        gpu_layers: int = 0,
        model: str | None = None,
    ) -> None:
        path = Path(model_path)
        local_model.check_gguf(path)  # a truncated file would otherwise fail deep inside llama.cpp
        self.path = path
        self.model = model or path.stem
        # where the model computes: a study keeps evaluations' timing off a device while it generates
        self.device = "cpu" if gpu_layers == 0 else "cuda:0"
        threads = threads or cpu_threads()
        start = time.perf_counter()
        try:
            # llama.cpp prints its load log to stderr from C; keep it only at debug level
            with _quiet_native_stderr(log.isEnabledFor(logging.DEBUG)):
                self._llm = llama_cpp.Llama(
                    model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                    n_gpu_layers=gpu_layers, verbose=log.isEnabledFor(logging.DEBUG),
                )  # fmt: skip
        except (ValueError, RuntimeError) as e:
            raise BackendError(f"llama.cpp cannot load {path}: {first_line(e)}") from e
        self.load_s = time.perf_counter() - start
        self._lock = threading.Lock()  # one context: calls must not interleave
        self._grammars: dict[str, llama_cpp.LlamaGrammar] = {}  # checked grammars by text

    @classmethod
    def from_spec(cls, target: str, options: Mapping[str, str]) -> LlamaCppBackend:
        from kernelwright.llm.registry import take_options

        return cls(target, **take_options(options, cls.SPEC_OPTIONS, "gguf"))

    def _grammar(self, text: str) -> llama_cpp.LlamaGrammar:
        if text not in self._grammars:
            vocab = self._llm._model.vocab
            with _quiet_native_stderr(log.isEnabledFor(logging.DEBUG)):
                sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), b"root")
            if not sampler:
                raise BackendError(f"llama.cpp cannot parse the request's grammar (starts {text[:60]!r})")
            llama_cpp.llama_sampler_free(sampler)
            self._grammars[text] = llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[text]

    def _one(self, req: GenerationRequest, seed: int | None, fresh: bool = True) -> Completion:
        if fresh:
            self._llm.reset()
        # Without a seed llama-cpp-python would derive one from the previous call's, the same
        # sequence in every process; LLAMA_DEFAULT_SEED makes llama.cpp draw a random one.
        seed = llama_cpp.LLAMA_DEFAULT_SEED if seed is None else seed % llama_cpp.LLAMA_DEFAULT_SEED
        start = time.perf_counter()
        out = self._llm.create_chat_completion(
            messages=req.messages_as_dicts(),  # type: ignore[arg-type]
            temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
            repeat_penalty=req.repeat_penalty, max_tokens=req.max_tokens, seed=seed,
            grammar=self._grammar(req.grammar) if req.grammar else None,
        )  # fmt: skip
        latency = time.perf_counter() - start
        choice, usage = out["choices"][0], out["usage"]
        return Completion(
            text=choice["message"]["content"] or "", finish_reason=choice["finish_reason"] or "stop",
            prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"], latency_s=latency,
            constrained=bool(req.grammar),
        )  # fmt: skip

    def generate(self, requests: Sequence[GenerationRequest], deadline: float | None = None) -> list[list[Completion]]:
        results: list[list[Completion]] = []
        with self._lock:
            for r in requests:
                got: list[Completion] = []
                for i in range(r.n):
                    # past the deadline nothing new is started, but the call returns one sample
                    # (search a line at a time asks for every line in one call: one sample each
                    # cost optimize's 5-minute budget 16 s)
                    if (got or results) and deadline is not None and time.monotonic() >= deadline:
                        log.info("deadline: %d of %d samples drawn", len(got), r.n)
                        break
                    got.append(self._one(r, r.sample_seed(i), fresh=i == 0))
                results.append(got)
        check_counts(requests, results, f"llama.cpp {self.model}", until_deadline=deadline is not None)
        return results

    def close(self) -> None:
        self._llm.close()


@contextlib.contextmanager
def _quiet_native_stderr(keep: bool):
    """Redirects file descriptor 2 (where C code writes) to /dev/null for the block."""
    if keep:
        yield
        return
    try:
        fd = os.dup(2)
    except (OSError, io.UnsupportedOperation):
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)
