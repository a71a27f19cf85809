"""transformers in-process, reading the small embedded GGUF (slow: dequantises it on load)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelwright.llm import BackendError, GenerationRequest, make_backend
from kernelwright.llm.transformers_backend import TransformersBackend, split_target
from tests.llm.conftest import need

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend(small_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersBackend]:
    """One model for the module: dequantising the GGUF is most of a minute, so it is done once, and
    kept (in a cache folder of the module's own) for the read-back test to load the copy."""
    need("transformers", "gguf", extra="hf")
    from kernelwright.llm import local_model

    cache = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local_model, "cache_dir", lambda: cache)
        yield make_backend(f"hf:{small_model}?batch_size=4&keep_dequantized=true")


def test_batched_generation_counts_and_seed(backend) -> None:
    reqs = [
        GenerationRequest.chat("Write a two-line poem about GPU kernels.", n=3, seed=3, max_tokens=12),
        GenerationRequest.chat("Name a sorting algorithm.", n=2, seed=3, max_tokens=12),
    ]
    first = backend.generate(reqs)
    assert [len(r) for r in first] == [3, 2]
    assert all(c.prompt_tokens > 10 and 0 < c.completion_tokens <= 12 for r in first for c in r)
    second = backend.generate(reqs)  # same requests, same batches, same seed: same samples
    assert [[c.text for c in r] for r in second] == [[c.text for c in r] for r in first]


def test_greedy_rows_agree(backend) -> None:
    req = GenerationRequest.chat("Reply with the word OK.", temperature=0.0, n=2, max_tokens=8)
    ((a, b),) = backend.generate([req])
    assert a.text == b.text and a.text.strip()


def test_left_padding_leaves_a_prompt_unchanged(backend) -> None:
    # a short prompt batched with a long one is left-padded; greedy, it must say what it says alone
    short = GenerationRequest.chat(
        "Write a Python function that returns the square of x.", temperature=0.0, max_tokens=16
    )
    long = GenerationRequest.chat("Explain how CUDA thread blocks are scheduled on multiprocessors. " * 4,
                                  temperature=0.0, max_tokens=16)  # fmt: skip
    ((alone,),) = backend.generate([short])
    batched = backend.generate([long, short])
    assert batched[1][0].prompt_tokens == alone.prompt_tokens < batched[0][0].prompt_tokens
    assert batched[1][0].text == alone.text


def test_gguf_target_forms(tmp_path: Path) -> None:
    assert split_target("Qwen/Qwen2.5-Coder-7B-Instruct") == ("Qwen/Qwen2.5-Coder-7B-Instruct", None)
    assert split_target("Qwen/X-GGUF/x-q4_k_m.gguf") == ("Qwen/X-GGUF", "x-q4_k_m.gguf")
    bad = tmp_path / "m.gguf"
    bad.write_bytes(b"not a gguf file at all, just text....")
    with pytest.raises(BackendError, match="not a GGUF model file"):
        split_target(str(bad))


def test_dequantized_weights_are_kept_and_read_back(backend, small_model: Path) -> None:
    from kernelwright.llm.transformers_backend import dequantized_dir

    req = GenerationRequest.chat("Reply with the word OK.", temperature=0.0, max_tokens=8)
    first = backend  # dequantised from the GGUF, and kept (`keep_dequantized=true`)
    kept = dequantized_dir(small_model, "bfloat16")
    assert first.loaded_from == str(small_model.parent) and (kept / "config.json").is_file()
    second = TransformersBackend(str(small_model.parent), gguf_file=small_model.name, device=first.device,
                                 keep_dequantized=True)
    assert second.loaded_from == str(kept)
    assert second.generate([req])[0][0].text == first.generate([req])[0][0].text
