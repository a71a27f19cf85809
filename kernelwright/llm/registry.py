"""Model specs and the lazy backend registry.

A model is named by one URL-like spec (grammar in docs/backends.md):

    openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-Coder-7B-Instruct   an OpenAI-compatible server
    hf:Qwen/Qwen2.5-Coder-7B-Instruct        transformers, in-process (hub id, folder or .gguf)
    gguf:path/to/model.gguf                  llama.cpp, in-process
    replay:runs/gen.jsonl                    answers recorded earlier
    record:runs/gen.jsonl=<inner spec>       any backend, recording what it answers
    qwen2.5-coder-1.5b, qwen2.5-coder-0.5b   the embedded models (`kernelwright model pull`)

Options follow the target as a query: `gguf:m.gguf?n_ctx=4096`, `hf:Qwen/X?dtype=float16`.
Backends are imported only when used, so a missing optional dependency disables only its own
backend, with an error that names the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from kernelwright.llm import local_model
from kernelwright.llm.base import Backend, BackendError

log = logging.getLogger(__name__)

# backend name -> ("module:Class", the pip extra that brings its dependencies, or None)
BACKENDS: dict[str, tuple[str, str | None]] = {
    "llamacpp": ("kernelwright.llm.llamacpp_backend:LlamaCppBackend", "local"),
    "transformers": ("kernelwright.llm.transformers_backend:TransformersBackend", "hf"),
    "openai": ("kernelwright.llm.openai_backend:OpenAIBackend", "openai"),
    "replay": ("kernelwright.llm.replay:ReplayBackend", None),
    "record": ("kernelwright.llm.replay:RecordingBackend", None),
}
# spec scheme -> backend name; the backend names work as schemes too
SCHEMES: dict[str, str] = {"gguf": "llamacpp", "hf": "transformers", **{name: name for name in BACKENDS}}

SPEC_FORMS = "openai:URL#MODEL, hf:HUB_ID|FOLDER|FILE.gguf, gguf:FILE.gguf, replay:FILE.jsonl, record:FILE.jsonl=SPEC"


@dataclass(frozen=True)
class ModelSpec:
    backend: str  # a key of BACKENDS
    target: str  # URL, path or hub id; for record, the recording file
    options: dict[str, str] = field(default_factory=dict)  # the query; "#x" becomes model=x
    inner: ModelSpec | None = None  # for record: the spec of the backend being recorded


def parse_spec(spec: str) -> ModelSpec:
    spec = spec.strip()
    if spec in local_model.MODELS:
        return ModelSpec(backend="embedded", target=spec)
    scheme, sep, rest = spec.partition(":")
    if not sep or scheme not in SCHEMES:
        if spec.endswith(".gguf"):
            return parse_spec("gguf:" + spec)
        hint = f" (did you mean openai:{spec}?)" if scheme in ("http", "https") else ""
        raise BackendError(
            f"unknown model spec {spec!r}{hint}; use {SPEC_FORMS}, or an embedded model: "
            + ", ".join(local_model.MODELS)
        )
    backend = SCHEMES[scheme]
    if not rest:
        raise BackendError(f"model spec {spec!r} names no target; use {SPEC_FORMS}")
    if backend == "record":
        # split before anything else: the inner spec has its own '#' and '?'
        path, eq, inner = rest.partition("=")
        if not eq or not path or not inner:
            raise BackendError(f"record spec {spec!r} must look like record:FILE.jsonl=SPEC")
        return ModelSpec(backend="record", target=path, inner=parse_spec(inner))
    options: dict[str, str] = {}
    if "#" in rest:
        rest, _, model = rest.rpartition("#")
        options["model"] = model
    if backend != "openai" and "?" in rest:
        # an openai base URL may carry a query of its own; that backend sorts its query out itself
        rest, _, query = rest.partition("?")
        options.update(parse_qsl(query, keep_blank_values=True))
    return ModelSpec(backend=backend, target=rest, options=options)


def load_backend_class(name: str) -> type:
    """Imports a backend's module on first use."""
    try:
        target, extra = BACKENDS[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)}") from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if not missing or missing == "kernelwright":
            raise
        install = f"pip install kernelwright[{extra}]" if extra else f"pip install {missing}"
        raise BackendError(f"backend {name!r} needs the optional package {missing!r}: {install}") from e
    return getattr(module, class_name)


def take_options(options: Mapping[str, str], allowed: Mapping[str, Callable[[str], Any]], who: str) -> dict[str, Any]:
    """Converts spec options with the given parsers; an unknown or malformed one is an error."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise BackendError(f"{who}: unknown option(s) {', '.join(unknown)}; valid: {', '.join(allowed)}")
    out = {}
    for key, value in options.items():
        try:
            out[key] = allowed[key](value)
        except ValueError as e:
            raise BackendError(f"{who}: bad value {value!r} for option {key}: {e}") from None
    return out


def is_embedded(spec: str | ModelSpec | None) -> bool:
    """Whether a spec names one of the embedded small models (the default when None): the
    models scaffolded generation is on by default for."""
    try:
        parsed = parse_spec(spec or local_model.DEFAULT_MODEL) if not isinstance(spec, ModelSpec) else spec
    except Exception:  # noqa: BLE001 -- an unparsable spec is reported by make_backend, not here
        return False
    if parsed.backend == "record" and parsed.inner is not None:  # recording changes no default
        return is_embedded(parsed.inner)
    return parsed.backend == "embedded" or parsed.target in local_model.MODELS


def make_backend(spec: str | ModelSpec | None = None) -> Backend:
    """The backend a spec names; None means the default embedded model on the best device here."""
    parsed = parse_spec(spec or local_model.DEFAULT_MODEL) if not isinstance(spec, ModelSpec) else spec
    if parsed.backend == "embedded":
        return _embedded(parsed.target)
    if parsed.backend == "record":
        assert parsed.inner is not None
        cls = load_backend_class("record")
        return cls(parsed.target, make_backend(parsed.inner))
    options = dict(parsed.options)
    target = parsed.target
    if parsed.backend in ("llamacpp", "transformers") and target in local_model.MODELS:
        # gguf:qwen2.5-coder-0.5b / hf:qwen2.5-coder-0.5b pick the engine for an embedded model
        options.setdefault("model", target)
        target = str(local_model.pull(target))
    return load_backend_class(parsed.backend).from_spec(target, options)


def _gpu_transformers_available() -> tuple[bool, str]:
    import torch  # a core dependency; imported here because it is slow to import

    if not torch.cuda.is_available():
        return False, "no GPU found"
    missing = [m for m in ("transformers", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        return False, f"GPU found but {' and '.join(missing)} not installed (pip install kernelwright[hf])"
    return True, torch.cuda.get_device_name(0)


def _embedded(name: str) -> Backend:
    path = local_model.pull(name)
    use_gpu, why = _gpu_transformers_available()
    if use_gpu:
        backend = load_backend_class("transformers")(str(path.parent), gguf_file=path.name, device="cuda", model=name)
        log.info("model %s: transformers on the GPU (%s, bfloat16), weights %s", name, why, path)
    else:
        backend = load_backend_class("llamacpp")(path, model=name)
        log.info("model %s: llama.cpp on the CPU (%s), weights %s", name, why, path)
    return backend
