"""What runs inside the sandbox's child process: build, check, prove and time one candidate.

Protocol: argv[1] is the result pipe's fd; the job arrives as JSON on stdin with a nonce that
every message back must carry (see sandbox.py). Messages: `stage_start`, `stage` (name, seconds,
ok, detail) and one final `result`. Everything the candidate can do wrong ends as a `result`
with a verdict, or — if it kills the process — as the parent's `crash`/`timeout`.

Order of work, and why:
1. The reference module and model are built *before* the candidate is imported: nothing the
   candidate does at import can touch the reference's parameters.
2. The clocks, comparison functions and extension entry points are captured/wrapped before the
   candidate is imported (timing.py, compare.py, instrument.py).
3. In each correctness trial the candidate runs *before* the reference on the same fresh inputs,
   so memory it did not write cannot hold this trial's expected answer.
4. Timing (timing.time_pair) checks every timed call's inputs and output against the reference.
5. After timing, one more check on never-seen inputs: a candidate that starts caching once it is
   called repeatedly is caught there.
5. Last, the work check (work.py): the share of time in custom code, which custom calls computed
   something, and whether the output changes when their outputs are replaced by noise. It runs
   after everything else because it alters what the candidate's calls produce.
The reference is loaded under a name nobody can import and with no file in the candidate's folder;
while candidate code runs (outside the timing loop) any call into the reference's code is a cheat.
"""

from __future__ import annotations

import copy
import ctypes
import importlib.util
import json
import os
import secrets
import sys
import time
import traceback
import types
from contextlib import contextmanager
from typing import Any, Iterator, Optional

# Let the candidate's compiled code use at most the cores we were given, and never dump core.
try:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
except Exception:  # pragma: no cover - not fatal
    pass


# Below these floors (ms) call overheads dominate, and the bandwidth floor says nothing.
CPU_MIN_FLOOR_MS = 0.05
GPU_MIN_FLOOR_MS = 0.005
# A median below this share of the floor is a cheat. The CPU's figure is a copy measured once on a
# possibly shared machine (and a copy's write-allocate traffic is uncounted, so a read-mostly kernel
# can beat it by ~1.5x): a wider margin there. The GPU's is the peak table's measured figure.
CPU_FLOOR_MARGIN = 0.25
GPU_FLOOR_MARGIN = 0.5


class Channel:
    def __init__(self, fd: int, nonce: str):
        self.fd, self.nonce = fd, nonce

    def send(self, **msg: Any) -> None:
        data = json.dumps({**msg, "nonce": self.nonce}, default=str).encode()
        # A leading newline re-synchronises the stream if a candidate wrote a partial line here.
        os.write(self.fd, b"\n" + data + b"\n")


class Finish(Exception):
    """Ends the evaluation with a verdict (an outcome, not a worker bug)."""

    def __init__(self, verdict: str, error: Optional[str] = None, **fields: Any):
        super().__init__(verdict)
        self.verdict, self.error, self.fields = verdict, error, fields


class Worker:
    def __init__(self, job: dict[str, Any], ch: Channel):
        self.job, self.ch = job, ch
        self.fields: dict[str, Any] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.ch.send(type="stage_start", name=name)
        start = time.monotonic()
        ok, detail = False, None
        try:
            yield
            ok = True
        except Finish as f:
            detail = f.verdict
            raise
        except BaseException as e:  # noqa: BLE001 - reported as a stage failure, then re-raised
            detail = type(e).__name__
            raise
        finally:
            self.ch.send(type="stage", name=name, seconds=round(time.monotonic() - start, 4), ok=ok, detail=detail)

    # -- helpers ------------------------------------------------------------------------------

    @contextmanager
    def _candidate_code(self) -> Iterator[None]:
        """Candidate code runs inside: a call into the reference's code is a cheat, and takes
        precedence over whatever else the candidate's code ended with."""
        watch = self.ref_watch
        with watch.armed():
            try:
                yield
            finally:
                reasons = watch.reasons()
                if reasons:
                    raise Finish("cheat", "; ".join(reasons), cheat_reasons=reasons)

    def _import(self, source: str, modname: str, filename: str) -> types.ModuleType:
        path = os.path.join(self.job["workdir"], filename)
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(modname, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        spec.loader.exec_module(module)
        return module

    def _seed(self, seed: int) -> None:
        self.draw.seed_all(seed)

    def _inputs(self, seed: int) -> list[Any]:
        return self.draw.draw_inputs(self.ref_mod.get_inputs, seed, self.device)

    def _clone(self, inputs: list[Any]) -> list[Any]:
        return self.timing.clone_inputs(inputs)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.timing._synchronize()

    def _error_text(self, exc: BaseException, log: str = "") -> str:
        from kernelwright.evaluate.taxonomy import first_relevant_lines

        frames = traceback.extract_tb(exc.__traceback__)
        where = [f"  {os.path.basename(fr.filename)}:{fr.lineno} in {fr.name}" for fr in frames
                 if fr.filename.endswith("candidate.py") or fr.filename.startswith("<reference-")][-3:]
        head = f"{type(exc).__name__}: {exc}"
        text = first_relevant_lines(head + "\n" + log) if log or len(head) > 400 else head
        return "\n".join([text, *where]) if where else text

    # -- stages -------------------------------------------------------------------------------

    def run(self) -> None:
        job = self.job
        with self.stage("setup"):
            import torch

            from kernelwright.evaluate import compare, device_lock, draw, instrument, timing, work

            self.torch, self.compare, self.instrument, self.timing = torch, compare, instrument, timing
            self.work = work
            self.draw = draw
            if job.get("time", True) and not job.get("compile_only"):
                # imported before any candidate code runs
                from kernelwright.analysis.roofline import cpu_peaks, device_peaks

                self.peaks = (cpu_peaks, device_peaks)
            self.device = torch.device(job["device"])
            # fp32 means fp32: TF32 off for matmul and cuDNN, for the reference and the candidate alike.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
                major, minor = torch.cuda.get_device_capability(self.device)
                os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # build for the GPU we run on
            self.fields["versions"] = {"torch": torch.__version__, "cuda": str(torch.version.cuda),
                                       "python": sys.version.split()[0]}
            if self.device.type == "cuda":
                self.fields["versions"]["gpu"] = torch.cuda.get_device_name(self.device)
            if job.get("compile_baseline"):
                # dynamo wraps torch functions (manual_seed, ...) when first imported: let that happen
                # before the tamper guard takes its snapshot, not during the baseline's compile
                import torch._dynamo  # noqa: F401
                import torch._inductor.compile_fx  # noqa: F401

        with self.stage("load_reference"):
            try:
                # no module name to import and no file to read: the job's copy of the source goes too
                self.ref_mod, ref_filename = work.load_reference(job.pop("task_source"))
                self.ref_watch = work.ReferenceWatch(ref_filename)
                self._seed(job["seed"])
                self.init_inputs = self.ref_mod.get_init_inputs()
                self._seed(job["seed"])
                with torch.no_grad():
                    self.ref_model = self.ref_mod.Model(*copy.deepcopy(self.init_inputs)).to(self.device)
            except Exception as e:  # the task itself is broken: bad input, not a candidate verdict
                raise Finish("reference_error", self._error_text(e)) from e

        counter = instrument.CallCounter()
        build_fn = self._build_fn()
        place = instrument.BuildPlace(scratch=job["workdir"], cache_root=job.get("builds_root"),
                                      scope=job.get("build_scope"))
        instrument.install(counter, place, build_fn)
        guard = self.guard = instrument.TamperGuard()
        ops_before = instrument.dispatcher_ops()
        threads_before, children_before = instrument.python_threads(), instrument.child_pids()
        self.counter = counter

        self.fields["builds"] = counter.builds  # the list fills as builds run: on the record if one fails too
        with self.stage("compile"), self._candidate_code():
            cand = self._import_candidate(job["candidate_source"], counter)
        self.fields["compiled"] = True
        new_ops = instrument.dispatcher_ops() - ops_before
        self._check_tamper(guard)

        if job.get("compile_only"):
            if counter.builds or _defines_triton_kernel(cand):
                raise Finish("compiled")  # Triton kernels compile at first launch: defined is all we can check
            raise Finish("no_custom_kernel", "compile-only: the candidate builds no extension and defines no Triton kernel")

        with self.stage("init"), self._candidate_code():
            model_cls = getattr(cand, "ModelNew", None)
            if model_cls is None:
                raise Finish("runtime_error", "the candidate defines no ModelNew")
            try:
                self._seed(job["seed"])
                with torch.no_grad():
                    self.new_model = model_cls(*copy.deepcopy(self.init_inputs)).to(self.device)
            except Exception as e:
                raise Finish(*self._classify_runtime(e))

        with self.stage("correctness"):
            self._correctness(counter, new_ops)
        self._check_tamper(guard)
        self._check_leftovers(threads_before, children_before)

        if job.get("time", True):
            # one hold across the candidate's and the reference's timing: the two are compared
            with self.stage("timing"), device_lock.DeviceLock(job["device"]):
                self._timing()
            self._check_tamper(guard)
            with self.stage("recheck"):
                self._recheck()
            self._check_leftovers(threads_before, children_before)
        if self.fields["custom_kernel"]:
            with self.stage("work"):
                self._work(new_ops)
            self._check_tamper(guard)
            self._check_leftovers(threads_before, children_before)
        raise Finish("correct" if self.fields["custom_kernel"] else "no_custom_kernel")

    def _build_fn(self) -> Optional[Any]:
        """In compile-only mode with a CPU build of torch, CUDA sources compile to objects only.
        A pool's prebuild is not compile-only in that sense: it builds exactly as the evaluation will,
        so the evaluation finds the build in the content-hash cache."""
        if not self.job.get("compile_only") or self.job.get("prebuild"):
            return None
        import inspect

        import torch.utils.cpp_extension as cpp

        from kernelwright.evaluate import compile_only

        real = cpp.load_inline
        if compile_only.torch_has_cuda():
            # The normal path: build and link. A bare nvcc toolkit may lack the CUDA library
            # headers ATen includes (cusparse.h, cublas_v2.h); NVIDIA's wheels, which a CUDA
            # torch depends on, ship them, so point the build at them too.
            extra = compile_only.wheel_cuda_includes(True)
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
                return compile_only.objects_only_load_inline(*args, **kwargs)
            return real(*args, **kwargs)  # CPU C++ links fine against a CPU torch: build for real

        return build

    def _import_candidate(self, source: str, counter: Any) -> types.ModuleType:
        from kernelwright.evaluate import taxonomy

        try:
            return self._import(source, "kw_candidate", "candidate.py")
        except SyntaxError as e:
            raise Finish("syntax_error", f"SyntaxError: {e.msg} (line {e.lineno})") from e
        except Exception as e:
            log = getattr(e, "log", "") or ""
            full = taxonomy.infrastructure_problem(e, log)
            if full:  # the machine's failure, not the candidate's: no verdict
                raise Finish("infrastructure_error", f"{full}; free space under the build cache") from e
            failed_build = any(not b["ok"] for b in counter.builds)
            if not failed_build and not isinstance(e, (ImportError, AttributeError, TypeError)):
                if self.job.get("compile_only") and _is_no_gpu_error(e):
                    raise Finish("compiled", None) from e  # built; import stopped at code that needs a GPU
                raise Finish(*self._classify_runtime(e)) from e
            verdict = taxonomy.classify_build_failure(type(e).__name__, str(e), log)
            self.fields["compiled"] = False
            raise Finish(verdict.value, self._error_text(e, log)) from e

    def _classify_runtime(self, e: BaseException) -> tuple[str, str]:
        if isinstance(e, AttributeError) and str(e).startswith("extension module"):
            return "hallucinated_api", self._error_text(e)
        return "runtime_error", self._error_text(e)

    def _correctness(self, counter: Any, new_ops: set[str]) -> None:
        torch, compare = self.torch, self.compare
        job = self.job
        previous: list[tuple[Any, Any]] = []
        tol = None
        calls_per_trial = []
        for k in range(job["trials"]):
            inputs = self._inputs(job["seed"] + 1 + k)
            before = counter.total()
            try:
                with torch.no_grad(), self._candidate_code():
                    out_c = self.new_model(*self._clone(inputs))
            except Finish:
                raise
            except Exception as e:
                raise Finish(*self._classify_runtime(e)) from e
            self._side_stream_check(out_c)
            calls_per_trial.append(counter.total() - before)
            with torch.no_grad():
                out_r = self.ref_model(*self._clone(inputs))
            self._sync()
            refs = compare.flatten(out_r)
            if tol is None:
                tol = self.tol = compare.tolerance_for(refs, job.get("atol"), job.get("rtol"))
                self.fields["tolerance"] = tol.model_dump()
            result = compare.compare(out_r, out_c, tol, k)
            self.fields["trials"] = k + 1
            if result.kind == "subclass":
                raise Finish("cheat", result.message, cheat_reasons=["output is a tensor subclass"])
            for prev_r, prev_c in previous:
                if compare.identical(prev_c, out_c) and not compare.identical(prev_r, out_r):
                    raise Finish("cheat", "the candidate returned the same output for different inputs",
                                 cheat_reasons=["output reused across calls (cached result)"])
            if result.kind == "shape":
                raise Finish("shape_mismatch", result.message)
            if not result.ok:
                raise Finish("wrong_output", result.message,
                             mismatch=result.mismatch.model_dump() if result.mismatch else None)
            previous.append((out_r, out_c))
        custom = dict(counter.snapshot())
        if new_ops and not all(calls_per_trial):
            args = self._clone(self._inputs(job["seed"]))  # drawn by the reference's get_inputs: not armed
            # The profiler's first session imports torch._dynamo, which wraps torch.manual_seed:
            # check the guard, make that import ours, and take the snapshot again.
            self._check_tamper(self.guard)
            import torch._dynamo  # noqa: F401
            self.guard.rebase()
            with torch.no_grad(), self._candidate_code():
                custom.update(self.instrument.count_new_op_calls(new_ops, lambda: self.new_model(*args)))
            calls_per_trial = [1] * len(calls_per_trial) if any(k.startswith("op.") for k in custom) else calls_per_trial
        self.fields["custom_calls"] = custom
        # Custom code must run in every trial, not once at construction or on one lucky input.
        self.fields["custom_kernel"] = bool(calls_per_trial) and all(calls_per_trial)

    def _side_stream_check(self, out: Any) -> None:
        """On a GPU: is the output still being written after forward returned to the caller?"""
        if self.device.type != "cuda":
            return
        torch = self.torch
        tensors = [t for t in self.compare.flatten(out) if isinstance(t, torch.Tensor)]
        # Snapshot on the current stream only: it runs after everything forward queued *there*.
        snap = [t.clone() for t in tensors]
        torch.cuda.current_stream(self.device).synchronize()
        self.timing._synchronize()
        for s, t in zip(snap, tensors):
            if not self.compare.identical(s, t):
                raise Finish("cheat", "the output changed after forward returned: work on another stream "
                             "was not joined to the caller's stream",
                             cheat_reasons=["unsynchronized side-stream work"])

    def _timing(self) -> None:
        """The candidate against the reference under timing.time_pair: fresh inputs per call from a
        seed drawn here (os.urandom: nothing the candidate can read or predict), every output
        checked with the trials' tolerance, inputs checked unchanged after every call."""
        timing, job, compare = self.timing, self.job, self.compare
        cfg = timing.TimingConfig(**job["timing"])

        def draw() -> list[Any]:
            return self._inputs(secrets.randbits(31))

        def check(out_r: Any, out_c: Any) -> Optional[str]:
            result = compare.compare(out_r, out_c, self.tol, -1)
            return None if result.ok else result.message

        try:
            pair = timing.time_pair(self.new_model, self.ref_model, draw, check, self.device, cfg,
                                    self._bandwidth())
        except timing.TimedCallRejected as e:
            raise Finish("cheat", e.message, cheat_reasons=[e.reason]) from e
        cand, ref = pair.candidate, pair.reference
        self.fields["timing"], self.fields["ref_timing"] = cand.model_dump(), ref.model_dump()
        self.fields["runtime_ms"], self.fields["ref_runtime_ms"] = cand.median_ms, ref.median_ms
        cuda = self.device.type == "cuda"
        margin = GPU_FLOOR_MARGIN if cuda else CPU_FLOOR_MARGIN
        if timing.below_floor(cand, ref, margin, GPU_MIN_FLOOR_MS if cuda else CPU_MIN_FLOOR_MS):
            # Every output was right and yet no memory system moves those bytes that fast: the
            # work happened outside the interval (a thread or stream the checks missed).
            raise Finish("cheat", f"median {cand.median_ms:.4g} ms is below {margin:g}x the physical floor of a call "
                         f"({cand.floor_ms:.4g} ms: its input and output bytes over the memory bandwidth)",
                         cheat_reasons=["time below the physical floor"])
        speedup = ref.median_ms / cand.median_ms if cand.median_ms > 0 else None
        self.fields["speedup"] = speedup
        self.fields["faster"] = bool(speedup and speedup > 1 and timing.faster_beyond_noise(cand, ref))
        if speedup and speedup > 10:
            self.fields.setdefault("flags", []).append("speedup_above_10x: review before trusting")
        if job.get("compile_baseline"):
            self._compile_baseline(draw, check, cfg, cand)

    def _bandwidth(self) -> Optional[float]:
        """Memory bandwidth for the floor: measured on this CPU (cached per machine in the cache
        folder), the table's figure for a known GPU; None for a GPU we have no figure for."""
        from pathlib import Path

        cpu_peaks, device_peaks = self.peaks
        if self.device.type == "cuda":
            peaks = device_peaks(str(self.device))
            return peaks.bandwidth if peaks.sources.get("bandwidth") != "assumed" else None
        return cpu_peaks(Path(self.job["builds_root"]).parent).bandwidth

    def _compile_baseline(self, draw: Any, check: Any, cfg: Any, cand: Any) -> None:
        """torch.compile(reference), timed under the protocol the candidate was timed with (time_pair
        against the eager reference: fresh inputs per call, alternation, every output checked), so
        fast_1 against it compares like with like. A compile that fails here is a fact about this
        machine (no C++ compiler for inductor, an unsupported op), recorded, not a verdict."""
        timing, inst = self.timing, self.instrument
        threads, children = inst.python_threads(), inst.child_pids()
        try:
            compiled = self.torch.compile(self.ref_model)
            comp = timing.time_pair(compiled, self.ref_model, draw, check, self.device, cfg,
                                    threads=cand.threads).candidate
        except Exception as e:  # noqa: BLE001 -- any failure of the baseline is reported as such
            text = str(e).strip()
            self.fields["compile_baseline_error"] = f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"
            return
        finally:
            # inductor's compile threads and workers are ours, not the candidate's
            self.baseline_threads = inst.python_threads() - threads
            self.baseline_children = inst.child_pids() - children
        self.fields["compile_timing"], self.fields["compile_runtime_ms"] = comp.model_dump(), comp.median_ms
        self.fields["faster_than_compile"] = bool(cand.median_ms < comp.median_ms and timing.faster_beyond_noise(cand, comp))

    def _recheck(self) -> None:
        torch, compare = self.torch, self.compare
        inputs = self._inputs(self.job["seed"] + 999_983)
        with torch.no_grad():
            with self._candidate_code():
                out_c = self.new_model(*self._clone(inputs))
            self._sync()
            out_r = self.ref_model(*self._clone(inputs))
            self._sync()
        tol = compare.tolerance_for(compare.flatten(out_r), self.job.get("atol"), self.job.get("rtol"))
        result = compare.compare(out_r, out_c, tol, -1)
        if not result.ok:
            raise Finish("cheat", "correct on the first trials, wrong after repeated calls: " + result.message,
                         cheat_reasons=["output changes after repeated calls (caching or state)"])

    def _work(self, new_ops: set[str]) -> None:
        """Custom code ran in every trial; did it do the work? (work.py says how.) Each forward
        here gets its own fresh inputs and runs before the reference: a buffer the allocator hands
        back then holds another input's result, so what a call writes differs from what was there
        (how written arguments are found)."""
        torch, compare, work = self.torch, self.compare, self.work

        def forward(probe: Any, offset: int) -> tuple[Any, Any, float]:
            """(reference output, candidate output, the candidate's seconds) on fresh inputs, the
            candidate's custom calls going through `probe`."""
            inputs = self._inputs(self.job["seed"] + 555_557 + offset)
            args = self._clone(inputs)
            # the candidate first, as in the trials: run after the reference, a buffer it gets back
            # from the allocator could already hold the reference's intermediate, the very values
            # its kernel writes, and the write would be invisible
            start = work._perf_counter()
            with torch.no_grad(), work.probing(self.counter, probe, new_ops), self._candidate_code():
                out_c = self.new_model(*args)
            self._sync()
            seconds = work._perf_counter() - start
            with torch.no_grad():
                out_r = self.ref_model(*self._clone(inputs))
            self._sync()
            return out_r, out_c, seconds

        def matches(out_r: Any, out_c: Any) -> Any:
            tol = compare.tolerance_for(compare.flatten(out_r), self.job.get("atol"), self.job.get("rtol"))
            return compare.compare(out_r, out_c, tol, -1)

        try:
            timer = work.TimeProbe(self._sync)
            total = forward(timer, 0)[2]
            seen = work.InspectProbe()
            out_r, out_c, _ = forward(seen, 1)
        except Finish:
            raise
        except Exception as e:
            raise Finish(*self._classify_runtime(e)) from e
        self.fields["custom_share"] = round(min(1.0, timer.seconds / total), 4) if total > 0 else None
        result = matches(out_r, out_c)
        if not result.ok:
            raise Finish("wrong_output", "wrong on fresh inputs in the work check: " + result.message)
        self.fields["copy_only_calls"] = sorted(seen.seen - seen.work)
        if not seen.work:
            self.fields["custom_kernel"] = False
            raise Finish("no_custom_kernel", "every custom call only copied its input, filled a constant or "
                         f"produced nothing: {', '.join(sorted(seen.seen))}")
        try:
            out_r, perturbed, _ = forward(work.PerturbProbe(seen.work), 2)
        except Finish:
            raise
        except Exception:  # noqa: BLE001 - failing on altered custom outputs is depending on them
            return
        if matches(out_r, perturbed).ok:
            self.fields["custom_kernel"] = False
            raise Finish("no_custom_kernel", "the output does not depend on the custom code: with the outputs of "
                         f"{', '.join(sorted(seen.work))} replaced by noise, it still matches the reference")

    def _check_tamper(self, guard: Any) -> None:
        changed = guard.changed()
        if changed:
            raise Finish("cheat", "; ".join(changed), cheat_reasons=changed)

    def _check_leftovers(self, threads_before: set[int], children_before: set[int]) -> None:
        threads = self.instrument.python_threads() - threads_before - getattr(self, "baseline_threads", set())
        children = self.instrument.child_pids() - children_before - getattr(self, "baseline_children", set())
        reasons = []
        if threads:
            reasons.append(f"{len(threads)} Python thread(s) started by the candidate are still running")
        if children:
            reasons.append(f"{len(children)} child process(es) started by the candidate are still running")
        if reasons:
            raise Finish("cheat", "; ".join(reasons), cheat_reasons=reasons)


def _defines_triton_kernel(module: types.ModuleType) -> bool:
    return any(type(v).__module__.startswith("triton") and hasattr(v, "run") for v in vars(module).values())


def _is_no_gpu_error(e: BaseException) -> bool:
    text = str(e)
    return any(s in text for s in ("Torch not compiled with CUDA", "no CUDA GPUs", "CUDA driver",
                                   "Found no NVIDIA driver", "cudaGetDeviceCount"))


def _become_subreaper() -> None:
    """Orphans the candidate leaves behind re-parent to us, so we can find and end them."""
    try:
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _kill_descendants() -> None:
    import signal

    from kernelwright.evaluate.instrument import child_pids

    for pid in child_pids():
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # reap it: an orphaned zombie could outlive us where init does not reap
        except OSError:
            pass


def main() -> None:
    fd = int(sys.argv[1])
    # Import torch before waiting for the job: a pool starts workers ahead of their candidate, so
    # this (seconds of CPU) overlaps the previous evaluation. No candidate code has run yet.
    import torch  # noqa: F401

    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    # A worker started ahead of time was started elsewhere; the job's own folder is its cwd.
    os.chdir(job["workdir"])
    if job.get("kind") == "build":  # the trusted builder's job: no candidate code in this process
        from kernelwright.evaluate import builder

        try:
            builder.run(job)
        finally:
            _kill_descendants()
            os._exit(0)
    ch = Channel(fd, job.pop("nonce"))
    _become_subreaper()
    worker = Worker(job, ch)
    try:
        worker.run()
    except Finish as f:
        ch.send(type="result", verdict=f.verdict, error=f.error, fields={**worker.fields, **f.fields})
    except SystemExit as e:
        ch.send(type="result", verdict="crash", error=f"the candidate called sys.exit({e.code!r})",
                fields=worker.fields)
    except BaseException as e:  # noqa: BLE001 - e.g. KeyboardInterrupt raised by candidate code
        ch.send(type="result", verdict="runtime_error", error=f"{type(e).__name__}: {e}",
                fields=worker.fields)
    finally:
        _kill_descendants()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skip atexit hooks and non-daemon threads the candidate may have left


if __name__ == "__main__":
    main()
