"""Model backends behind one interface: `make_backend(spec).generate(requests)`.

The spec grammar, the defaults and measured speeds are in docs/backends.md.
"""

from kernelwright.llm.base import (
    Backend,
    BackendError,
    ChatMessage,
    Completion,
    GenerationRequest,
)
from kernelwright.llm.registry import BACKENDS, ModelSpec, load_backend_class, make_backend, parse_spec

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendError",
    "ChatMessage",
    "Completion",
    "GenerationRequest",
    "ModelSpec",
    "load_backend_class",
    "make_backend",
    "parse_spec",
]
