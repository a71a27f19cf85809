"""``analyze(task)``: graph, classification, chains, roofline and profile, computed in a child process.

The caller is long-lived (a search over many candidates) and must neither initialise CUDA nor
execute task code, so everything runs in ``python -m kernelwright.analysis``: the job goes in as
JSON on stdin, the ``TaskAnalysis`` comes back as one JSON line on stdout (the child moves the task's
own prints to stderr first). ``KERNELWRIGHT_SIZE`` is set for the child: with ``size="auto"``,
small on the CPU and full on a GPU, as the evaluator does. Failures become one ``AnalysisError``
whose message is a single line naming the task and the stage.

The graph, classification and roofline come from shapes alone: the inputs are fake tensors and
the module's parameters stay on the CPU (``shapes.py``), so they are the same whatever memory the
device has free. Only the profile, a measurement, runs the reference for real on the device; where
it fails (out of memory on a shared GPU, say) the record says why and holds everything else.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import BaseModel

from kernelwright.analysis.report import TaskAnalysis
from kernelwright.child import ChildTimeout, load_task_module, one_line, run_json_child
from kernelwright.device import resolve_size
from kernelwright.measure.draw import SEED, draw_inputs, seed_all
from kernelwright.records import Task

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300.0


class AnalysisError(Exception):
    """The analysis of a task failed; ``str()`` is one line: task, stage, error."""

    def __init__(self, task_id: str, stage: str, message: str):
        super().__init__(f"{task_id}: {stage}: {message}")
        self.task_id, self.stage, self.message = task_id, stage, message


class AnalysisJob(BaseModel):
    task_id: str
    source: str
    path: str | None = None
    device: str = "cpu"
    size: str = "small"
    profile: bool = True
    roofline_device: str | None = None  # None: the device the reference runs on
    measure_peaks: bool = True
    seed: int = SEED  # the evaluator's default seed: the same parameters and inputs
    warmup: int = 3
    iters: int = 10
    full_graph: bool = False


def analyze(task: Task, device: str = "cpu", size: str = "auto", profile: bool = True, *,
            roofline_device: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, measure_peaks: bool = True,
            seed: int = SEED, warmup: int = 3, iters: int = 10, full_graph: bool = False) -> TaskAnalysis:
    """Analyse ``task``'s reference in a fresh interpreter and return the record."""
    job = AnalysisJob(task_id=task.id, source=task.source, path=task.path, device=device,
                      size=resolve_size(device, size), profile=profile, roofline_device=roofline_device,
                      measure_peaks=measure_peaks, seed=seed, warmup=warmup, iters=iters, full_graph=full_graph)
    try:
        reply, code, tail = run_json_child("kernelwright.analysis", job.model_dump_json(), timeout,
                                           {"KERNELWRIGHT_SIZE": job.size})
    except ChildTimeout as e:
        raise AnalysisError(task.id, "timeout", str(e)) from None
    if reply is None:
        raise AnalysisError(task.id, "crash", f"the analysis process exited with {code}" + (f": {tail}" if tail else ""))
    if not reply.get("ok"):
        raise AnalysisError(task.id, reply.get("stage", "unknown"), reply.get("error", "unknown error"))
    return TaskAnalysis.model_validate(reply["analysis"])


# ---- what the child runs ----------------------------------------------------------------------

class StageError(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage, self.message = stage, message


def _stage(name: str, what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # reported as this stage's failure, in one line
        log.debug("stage %s failed", name, exc_info=True)
        raise StageError(name, f"{what} raised {one_line(e)}") from e


def _forward(model: Any, inputs: list[Any]) -> None:
    """One forward on the (fake) inputs: the module's own errors, before any graph is built."""
    import torch

    from kernelwright.analysis.shapes import fake_mode_of

    with torch.no_grad(), fake_mode_of(inputs):
        model(*inputs)


def analyze_job(job: AnalysisJob) -> TaskAnalysis:
    """Run every analysis on ``job`` in this process (the child's side of ``analyze``)."""
    import torch

    from kernelwright.analysis.graph import build_graph, classify, epilogue_chains
    from kernelwright.analysis.profile import profile_reference
    from kernelwright.analysis.report import summarize
    from kernelwright.analysis.roofline import device_peaks, roofline
    from kernelwright.analysis.shapes import fake_inputs, fake_mode

    start = time.monotonic()
    dev = torch.device(job.device)
    module = _stage("load", "the task source", load_task_module, job.source, job.path or f"<{job.task_id}>",
                    "kernelwright_analysis_task")
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, name):
            raise StageError("load", f"the task source defines no {name}")

    def seeded(fn: Any) -> Any:
        seed_all(job.seed)
        return fn()

    init_inputs = _stage("init", "get_init_inputs()", seeded, module.get_init_inputs)
    model = _stage("init", "Model(*get_init_inputs())", seeded, lambda: module.Model(*init_inputs))
    shapes = _stage("inputs", "get_inputs()", fake_inputs, module.get_inputs, job.seed, fake_mode())
    _stage("forward", "Model.forward", _forward, model, shapes)
    graph = _stage("graph", "building the op graph", build_graph, model, shapes)
    classification = _stage("graph", "classifying the graph", classify, graph)
    chains = _stage("graph", "finding epilogue chains", epilogue_chains, graph)
    target = job.roofline_device or job.device
    peaks = _stage("roofline", "reading device peaks", lambda: device_peaks(target, measure=job.measure_peaks))
    line = _stage("roofline", "the roofline", lambda: roofline(graph, peaks))
    report, profile_error = None, None
    if job.profile:
        try:
            inputs = draw_inputs(module.get_inputs, job.seed, dev)
            report = profile_reference(model.to(dev), inputs, dev, job.warmup, job.iters)
        except Exception as e:  # a measurement: its failure costs the record the profile, nothing else
            log.debug("profiling failed", exc_info=True)
            profile_error = f"profiling raised {one_line(e)}"
    return TaskAnalysis(
        task_id=job.task_id, device=str(dev), size=job.size, torch_version=torch.__version__,
        device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        graph=summarize(graph), classification=classification, chains=chains, roofline=line,
        roofline_local=job.roofline_device is None or job.roofline_device == job.device,
        profile=report, profile_error=profile_error, full_graph=graph if job.full_graph else None,
        seconds=time.monotonic() - start)
