"""What `kernelwright optimize` is given, checked before any generation is spent.

Two forms: a KernelBench-format FILE (Model, get_inputs, get_init_inputs), or FILE:ClassName with
--inputs FUNC (a function in the file returning example inputs) and optionally --init-inputs FUNC.
The second is turned into the first by appending three lines to the source, so the evaluator, the
analysis and the prompts all see one ordinary task.

Every check raises InputError with one line that names the file and what is wrong. Static checks
(file exists, parses, defines the names) never run the user's code; the runtime check (imports,
inputs run, model runs on the device) runs it in a child process (probe.py).
"""

from __future__ import annotations

import ast
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from kernelwright import pyast
from kernelwright.child import ChildTimeout, run_json_child
from kernelwright.device import resolve_size
from kernelwright.errors import BadInput
from kernelwright.records import Task

CHECK_TIMEOUT_S = 180.0


class InputError(BadInput, ValueError):
    """Bad input to `optimize`; str() is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class Checked(BaseModel):
    """What the runtime check learned (shown in the report)."""

    outputs: list[str]  # "(64, 256) float32" per output


def split_spec(spec: str) -> tuple[Path, Optional[str]]:
    """`FILE` or `FILE:ClassName` -> (path, class name or None)."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier() and head:
        return Path(head).expanduser(), tail
    return Path(spec).expanduser(), None


def _module_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(classes, callables) bound at module level: defs, classes and plain assignments."""
    classes, names = set(), set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
            names.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return classes, names


def load_input(spec: str, inputs_fn: Optional[str] = None, init_fn: Optional[str] = None) -> Task:
    """The task `spec` names, checked statically (nothing of the user's runs here)."""
    path, class_name = split_spec(spec)
    if not path.is_file():
        raise InputError(f"no such file: {path}" if not path.exists() else f"not a regular file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        tree = pyast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise InputError(f"{path}: not valid Python: line {e.lineno}: {e.msg}") from None
    except ValueError as e:
        raise InputError(f"{path}: not valid Python: {e}") from None
    classes, names = _module_names(tree)
    cls = class_name or "Model"
    if cls not in classes and not (class_name is None and "Model" in names):
        hint = "" if class_name else " (for another class, pass FILE:ClassName --inputs FUNC)"
        raise InputError(f"{path}: defines no class {cls}{hint}")
    fn = inputs_fn or "get_inputs"
    if fn not in names:
        raise InputError(f"{path}: defines no function {fn}" + ("" if inputs_fn else
                         " (name the function that returns example inputs with --inputs FUNC)"))
    if init_fn is not None and init_fn not in names:
        raise InputError(f"{path}: defines no function {init_fn} (given as --init-inputs)")
    # The adapter: the KernelBench names bound to what the user named, appended so everything the
    # file defines is in scope. A constructor without arguments needs no get_init_inputs.
    adapter = []
    if cls != "Model":
        adapter.append(f"Model = {cls}")
    if fn != "get_inputs":
        adapter.append(f"def get_inputs():\n    return list({fn}())")
    if init_fn is not None and init_fn != "get_init_inputs":
        adapter.append(f"def get_init_inputs():\n    return list({init_fn}())")
    elif init_fn is None and "get_init_inputs" not in names:
        adapter.append("def get_init_inputs():\n    return []")
    source = text
    if adapter:
        source = text.rstrip("\n") + "\n\n\n# added by kernelwright optimize: the names a task defines\n" + "\n".join(adapter) + "\n"
    name = path.stem if cls == "Model" else f"{path.stem}.{cls}"
    return Task(id=name, name=name, level=None, path=str(path.resolve()), source=source, origin="file")


def resolve_device(device: Optional[str]) -> str:
    """The device asked for, or the best one here (a CUDA GPU if one answers, else the CPU)."""
    from kernelwright.device import validate_device
    from kernelwright.evaluate import EvaluatorError

    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return validate_device(device)
    except EvaluatorError as e:
        raise InputError(str(e)) from None


def eval_run(opts: Any) -> Any:
    """How and where an optimize run (an optimize Options) evaluates; bad values are bad input."""
    from kernelwright.evaluate import EvalConfig, EvalRun, EvaluatorError

    try:
        return EvalRun(EvalConfig(timeout=opts.eval_timeout, iters=opts.iters, time=opts.time, size=opts.size),
                       device=opts.device)
    except EvaluatorError as e:
        raise InputError(str(e)) from None


def check_writable(out: Path) -> None:
    """Create the output folder and prove a file can be written in it, before any work."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".kw-write-check-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"cannot write to output folder {out}: {e.strerror or e}") from None


def check_runs(task: Task, device: str, timeout: float = CHECK_TIMEOUT_S, size: str = "auto") -> Checked:
    """Import the file, build the model on `device`, make inputs and run forward once, in a child."""
    from kernelwright.optimize.probe import ProbeJob

    job = ProbeJob(mode="check", source=task.source, filename=Path(task.path or "reference.py").name, device=device)
    where = task.path or task.id
    try:
        reply, code, tail = run_json_child("kernelwright.optimize.probe", job.model_dump_json(), timeout,
                                           {"KERNELWRIGHT_SIZE": resolve_size(device, size)})
    except ChildTimeout:
        raise InputError(f"{where}: importing and running the model took over {timeout:.0f} s") from None
    if reply is None:
        raise InputError(f"{where}: the check process died (exit {code})" + (f": {tail}" if tail else ""))
    if not reply.get("ok"):
        raise InputError(f"{where}: {reply.get('error', 'unknown error')}")
    return Checked(outputs=reply.get("outputs", []))
