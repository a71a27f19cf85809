"""The judge: the trusted process of an evaluation, CPU or GPU. It never imports the candidate.

Protocol with the parent (sandbox.py): argv[1] is the result
pipe's fd; the job (records.EvalJob) arrives as JSON on stdin with a nonce every message back carries; messages are
`stage_start`, `stage` and one final `result`.

The candidate runs in a runner process (runner.py) that the judge forks as soon as torch is
imported (on a GPU: starts as a fresh interpreter), before it reads its job (a pool keeps judges waiting for a job, runners included). The judge loads the reference itself, draws
every input, computes the reference's outputs on its own copies, compares, times and writes the
verdict; the runner only receives tensors in shared memory (arena.py; cuda_arena.py on a GPU), calls forward and copies
its outputs back. Nothing the candidate rebinds (json, os.write, torch.allclose, the clocks, a
frame's locals) is in this process, and the runner holds neither the result pipe nor a way into
this process's memory: the judge makes itself non-dumpable, so a runner without capabilities can
neither ptrace it nor open /proc/<judge>/{mem,fd}. A second, trusted runner holds the reference for
timing, so both sides of a timed pair pay the same round trip and copies (timing.time_served_pair).

What the candidate's runner reports about itself (custom calls, the work probes' observations,
tampering and leftover threads or processes it notices) is a claim: a claim can cost it the
verdict, never earn one; outputs and times are only ever the judge's own observations.

Order of work: setup, load_reference, compile (the runner imports the candidate; builds run
there), init, correctness (trials on fresh inputs), timing (alternating with the reference's
runner), recheck (unseen inputs after timing), work (work.py's probes, run by the candidate's
runner, judged here on the judge's own reference outputs).
"""

from __future__ import annotations

import ctypes
import os
import sys

# Nothing of this process may be importable from a folder the candidate can write: `python -m`
# put the working directory (the scratch folder) first on the path.
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]

import secrets  # noqa: E402
from typing import Any, Optional  # noqa: E402

from kernelwright.evaluate.candidate_load import (  # noqa: E402
    Finish, become_subreaper, end_process, reference_failed, reference_raised)
from kernelwright.evaluate import proof  # noqa: E402
from kernelwright.evaluate.channel import Channel  # noqa: E402
from kernelwright.evaluate.remote import RemoteRunner  # noqa: E402
from kernelwright.records import BuildJob, EvalJob, measured, parse_job  # noqa: E402

try:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
except Exception:  # pragma: no cover - not fatal
    pass


class Judge:
    def __init__(self, job: EvalJob, ch: Channel, cand: Any, ref_runner: Optional[Any] = None):
        self.job, self.ch, self.cand = job, ch, cand
        self.ref_runner = ref_runner
        self.fields: dict[str, Any] = {"judge": "split"}
        self.current = "start-up"
        # the reference cast to float64 for _exact, at its first use; False: it does not run so
        self.exact_model: Any = None
        self.libs: Any = None  # proof.Libraries seen mapped in the candidate's process

    def stage(self, name: str) -> Any:
        self.current = name
        return self.ch.stage(name)

    # -- the runners' answers -----------------------------------------------------------------

    def _ask(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A runner's reply; its death or a broken protocol ends the evaluation as a crash."""
        from kernelwright.evaluate.remote import LeftoverWork, RunnerGone

        try:
            return fn(*args, **kwargs)
        except LeftoverWork as e:
            raise Finish("cheat", e.message, cheat_reasons=e.reasons) from None
        except RunnerGone as e:
            if e.runner is self.cand:
                raise Finish("crash", f"the candidate's process {e.how} during stage '{self.current}'") from None
            # a trusted process with nothing but the candidate beside it: the candidate's doing
            raise Finish("crash", f"the reference's runner {e.how} during stage '{self.current}'") from None

    def _claim(self, reply: Any, importing: bool = False) -> Finish:
        """The verdict a runner's error reply earns: its own claim if that is one it may make (all
        lose), else a runtime error. Build verdicts are only claims about an import."""
        from kernelwright.evaluate.link import CLAIMABLE

        if reply.kind == "exit":
            return Finish("crash", reply.error)
        verdict = reply.verdict if reply.verdict in CLAIMABLE else "runtime_error"
        if verdict == "cheat":
            return Finish("cheat", reply.error, cheat_reasons=[reply.error or "cheat"])
        if not importing and verdict in ("compiled", "compile_error", "syntax_error"):
            verdict = "runtime_error"
        if verdict == "compiled" and not self.job.compile_only:
            verdict = "runtime_error"
        return Finish(verdict, reply.error)

    def _call(self, inputs: list[Any], like: list[Any], probe: str = "none",
              perturb: Optional[list[str]] = None) -> tuple[list[Any], Any]:
        from kernelwright.evaluate.remote import Refused

        proven: dict[str, int] = {}
        for _ in range(SPOT_RETRIES):
            try:
                staged = self._ask(self.cand.stage, inputs, like)
                out, reply = self._ask(self.cand.run, staged, "main", probe, perturb)
            except Refused as e:
                if not e.reply.perturbed:
                    raise self._claim(e.reply) from None
                continue  # failed on a spot check's noise: it depended on it; ask again
            if not reply.perturbed:
                if proven and not reply.calls:
                    # the same inputs asked again: a memo of them (keyed by value) may answer without
                    # custom calls, and the spotted call just proved custom code makes this output
                    reply = reply.model_copy(update={"calls": proven})
                return out, reply
            self._spotted(like, out, inputs, reply.perturbed)  # then ask again for an answer to judge
            proven = dict(reply.calls)
        raise Finish("runtime_error", f"{SPOT_RETRIES} calls in a row reported spot-checked custom outputs")

    def _checks(self) -> None:
        """After a stage: nothing of the candidate's tree at work since its last reply (the kernel's
        count, leftovers.py; every call's reply carried the runner's own tamper check)."""
        self._ask(self.cand.idle)

    # -- stages -------------------------------------------------------------------------------

    def run(self) -> None:
        """The stages in the protocol's order (module docstring); every way out is a Finish."""
        job = self.job
        timed = job.time and not job.compile_only
        self._hold_reference_runner(timed)
        with self.stage("setup"):
            self._setup(timed)
        with self.stage("load_reference"):
            self._load_reference()
        if timed:
            self._post_reference()

        kernelbench = job.compat == "kernelbench"
        if kernelbench:
            self.fields["compat"] = "kernelbench"
        self._watch_maps()
        with self.stage("compile"):
            claim = self._import_candidate(kernelbench)
        self.fields["compiled"] = True
        if claim is not None:
            raise claim

        with self.stage("init"):
            self._init_candidate(kernelbench)

        # work on the device without a clock holds it shared: never during another process's timing
        device = job.device
        self._pin_threads()
        with self.stage("correctness"), self.device_lock.DeviceLock(device, shared=True):
            self._correctness()
        self._checks()
        self._libraries()

        if job.time:
            with self.stage("timing"), self.device_lock.DeviceLock(device) as held:
                self.fields["device_lock_wait_s"] = round(held.waited, 4)
                pair = self._timing()
            self._checks()
            if job.compile_baseline:
                self._compile_baseline(pair)
            with self.stage("recheck"), self.device_lock.DeviceLock(device, shared=True):
                self._recheck()
            self._checks()
        if self.fields["custom_kernel"]:
            with self.stage("work"), self.device_lock.DeviceLock(device, shared=True):
                self._work()
            self._checks()
            self._libraries()
        raise Finish("correct" if self.fields["custom_kernel"] else "no_custom_kernel")

    def _hold_reference_runner(self, timed: bool) -> None:
        """The reference's runner is held for a timed job only: started here where the sandbox did
        not start one, ended where an untimed job was given one."""
        if timed and self.ref_runner is None:
            from kernelwright.evaluate.remote import RemoteRunner

            # started now: it imports torch while the candidate builds
            self.ref_runner = RemoteRunner.spawn("the reference's runner")
        elif not timed and self.ref_runner is not None:
            self.ref_runner.kill()
            self.ref_runner = None

    def _setup(self, timed: bool) -> None:
        """The judge's tools bound to it, TF32 off, and the device named once: for the judge and for
        both runners' arenas."""
        import torch

        from kernelwright import device as device_lock
        from kernelwright.evaluate import work
        from kernelwright.measure import compare, draw, footprint, timing

        self.torch, self.compare, self.timing, self.work, self.draw = torch, compare, timing, work, draw
        self.footprint = footprint
        self.device_lock = device_lock
        if timed:
            from kernelwright.analysis.roofline import floor_bandwidth

            self.floor_bandwidth = floor_bandwidth
        self.device = torch.device(self.job.device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.fields["versions"] = {"torch": torch.__version__, "cuda": str(torch.version.cuda),
                                   "python": sys.version.split()[0]}
        if self.device.type == "cuda":
            # CUDA starts here, after the runners were forked (a fork of a CUDA process is unusable)
            torch.cuda.set_device(self.device)
            self.device = torch.device("cuda", torch.cuda.current_device())
            self.fields["versions"]["gpu"] = torch.cuda.get_device_name(self.device)
        for held in (self.cand, self.ref_runner):
            if held is not None:
                held.device = self.device  # where their arenas live

    def _load_reference(self) -> None:
        """The judge's own reference, under the job's seed."""
        job = self.job
        try:
            self.ref_mod, _, self.init_inputs, self.ref_model = self.work.build_reference(
                job.task_source, job.seed, self.device)
        except Exception as e:  # the task itself is broken (bad input), or the device full: not a candidate verdict
            raise reference_raised(e) from e

    def _post_reference(self) -> None:
        """The reference's runner loads and builds the reference while the candidate builds; its
        replies are collected when timing starts (_timing)."""
        from kernelwright.evaluate.link import Import
        from kernelwright.evaluate.remote import init_request

        job, ref = self.job, self.ref_runner
        self._ask(ref.post, Import(role="reference", source=job.task_source, workdir=job.workdir,
                                   device=job.device, compile_baseline=bool(job.compile_baseline)))
        self._ask(ref.post, init_request(job.seed, self.init_inputs))

    def _import_candidate(self, kernelbench: bool) -> Optional[Finish]:
        """The candidate's runner imports the candidate (its builds run there). Returns the claim
        that ends the evaluation once the stage is recorded as done: a compile-only job's own end
        (compiled, no custom kernel) is a stage that went well; any other claim is raised here."""
        from kernelwright.evaluate.link import Import

        job = self.job
        reply = self._ask(self.cand.load, Import(
            source=job.candidate_source, workdir=job.workdir, device=job.device,
            compile_only=bool(job.compile_only), prebuild=bool(job.prebuild),
            builds_root=job.builds_root,
            preamble=job.task_source if kernelbench else None))
        self.fields["builds"] = reply.builds
        claim = None if reply.ok else self._claim(reply, importing=True)
        # a compile-only job ends after its import: the stage itself went well
        if claim is not None and not (job.compile_only and claim.verdict in ("compiled", "no_custom_kernel")):
            raise claim
        return claim

    def _init_candidate(self, kernelbench: bool) -> None:
        """ModelNew(*init_inputs) in the candidate's runner, under the job's seed."""
        job = self.job
        reply = self._ask(self.cand.init, job.seed, self.init_inputs)
        if not reply.ok and kernelbench and reply.kind == "error" and reply.verdict != "out_of_memory":
            self.fields["compiled"] = False  # KernelBench builds ModelNew as part of its load
            raise Finish("compile_error", f"ModelNew(*get_init_inputs()) failed, which KernelBench counts as "
                                          f"not compiled: {reply.error}")
        if not reply.ok:
            raise self._claim(reply)

    def _compile_baseline(self, pair: tuple[Any, Any]) -> None:
        """torch.compile of the reference, compiled and then timed against the eager reference.

        After the candidate's timing, never inside it: the compile reads caches the candidate could
        write. torch.compile compiles at its first call, seconds of CPU (15 s on the 2-core
        CPU): that call holds the device shared, so it is held alone only for what is timed."""
        device = self.job.device
        with self.stage("compile_baseline"), self.device_lock.DeviceLock(device, shared=True):
            self._compile_reference()
        if "compile_baseline_error" not in self.fields:
            with self.stage("compile_timing"), self.device_lock.DeviceLock(device):
                self._time_compiled(*pair)

    def _pin_threads(self) -> None:
        """On the CPU, every call of the candidate (checked or timed) runs with the thread count
        timing uses, set once: a change at the start of timing would announce it to the runner."""
        leftovers = self.cand.leftovers
        if leftovers is not None:
            leftovers.others()  # finds the runner in the box's /proc: in a PID namespace of its own or not
            self.fields["runner_isolated"] = bool(leftovers.isolated)
        if self.device.type == "cuda" or not self.job.time:
            return
        from kernelwright.evaluate.remote import Refused

        threads = self.timing.free_cpu_threads(self.timing.machine_load())
        try:
            self._ask(self.cand.pin_threads, threads)
        except Refused as e:
            raise self._claim(e.reply) from None
        self.pinned = threads

    def _watch_maps(self) -> None:
        """Open the candidate's runner's /proc maps before any candidate code runs (proof.py): the
        runner answers a request once it is in its namespaces, so it can be found below the
        process this one started; the descriptor keeps reading its mappings whatever the candidate
        later does to its own dumpability."""
        from kernelwright.evaluate.link import Echo

        self._ask(self.cand.request, Echo())
        leftovers = self.cand.leftovers
        pid = leftovers.located() if leftovers is not None else self.cand.proc.pid
        self.cand.maps_fd = proof.open_maps(pid)

    def _libraries(self) -> None:
        """Credit only for code this evaluation built (proof.py): the libraries the candidate's
        process has mapped, read from /proc by this process, never the runner's word."""
        if self.libs is None:
            self.libs = proof.Libraries()
        claimed = {str(b.get("key")) for b in self.fields.get("builds") or [] if isinstance(b, dict) and b.get("key")}
        self.libs.merge(proof.mapped_libraries(self.job.workdir, self.job.builds_root,
                                               set(self.job.cache_keys) | claimed,
                                               proof.read_maps(getattr(self.cand, "maps_fd", None))))
        if not self.fields.get("custom_kernel"):
            return
        refused = proof.library_verdict(self.libs, self.fields.get("custom_calls") or {})
        if refused is not None:
            self.fields["custom_kernel"] = False
            raise refused

    def _inputs(self, seed: int) -> list[Any]:
        return self.draw.draw_inputs(self.ref_mod.get_inputs, seed, self.device)

    def _fresh(self, stage: str) -> list[Any]:
        """Inputs for one check of `stage`, under a seed drawn here from `secrets` when it is needed:
        no candidate can know it or have memorised an answer for it, with or without timing. The
        seed goes into the record (`input_seeds`), which the candidate never sees, so any check's
        inputs can be drawn again."""
        seeds = self.fields.setdefault("input_seeds", {})
        used = {s for drawn in seeds.values() for s in drawn}
        seed = secrets.randbits(31)
        while seed in used:  # distinct inputs per check: the cached-result test compares trials
            seed = secrets.randbits(31)
        seeds.setdefault(stage, []).append(seed)
        return self._inputs(seed)

    def _reference(self, inputs: list[Any]) -> list[Any]:
        """The reference's outputs on the judge's own copy of `inputs`, flattened."""
        from kernelwright.evaluate.candidate_load import is_out_of_memory

        try:
            with self.torch.no_grad():
                return self.compare.flatten(self.ref_model(*self.timing.clone_inputs(inputs)))
        except Exception as e:
            if is_out_of_memory(e):  # the task's, not the candidate's: re-run alone, then the task fails
                raise reference_raised(e) from e
            raise

    def _tol(self, refs: list[Any]) -> Any:
        return self.compare.tolerance_for(refs, self.job.atol, self.job.rtol)

    def _exact(self, inputs: list[Any]) -> Any:
        """compare.compare's `exact` for these inputs: the reference run in float64 on them (a copy
        of the module, cast once), at the first output outside the tolerance, once; None where the
        module does not run in float64."""
        import copy

        torch = self.torch
        memo: list[Any] = []

        def run() -> Optional[list[Any]]:
            if memo:
                return memo[0]
            memo.append(None)
            try:
                if self.exact_model is None:
                    self.exact_model = copy.deepcopy(self.ref_model).double()
                doubled = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                           for x in self.timing.clone_inputs(inputs)]
                with torch.no_grad():
                    memo[0] = self.compare.flatten(self.exact_model(*doubled))
            except Exception:  # noqa: BLE001 - a module that cannot run in float64: the tolerance alone decides
                self.exact_model = False
            return memo[0]

        return (lambda: None) if self.exact_model is False else run

    def _compared(self, out_r: Any, out_c: Any, inputs: list[Any], trial: int, tol: Any = None,
                  record: bool = True) -> Any:
        """compare.compare with the float64 hearing; a match decided by it is counted in the record."""
        result = self.compare.compare(out_r, out_c, tol or self.tol, trial, self._exact(inputs))
        if record and result.accuracy is not None:
            seen = self.fields.get("accuracy")
            merged = self.compare.merge_accuracy(type(result.accuracy)(**seen) if seen else None, result.accuracy)
            self.fields["accuracy"] = merged.model_dump()
        return result

    def _correctness(self) -> None:
        compare, job = self.compare, self.job
        previous: list[tuple[Any, Any]] = []
        calls_per_trial = []
        custom: dict[str, int] = {}
        for k in range(job.trials):
            inputs = self._fresh("correctness")
            # The reference runs here, in another process: memory the candidate did not write
            # cannot hold its answer, whichever runs first, so its outputs shape the buffers.
            out_r = self._reference(inputs)
            out_c, reply = self._call(inputs, out_r)
            calls_per_trial.append(sum(reply.calls.values()))
            for key, n in reply.calls.items():
                custom[key] = custom.get(key, 0) + n
            if k == 0:
                self.tol = self._tol(out_r)
                self.like = self.footprint.shapes_of(out_r)  # shapes and dtypes only: no device memory
                self.fields["tolerance"] = self.tol.model_dump()
            result = self._compared(out_r, out_c, inputs, k)
            self.fields["trials"] = k + 1
            if result.kind == "subclass" and reply.error:
                result.message = reply.error  # the runner named the subclass; the placeholder cannot
            bad = compare.trial_verdict(result, out_r, out_c, previous)
            if bad is not None:
                raise Finish(bad[0], bad[1], **bad[2])
            previous.append((out_r, out_c))
            del previous[:-self.footprint.trials_kept(self.footprint.tensor_bytes(out_r), job.trials)]
        if not all(calls_per_trial):
            # operators the candidate registered with the dispatcher are counted from a profile
            inputs = self._fresh("count_ops")
            _, reply = self._call(inputs, self._reference(inputs), probe="count_ops")
            custom.update(reply.calls)
            if any(key.startswith("op.") for key in reply.calls):
                calls_per_trial = [1] * len(calls_per_trial)
        self.fields["custom_calls"] = custom
        # Custom code must run in every trial, not once at construction or on one lucky input.
        self.fields["custom_kernel"] = bool(calls_per_trial) and all(calls_per_trial)

    def _timing(self) -> tuple[Any, Any]:
        """The candidate's runner against the reference's, under timing.time_served_pair; returns
        what the compile baseline is timed with (the protocol, the candidate's times)."""
        from kernelwright.evaluate.remote import Refused, Served

        timing, job = self.timing, self.job
        ref = self.ref_runner
        assert ref is not None
        for _ in ("import", "init"):  # posted after load_reference
            reply = self._ask(ref.collect)
            if not reply.ok:
                raise reference_failed(reply)
        cfg = timing.TimingConfig(**job.timing.model_dump())
        cand_served = proof.ProvenServed(self.cand, self.like, bool(proof.compiled_keys(self.fields["custom_calls"])),
                                         self._spotted)
        ref_served = Served(ref, self.like)
        try:
            pair = self._ask(timing.time_served_pair, cand_served, ref_served, self._draw,
                             cand_served.checking(self._output_check()), self.device, cfg, self._bandwidth(),
                             threads=getattr(self, "pinned", None), null=ref_served)
            fields = timing.pair_fields(pair, self.device.type == "cuda")
        except timing.TimedCallRejected as e:
            raise Finish("cheat", e.message, cheat_reasons=[e.reason]) from e
        except Refused as e:
            if e.runner is not self.cand:
                raise reference_failed(e.reply) from None
            raise self._claim(e.reply) from None
        self.fields.setdefault("flags", []).extend(fields.pop("flags"))
        self.fields.update(fields)
        return cfg, pair.candidate

    def _spotted(self, out_r: Any, out_c: Any, inputs: list[Any], keys: list[str]) -> None:
        """A call whose custom outputs the runner's spot check replaced by noise (work.SpotCheck):
        an output that still matches the reference did not come from the custom code."""
        if self._compared(out_r, out_c, inputs, -1, self._tol(out_r), record=False).ok:
            self.fields["custom_kernel"] = False
            raise Finish("no_custom_kernel", "the output does not depend on the custom code: with the outputs of "
                         f"{', '.join(keys)} replaced by noise in an unannounced spot check, it still matches "
                         "the reference")

    def _output_check(self, record: bool = True) -> Any:
        """time_served_pair's check of every timed call's outputs: as the trials' are judged."""

        def check(out_r: Any, out_c: Any, inputs: list[Any]) -> Optional[str]:
            result = self._compared(out_r, out_c, inputs, -1, record=record)
            return None if result.ok else result.message

        return check

    def _draw(self) -> list[Any]:
        """Fresh inputs for one timed call."""
        return self._inputs(secrets.randbits(31))

    def _compile_reference(self) -> None:
        """torch.compile(reference) in the reference's runner (ready since the candidate's timing),
        and its first call (the compilation) on fresh inputs; a failure is recorded as the
        baseline's error and skips its timing."""
        from kernelwright.evaluate.link import Compile
        from kernelwright.evaluate.remote import Refused, Served

        ref = self.ref_runner
        try:
            reply = self._ask(ref.request, Compile())
            if not reply.ok:
                raise Refused(reply)
            served = Served(ref, self.like, "compiled")
            self._ask(lambda: served.run(served.stage(self._draw())))
        except Refused as e:
            self._baseline_failed(e.reply.error)

    def _baseline_failed(self, text: Optional[str]) -> None:
        """The compile baseline's failure, its first line: a fact about this machine, not a verdict."""
        text = (text or "").strip()
        self.fields["compile_baseline_error"] = text.splitlines()[0][:200] if text else "failed"

    def _bandwidth(self) -> Optional[float]:
        from pathlib import Path

        return self.floor_bandwidth(str(self.device), Path(self.job.builds_root).parent)

    def _time_compiled(self, cfg: Any, cand: Any) -> None:
        """torch.compile(reference), compiled by _compile_reference, timed against the eager reference
        in the reference's runner under the candidate's protocol and thread count, its outputs judged
        as the candidate's are (not counted in the candidate's record). A failure is a fact about
        this machine."""
        from kernelwright.evaluate.remote import Refused, Served

        ref = self.ref_runner
        try:
            eager = Served(ref, self.like)
            pair = self._ask(self.timing.time_served_pair, Served(ref, self.like, "compiled"),
                             eager, self._draw, self._output_check(record=False), self.device, cfg, threads=cand.threads, null=eager)
        except (Refused, self.timing.TimedCallRejected) as e:
            self._baseline_failed(e.reply.error if isinstance(e, Refused) else e.message)
            return
        self.fields.update(self.timing.against_compile(cand, pair.candidate, pair.reference))

    def _recheck(self) -> None:
        inputs = self._fresh("recheck")
        out_r = self._reference(inputs)
        out_c, _ = self._call(inputs, out_r)
        result = self._compared(out_r, out_c, inputs, -1, self._tol(out_r))
        if not result.ok:
            raise Finish("cheat", "correct on the first trials, wrong after repeated calls: " + result.message,
                         cheat_reasons=["output changes after repeated calls (caching or state)"])

    def _work(self) -> None:
        """work.py's checks: the probes run in the candidate's runner around its custom calls and
        report what they saw (claims); the outputs are compared here with the judge's reference."""

        drawn: dict[int, list[Any]] = {}

        def forward(probe: str, offset: int, perturb: Optional[list[str]] = None) -> tuple[Any, Any, Any]:
            inputs = drawn[offset] = self._fresh("work")
            out_r = self._reference(inputs)
            out_c, reply = self._call(inputs, out_r, probe, perturb)
            return out_r, out_c, reply

        def matches(out_r: Any, out_c: Any, offset: int) -> Any:
            # noise that happens to be as accurate as the reference is no noise: not recorded
            return self._compared(out_r, out_c, drawn[offset], -1, self._tol(out_r), record=offset == 1)

        _, _, timed = forward("time", 0)
        out_r, out_c, seen = forward("inspect", 1)
        total = timed.seconds or 0.0
        share = (timed.custom_seconds or 0.0) / total if total > 0 else None
        self.fields["custom_share"] = round(min(1.0, max(0.0, share)), 4) if share is not None else None
        result = matches(out_r, out_c, 1)
        if not result.ok:
            raise Finish("wrong_output", "wrong on fresh inputs in the work check: " + result.message)
        self._library(timed, seen)
        self.fields["copy_only_calls"] = sorted(set(seen.seen) - set(seen.work))
        if not seen.work:
            self.fields["custom_kernel"] = False
            raise Finish("no_custom_kernel", "every custom call only copied its input, filled a constant or "
                         f"produced nothing: {', '.join(sorted(seen.seen))}")
        try:
            out_r, perturbed, _ = forward("perturb", 2, sorted(seen.work))
        except Finish as f:
            if f.verdict in ("runtime_error", "hallucinated_api"):
                return  # failing on altered custom outputs is depending on them
            raise
        if matches(out_r, perturbed, 2).ok:
            self.fields["custom_kernel"] = False
            raise Finish("no_custom_kernel", "the output does not depend on the custom code: with the outputs of "
                         f"{', '.join(sorted(seen.work))} replaced by noise, it still matches the reference")

    def _library(self, timed: Any, seen: Any) -> None:
        """A custom call whose compute is ATen's (at::addmm, torch::conv2d, at::softmax dispatched
        from C++) is the library's work, not a kernel: where every entry point that did work returned
        what an ATen compute operator inside it returned, or where the ATen compute time inside custom
        calls (one forward) is most of the custom calls' own time (another, without the dispatch mode)."""
        custom = timed.custom_seconds or 0.0
        share = min(1.0, (seen.library_seconds or 0.0) / custom) if custom > 0.0 else None
        self.fields["library_share"] = round(share, 4) if share is not None else None
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(seen.library_ops.items()))
        if seen.work and set(seen.work) <= set(seen.library_made):
            self.fields["custom_kernel"] = False
            raise Finish("no_custom_kernel", f"the custom code's compute is ATen's: what its calls returned came out "
                         f"of {ops}, dispatched from inside them")
        if share is not None and share > LIBRARY_LIMIT and seen.library_ops:
            self.fields["custom_kernel"] = False
            raise Finish("no_custom_kernel", f"the custom code's compute is ATen's: {ops}, dispatched from inside "
                         f"custom calls, took {measured(100 * share, 2)}% of their time")


# Above this share of the custom calls' time in ATen compute they dispatch, the work is the library's.
LIBRARY_LIMIT = 0.5
# A judged call asked again while the runner's spot check perturbs it (1 in 16 each): 8 in a row
# happen once in 4e9 honest calls.
SPOT_RETRIES = 8


def _not_dumpable() -> None:
    """No ptrace, no /proc/<pid>/mem or /fd for a process without CAP_SYS_PTRACE (the runners)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:  # noqa: BLE001 - recorded as missing below
        pass


def dumpable() -> bool:
    try:
        return bool(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
    except Exception:  # noqa: BLE001
        return True


def _deaf() -> None:
    """Interrupts end nothing here: the judge always writes its verdict (the sandbox ends it with
    SIGKILL at its time limit). Nothing of the candidate's can reach it (isolation.py); this holds
    should anything else try."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)


def _options(argv: list[str]) -> tuple[int, dict[str, int]]:
    """The trusted builder's outbox descriptor and the device locks' (sandbox.spawn passes them)."""
    outbox, locks = -1, {}
    for flag, value in zip(argv, argv[1:]):
        if flag == "--outbox":
            outbox = int(value)
        elif flag == "--lock":
            fd, _, path = value.partition("=")
            locks[path] = int(fd)
    return outbox, locks


def main() -> None:
    fd = int(sys.argv[1])
    _not_dumpable()
    _deaf()
    outbox, locks = _options(sys.argv[2:])
    if outbox >= 0:
        os.set_inheritable(outbox, False)  # a started runner gets none; a forked one closes all
    import torch  # noqa: F401 -- before the job: a pool starts judges ahead

    from kernelwright.evaluate import isolation, runner

    # Forked now, before this process ran any tensor operation (an OpenMP pool does not survive a
    # fork) and before it read its job: they share nothing of it, and start with torch imported.
    # For GPU jobs they start as fresh interpreters instead: CUDA is unusable in a child forked
    # from a process in which torch touched CUDA (measured on the H200: "Cannot re-initialize CUDA
    # in forked subprocess" in every forked runner).
    start = runner.start if "--spawn-runners" in sys.argv[2:] else runner.fork
    # a sandbox started for timed jobs (sandbox.Confine.timed): the reference's runner too
    ref = RemoteRunner(*start(), "the reference's runner") if "--timed" in sys.argv[2:] else None
    cand = RemoteRunner(*start(isolate=True), "the candidate's process", watched=True)
    # what the box let the judge keep to start the candidate's runner apart (confine.JUDGE_CAPS)
    isolation.drop_capabilities()
    from kernelwright import device  # noqa: F401
    from kernelwright.analysis import roofline  # noqa: F401
    from kernelwright.evaluate import work  # noqa: F401
    from kernelwright.measure import compare, draw, timing  # noqa: F401

    device.adopt(locks)
    job = parse_job(sys.stdin.read())
    sys.stdin.close()
    if isinstance(job, BuildJob):  # the trusted builder's job (builder.py): no candidate code runs
        from kernelwright.evaluate import builder

        for held in (cand, ref):
            if held is not None:
                held.kill()
        try:
            os.chdir(job.workdir)
            builder.run(job, outbox)
        finally:
            end_process()
    if outbox >= 0:
        os.close(outbox)  # only the builder writes outside the box
    ch = Channel(fd, job.nonce)
    job = job.model_copy(update={"nonce": ""})  # nothing after this needs it
    become_subreaper()
    judge = Judge(job, ch, cand, ref)
    try:
        judge.run()
    except Finish as f:
        ch.send(type="result", verdict=f.verdict, error=f.error, fields={**judge.fields, **f.fields})
    except BaseException as e:  # noqa: BLE001 - no candidate code runs here: a bug of ours, never a verdict
        from kernelwright.evaluate.candidate_load import is_out_of_memory

        # ... except memory: the judge's own allocations (the reference's inputs and outputs) failing
        # because the device is full is the machine's state, which a re-run alone may not share
        verdict = "out_of_memory" if is_out_of_memory(e) else "infrastructure_error"
        ch.send(type="result", verdict=verdict, error=f"the judge failed: {type(e).__name__}: {str(e)[:1000]}",
                fields=judge.fields)
    finally:
        for held in (cand, judge.ref_runner):
            if held is not None:
                held.kill()
        end_process()


if __name__ == "__main__":
    main()
