"""`kernelwright generate` and `kernelwright model ...`, through typer's runner, on replay."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelwright.cli.console import Commands
from kernelwright.cli.model import generate, load_prompt, model_app
from kernelwright.llm import BackendError, Completion, GenerationRequest
from kernelwright.llm.replay import Recording, request_key

app = typer.Typer(cls=Commands)  # as kernelwright.cli.main registers them
app.add_typer(model_app, name="model")
app.command("generate")(generate)
runner = CliRunner()


def test_prompt_file_forms(tmp_path: Path) -> None:
    py = tmp_path / "p.py"
    py.write_text('SYSTEM = "sys"\nUSER = f"user {1 + 1}"\n')
    assert [m.model_dump() for m in load_prompt(py)] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "user 2"},
    ]
    js = tmp_path / "p.json"
    js.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    assert load_prompt(js)[0].content == "hi"
    txt = tmp_path / "p.txt"
    txt.write_text("plain")
    assert load_prompt(txt)[0].role == "user"
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "robot", "content": "x"}]')
    with pytest.raises(BackendError, match="cannot read prompt file .*bad.json: ValidationError"):
        load_prompt(bad)


def test_generate_from_replay(tmp_path: Path) -> None:
    prompt = tmp_path / "p.py"
    prompt.write_text('MESSAGES = [{"role": "user", "content": "Write a kernel."}]\n')
    req = GenerationRequest(messages=load_prompt(prompt), n=2, temperature=0.0, max_tokens=50)
    comps = [
        Completion(text=f"answer {i}", finish_reason="stop", prompt_tokens=9, completion_tokens=20, latency_s=2.0)
        for i in range(2)
    ]
    rec = tmp_path / "r.jsonl"
    rec.write_text(
        Recording(
            key=request_key(req, "m"), model="m", request=req, completions=comps, recorded_at=time.time()
        ).model_dump_json()
        + "\n"
    )
    args = [
        "generate",
        "--prompt-file",
        str(prompt),
        "--model",
        f"replay:{rec}",
        "-n",
        "2",
        "-t",
        "0",
        "--max-tokens",
        "50",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "answer 1" in result.output and "10.0 tokens/s" in result.output
    result = runner.invoke(app, args + ["--json"])
    data = json.loads(result.output)
    assert data["model"] == "m" and [c["text"] for c in data["completions"]] == ["answer 0", "answer 1"]
    result = runner.invoke(app, args[:-1] + ["51"])  # not recorded: a clear error, exit 2 (errors.BackendError)
    assert result.exit_code == 2 and "no recording for request" in result.output


def test_model_commands(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    result = runner.invoke(app, ["model", "list"])
    assert result.exit_code == 0 and "qwen2.5-coder-0.5b" in result.output and "not pulled" in result.output
    result = runner.invoke(app, ["model", "path", "qwen2.5-coder-0.5b"])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(app, ["model", "pull", "nope"])
    assert result.exit_code == 2 and "unknown embedded model 'nope'" in result.output
