"""Prompt templates: all prompt text lives in `templates/*.jinja`, none in Python code.

Rendering is strict: a variable a template uses but the caller did not pass is an error, so a
renamed field can never silently produce a prompt with a hole in it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jinja2

TEMPLATE_DIR = Path(__file__).parent / "templates"


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )


def render(name: str, **variables: Any) -> str:
    """Render `templates/<name>.jinja`; unknown template or missing variable raises."""
    text = _env().get_template(f"{name}.jinja").render(**variables)
    return text.strip() + "\n"


def names() -> list[str]:
    return sorted(p.stem for p in TEMPLATE_DIR.glob("*.jinja"))
