"""Child side of the checks and the baseline timing: `python -m kernelwright.optimize.probe`.

The parent (a long-lived CLI process that also drives the model) never imports the user's file:
a module that crashes, hangs or initialises CUDA at import must not take the run down with it.
So both jobs run here, in a fresh interpreter (kernelwright.child), and answer one JSON line.

* ``check``: import the file, find Model / get_inputs / get_init_inputs, build the model on the
  device, make inputs, run forward once. The first failure is the answer: ``{"ok": false,
  "stage": ..., "error": one line}``.
* ``baseline``: time eager and ``torch.compile`` with the evaluator's own protocol
  (kernelwright.measure.timing, same seeds, same input sets), in one process so their ratio is a
  paired measurement. torch.compile failing is an answer too, not an error: the report says so.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import time
import types
from typing import Any

from pydantic import BaseModel

from kernelwright.child import child_main, load_task_module, one_line
from kernelwright.measure.draw import SEED, draw_inputs, seed_all


class ProbeJob(BaseModel):
    mode: str  # check | baseline
    source: str
    filename: str = "reference.py"
    device: str = "cpu"
    seed: int = SEED  # the evaluator's default seed: the same parameters and inputs it will use
    warmup: int = 10
    iters: int = 100
    input_sets: int = 8
    flush_cache: bool = True


class _Fail(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage, self.message = stage, message


def _import(job: ProbeJob) -> types.ModuleType:
    # Written to a file (not exec'd from a string) so tracebacks and inspect.getsource work, as
    # they do in the evaluator's worker.
    folder = tempfile.mkdtemp(prefix="kw-probe-")
    path = os.path.join(folder, job.filename)
    with open(path, "w") as f:
        f.write(job.source)
    try:
        module = load_task_module(job.source, path, "kw_reference", file=path, keep=True)
    except BaseException as e:  # SystemExit from a script-style file is a failure to import too
        raise _Fail("import", f"importing it raised {one_line(e)}") from e
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name, None)):
            raise _Fail("import", f"it defines no {name}")
    return module


def _build(job: ProbeJob, module: types.ModuleType) -> tuple[Any, list[Any], Any]:
    """(model on the device, its init inputs, torch.device), exactly as the evaluator builds them."""
    import torch

    dev = torch.device(job.device)
    try:
        seed_all(job.seed)
        init = list(module.get_init_inputs())
    except Exception as e:
        raise _Fail("inputs", f"get_init_inputs() raised {one_line(e)}") from e
    try:
        seed_all(job.seed)
        with torch.no_grad():
            model = module.Model(*copy.deepcopy(init)).to(dev)
    except Exception as e:
        raise _Fail("device", f"building Model(*get_init_inputs()) on {job.device} raised {one_line(e)}") from e
    return model, init, dev


def _inputs(job: ProbeJob, module: types.ModuleType, seed: int, dev: Any) -> list[Any]:
    try:
        return draw_inputs(module.get_inputs, seed, dev)
    except Exception as e:
        raise _Fail("inputs", f"get_inputs() raised {one_line(e)}") from e


def _check(job: ProbeJob) -> dict[str, Any]:
    import torch

    module = _import(job)
    model, _, dev = _build(job, module)
    inputs = _inputs(job, module, job.seed, dev)
    try:
        with torch.no_grad():
            out = model(*inputs)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
    except Exception as e:
        raise _Fail("forward", f"Model.forward on {job.device} raised {one_line(e)}") from e
    outs = out if isinstance(out, (list, tuple)) else [out]
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise _Fail("forward", "Model.forward must return a tensor (or a tuple of tensors)")
    return {"ok": True, "outputs": [f"{tuple(o.shape)} {str(o.dtype).replace('torch.', '')}" for o in outs]}


def _baseline(job: ProbeJob) -> dict[str, Any]:
    import torch

    from kernelwright.measure import timing

    torch.backends.cuda.matmul.allow_tf32 = False  # as the evaluator: fp32 means fp32
    torch.backends.cudnn.allow_tf32 = False
    module = _import(job)
    model, _, dev = _build(job, module)
    cfg = timing.TimingConfig(warmup=job.warmup, iters=job.iters, flush_cache=job.flush_cache)
    # the evaluator's timing input sets: seeds seed+1000+i
    sets = [_inputs(job, module, job.seed + 1000 + i, dev) for i in range(job.input_sets)]
    eager = timing.time_calls(model, sets, dev, cfg)
    reply: dict[str, Any] = {"ok": True, "eager": eager.model_dump(), "versions": {"torch": torch.__version__}}
    started = time.monotonic()
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*sets[0])  # compiles here; the timed loop's warm-up then only warms
        reply["compile_s"] = round(time.monotonic() - started, 2)
        reply["compiled"] = timing.time_calls(compiled, sets, dev, cfg).model_dump()
    except Exception as e:  # no compiler, unsupported op, inductor bug: say so, do not fail the run
        reply["compile_error"] = one_line(e)
    return reply


def handle(text: str) -> dict[str, Any]:
    try:
        job = ProbeJob.model_validate_json(text)
    except ValueError as e:
        return {"ok": False, "stage": "job", "error": f"bad job on stdin: {str(e).splitlines()[0]}"}
    try:
        return _check(job) if job.mode == "check" else _baseline(job)
    except _Fail as e:
        return {"ok": False, "stage": e.stage, "error": e.message}


if __name__ == "__main__":
    sys.exit(child_main(handle))
