"""Spec parsing and the lazy registry."""

from __future__ import annotations

import sys

import pytest

from kernelwright.llm import BACKENDS, BackendError, load_backend_class, make_backend, parse_spec
from kernelwright.llm.registry import ModelSpec, take_options


def test_openai_spec_keeps_the_url_whole() -> None:
    s = parse_spec("openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-Coder-7B-Instruct")
    assert s == ModelSpec("openai", "http://127.0.0.1:8000/v1", {"model": "Qwen/Qwen2.5-Coder-7B-Instruct"})
    # the query of a base URL is the openai backend's to sort out
    assert parse_spec("openai:https://h/v1?concurrency=8#m").target == "https://h/v1?concurrency=8"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("hf:Qwen/Qwen2.5-Coder-7B-Instruct", ModelSpec("transformers", "Qwen/Qwen2.5-Coder-7B-Instruct")),
        ("hf:./models/q.gguf?dtype=float16", ModelSpec("transformers", "./models/q.gguf", {"dtype": "float16"})),
        ("gguf:path/to/model.gguf", ModelSpec("llamacpp", "path/to/model.gguf")),
        ("gguf:m.gguf?n_ctx=4096&threads=2", ModelSpec("llamacpp", "m.gguf", {"n_ctx": "4096", "threads": "2"})),
        ("path/to/model.gguf", ModelSpec("llamacpp", "path/to/model.gguf")),
        ("llamacpp:qwen2.5-coder-0.5b", ModelSpec("llamacpp", "qwen2.5-coder-0.5b")),
        ("replay:runs/a.jsonl", ModelSpec("replay", "runs/a.jsonl")),
        (
            "replay:runs/a.jsonl#qwen2.5-coder-1.5b",
            ModelSpec("replay", "runs/a.jsonl", {"model": "qwen2.5-coder-1.5b"}),
        ),
        ("qwen2.5-coder-1.5b", ModelSpec("embedded", "qwen2.5-coder-1.5b")),
        ("qwen2.5-coder-0.5b", ModelSpec("embedded", "qwen2.5-coder-0.5b")),
    ],
)
def test_spec_grammar(spec: str, expected: ModelSpec) -> None:
    assert parse_spec(spec) == expected


def test_record_spec_nests_any_spec() -> None:
    s = parse_spec("record:runs/r.jsonl=openai:http://127.0.0.1:8000/v1?x=1#org/model")
    assert s.backend == "record" and s.target == "runs/r.jsonl"
    assert s.inner == ModelSpec("openai", "http://127.0.0.1:8000/v1?x=1", {"model": "org/model"})
    with pytest.raises(BackendError, match="record:FILE.jsonl=SPEC"):
        parse_spec("record:runs/r.jsonl")


def test_unknown_spec_lists_valid_forms() -> None:
    with pytest.raises(BackendError) as e:
        parse_spec("ollama:codellama")
    msg = str(e.value)
    assert all(form in msg for form in ("openai:URL#MODEL", "hf:", "gguf:", "replay:", "record:", "qwen2.5-coder-0.5b"))
    with pytest.raises(BackendError, match="did you mean openai:http://h:8000/v1"):
        parse_spec("http://h:8000/v1")


def test_unknown_backend_lists_valid_ones() -> None:
    with pytest.raises(BackendError) as e:
        load_backend_class("vllm")
    assert str(e.value) == f"unknown backend 'vllm'; valid: {', '.join(BACKENDS)}"


@pytest.mark.parametrize(
    "backend, package, extra",
    [("openai", "openai", "openai"), ("llamacpp", "llama_cpp", "local"), ("transformers", "transformers", "hf")],
)
def test_missing_optional_dependency_names_the_extra(monkeypatch, backend: str, package: str, extra: str) -> None:
    module = BACKENDS[backend][0].split(":")[0]
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` fail as if not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(BackendError) as e:
        load_backend_class(backend)
    assert (
        str(e.value) == f"backend '{backend}' needs the optional package '{package}': pip install kernelwright[{extra}]"
    )


def test_missing_dependency_disables_only_its_backend(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.delitem(sys.modules, "kernelwright.llm.openai_backend", raising=False)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert make_backend(f"replay:{empty}#m").model == "m"


def test_options_are_checked() -> None:
    assert take_options({"n_ctx": "4096"}, {"n_ctx": int}, "gguf") == {"n_ctx": 4096}
    with pytest.raises(BackendError, match="gguf: unknown option.*nctx; valid: n_ctx"):
        take_options({"nctx": "4096"}, {"n_ctx": int}, "gguf")
    with pytest.raises(BackendError, match="bad value 'lots' for option n_ctx"):
        take_options({"n_ctx": "lots"}, {"n_ctx": int}, "gguf")
