"""Importing a candidate and naming what went wrong: used by the runner (the candidate's process).

Everything here runs in the process that will run candidate code, after the extension entry points
are wrapped (instrument.py) and before any of the candidate's code has run.
"""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import os
import re
import signal
import sys
import traceback
import types
from typing import Any, Callable, Optional


class Finish(Exception):
    """Ends the evaluation with a verdict (an outcome, not a worker bug)."""

    def __init__(self, verdict: str, error: Optional[str] = None, **fields: Any):
        super().__init__(verdict)
        self.verdict, self.error, self.fields = verdict, error, fields


# The reference's own run out of memory is said by its own verdict name, `reference_out_of_memory`
# (JudgeResult.verdict), never by a message: the judge sends it only for its own run of the reference
# or for the reference's runner's failure, and the evaluator re-runs the evaluation alone and, out of
# memory alone too, fails the task, not the candidate (evaluator.run_prepared). A candidate's
# exception worded or named like it is the candidate's out of memory. On a shared GPU the reference is
# no smaller than a candidate (a study's softmax cell failed on its reference's 1 GiB with 27 other
# runners and the model on the card).


def reference_raised(e: BaseException) -> Finish:
    """The verdict for an exception of the reference's run in the judge: out of memory as the
    device's state, anything else the task's own error."""
    if is_out_of_memory(e):
        return Finish("reference_out_of_memory", error_text(e))
    return Finish("reference_error", error_text(e))


def reference_failed(reply: Any) -> Finish:
    """The verdict for the reference's runner's failed reply: out of memory as the device's state,
    anything else the task's own error."""
    if getattr(reply, "verdict", None) == "out_of_memory":
        return Finish("reference_out_of_memory", f"the reference's runner: {reply.error}")
    return Finish("reference_error", f"the reference's runner: {reply.error}")


def error_text(exc: BaseException, log: str = "") -> str:
    """The exception's first relevant lines and where in the candidate (or reference) it happened."""
    from kernelwright.evaluate.taxonomy import first_relevant_lines

    frames = traceback.extract_tb(exc.__traceback__)
    where = [f"  {os.path.basename(fr.filename)}:{fr.lineno} in {fr.name}" for fr in frames
             if fr.filename.endswith("candidate.py") or fr.filename.startswith("<reference-")][-3:]
    head = f"{type(exc).__name__}: {exc}"
    text = first_relevant_lines(head + "\n" + log) if log or len(head) > 400 else head
    return "\n".join([text, *where]) if where else text


# How an allocation failure reads when it does not arrive as torch.OutOfMemoryError or MemoryError:
# a CUDA error raised by an extension's own check, the caching allocator's message re-raised, or
# the driver API's name for it (the judge's own arena, cuda_arena.py, allocates with cuMemAlloc:
# on an H100 a study's softmax cell failed as "the judge failed: CudaError: cuMemAlloc
# failed: CUDA_ERROR_OUT_OF_MEMORY" beside 27 other cells and the model, never re-run alone).
_OOM_TEXT = re.compile(r"CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation|"
                       r"CUDA_ERROR_OUT_OF_MEMORY|CUBLAS_STATUS_ALLOC_FAILED|std::bad_alloc|can.t allocate memory")


def says_out_of_memory(text: str) -> bool:
    """Does this message (an exception's, a probe's stderr) report an allocation that failed?"""
    return bool(_OOM_TEXT.search(text))


def is_out_of_memory(e: BaseException) -> bool:
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    return isinstance(e, RuntimeError) and says_out_of_memory(str(e)[:2000])


def classify_runtime(e: BaseException) -> tuple[str, str]:
    if isinstance(e, AttributeError) and str(e).startswith("extension module"):
        return "hallucinated_api", error_text(e)
    if is_out_of_memory(e):
        return "out_of_memory", error_text(e)
    return "runtime_error", error_text(e)


def build_fn(compile_only: bool, prebuild: bool) -> Optional[Callable[..., Any]]:
    """In compile-only mode with a CPU build of torch, CUDA sources compile to objects only.
    A pool's prebuild is not compile-only in that sense: it builds exactly as the evaluation will,
    so the evaluation finds the build in the content-hash cache."""
    if not compile_only or prebuild:
        return None
    import torch.utils.cpp_extension as cpp

    from kernelwright.evaluate import compile_only as co

    real = cpp.load_inline
    if co.torch_has_cuda():
        # The normal path: build and link. A bare nvcc toolkit may lack the CUDA library
        # headers ATen includes (cusparse.h, cublas_v2.h); NVIDIA's wheels, which a CUDA
        # torch depends on, ship them, so point the build at them too.
        extra = co.wheel_cuda_includes(True)
        signature = inspect.signature(real)

        def build_with_headers(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return real(*args, **kwargs)  # its own, genuine error
            paths = list(bound.arguments.get("extra_include_paths") or [])
            bound.arguments["extra_include_paths"] = paths + [p for p in extra if p not in paths]
            return real(*bound.args, **bound.kwargs)

        return build_with_headers if extra else None

    def build(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("cuda_sources") or (len(args) > 2 and args[2]):
            return co.objects_only_load_inline(*args, **kwargs)
        return real(*args, **kwargs)  # CPU C++ links fine against a CPU torch: build for real

    return build


def import_source(source: str, modname: str, filename: str, workdir: str,
                  preamble: Optional[str] = None) -> types.ModuleType:
    """Import `source` from `workdir/filename` as `modname`; `preamble` (the task's source, in
    KernelBench-compatible mode) runs first in the same namespace, under a name of its own."""
    path = os.path.join(workdir, filename)
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    if preamble is not None:
        exec(compile(preamble, "<task module>", "exec"), module.__dict__)  # noqa: S102 - the task's own source
    spec.loader.exec_module(module)
    return module


def import_candidate(source: str, workdir: str, counter: Any, compile_only: bool,
                     fields: dict[str, Any], preamble: Optional[str] = None) -> types.ModuleType:
    """Import the candidate as `kw_candidate` (its builds run here); raises Finish with the verdict
    a failed import earns."""
    from kernelwright.evaluate import taxonomy

    try:
        return import_source(source, "kw_candidate", "candidate.py", workdir, preamble)
    except SyntaxError as e:
        raise Finish("syntax_error", f"SyntaxError: {e.msg} (line {e.lineno})") from e
    except Exception as e:
        # A full disk is not decided here, from what the candidate's build or code says (its text, an
        # errno it raised): the evaluator observes the disk itself once the sandbox is gone (diskroom.py).
        log = getattr(e, "log", "") or ""
        failed_build = any(not b["ok"] for b in counter.builds)
        if not failed_build and not isinstance(e, (ImportError, AttributeError, TypeError)):
            if compile_only and is_no_gpu_error(e):
                # import stopped at code that needs a GPU: what was built before it decides, as the
                # judge sees it (built.py); this verdict only says that the import ended
                raise Finish("no_custom_kernel", f"the import stopped at code that needs a GPU: {error_text(e)}") from e
            raise Finish(*classify_runtime(e)) from e
        verdict = taxonomy.classify_build_failure(type(e).__name__, str(e), log)
        fields["compiled"] = False
        raise Finish(verdict.value, error_text(e, log)) from e


def is_no_gpu_error(e: BaseException) -> bool:
    text = str(e)
    return any(s in text for s in ("Torch not compiled with CUDA", "no CUDA GPUs", "CUDA driver",
                                   "Found no NVIDIA driver", "cudaGetDeviceCount"))


def become_subreaper() -> None:
    """Orphans the candidate leaves behind re-parent to us, so we can find and end them."""
    try:
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def kill_descendants() -> None:
    from kernelwright.evaluate.instrument import child_pids

    for pid in child_pids():
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # reap it: an orphaned zombie could outlive us where init does not reap
        except OSError:
            pass


def end_process() -> None:
    """End this evaluating process: its descendants killed, its output flushed, and no atexit hook
    or non-daemon thread the candidate may have left run."""
    kill_descendants()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
