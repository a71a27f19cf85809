"""The GPU path: build, check, prove and time one candidate, all in the sandbox's one child process.

On the CPU the judge (judge.py) does this from a process that never imports the candidate; on a GPU
the candidate still shares this process with the checks (docs/evaluator.md says what that leaves
open) until the split is built there.

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
import json
import os
import secrets
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Optional

# Let the candidate's compiled code use at most the cores we were given, and never dump core.
try:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
except Exception:  # pragma: no cover - not fatal
    pass


from kernelwright.evaluate import candidate_load  # noqa: E402
from kernelwright.evaluate.candidate_load import Finish, classify_runtime, error_text  # noqa: E402
from kernelwright.evaluate.channel import Channel  # noqa: E402


class Worker:
    def __init__(self, job: dict[str, Any], ch: Channel):
        self.job, self.ch = job, ch
        self.fields: dict[str, Any] = {"judge": "in-process"}

    def stage(self, name: str) -> Any:
        return self.ch.stage(name)

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

    def _seed(self, seed: int) -> None:
        self.draw.seed_all(seed)

    def _inputs(self, seed: int) -> list[Any]:
        return self.draw.draw_inputs(self.ref_mod.get_inputs, seed, self.device)

    def _clone(self, inputs: list[Any]) -> list[Any]:
        return self.timing.clone_inputs(inputs)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.timing._synchronize()

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
                from kernelwright.analysis.roofline import floor_bandwidth

                self.floor_bandwidth = floor_bandwidth
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
                self.ref_mod, ref_filename, self.init_inputs, self.ref_model = work.build_reference(
                    job.pop("task_source"), job["seed"], self.device)
                self.ref_watch = work.ReferenceWatch(ref_filename)
            except Exception as e:  # the task itself is broken: bad input, not a candidate verdict
                raise Finish("reference_error", error_text(e)) from e

        counter = instrument.CallCounter()
        build_fn = candidate_load.build_fn(bool(job.get("compile_only")), bool(job.get("prebuild")))
        place = instrument.BuildPlace(scratch=job["workdir"], cache_root=job.get("builds_root"),
                                      scope=job.get("build_scope"))
        instrument.install(counter, place, build_fn)
        guard = self.guard = instrument.TamperGuard()
        ops_before = instrument.dispatcher_ops()
        threads_before, children_before = instrument.python_threads(), instrument.child_pids()
        self.counter = counter

        self.fields["builds"] = counter.builds  # the list fills as builds run: on the record if one fails too
        with self.stage("compile"), self._candidate_code():
            cand = candidate_load.import_candidate(job["candidate_source"], job["workdir"], counter,
                                                      bool(job.get("compile_only")), self.fields)
        self.fields["compiled"] = True
        new_ops = instrument.dispatcher_ops() - ops_before
        self._check_tamper(guard)

        if job.get("compile_only"):
            if counter.builds or candidate_load.defines_triton_kernel(cand):
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
                raise Finish(*classify_runtime(e))

        # work on the device without a clock holds it shared: never during another process's timing
        device = job["device"]
        with self.stage("correctness"), device_lock.DeviceLock(device, shared=True):
            self._correctness(counter, new_ops)
        self._check_tamper(guard)
        self._check_leftovers(threads_before, children_before)

        if job.get("time", True):
            # one hold across the candidate's and the reference's timing: the two are compared
            with self.stage("timing"), device_lock.DeviceLock(device) as held:
                self.fields["device_lock_wait_s"] = round(held.waited, 4)
                self._timing()
            self._check_tamper(guard)
            with self.stage("recheck"), device_lock.DeviceLock(device, shared=True):
                self._recheck()
            self._check_leftovers(threads_before, children_before)
        if self.fields["custom_kernel"]:
            with self.stage("work"), device_lock.DeviceLock(device, shared=True):
                self._work(new_ops)
            self._check_tamper(guard)
            self._check_leftovers(threads_before, children_before)
        raise Finish("correct" if self.fields["custom_kernel"] else "no_custom_kernel")

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
                raise Finish(*classify_runtime(e)) from e
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
            bad = compare.trial_verdict(result, out_r, out_c, previous)
            if bad is not None:
                raise Finish(bad[0], bad[1], **bad[2])
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
        if self.device.type == "cuda" and self.compare.unjoined(out, self.device, self.timing._synchronize):
            raise Finish("cheat", self.compare.UNJOINED, cheat_reasons=["unsynchronized side-stream work"])

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
            fields = timing.pair_fields(pair, self.device.type == "cuda")
        except timing.TimedCallRejected as e:
            raise Finish("cheat", e.message, cheat_reasons=[e.reason]) from e
        self.fields.setdefault("flags", []).extend(fields.pop("flags"))
        self.fields.update(fields)
        cand = pair.candidate
        if job.get("compile_baseline"):
            self._compile_baseline(draw, check, cfg, cand)

    def _bandwidth(self) -> Optional[float]:
        from pathlib import Path

        return self.floor_bandwidth(str(self.device), Path(self.job["builds_root"]).parent)

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
            raise Finish(*classify_runtime(e)) from e
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
    candidate_load.become_subreaper()
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
        candidate_load.end_process()


if __name__ == "__main__":
    main()
