"""A runner: the process that holds one model and serves the judge's calls (judge.py).

Two run per timed CPU evaluation, both forked by the judge inside the same sandbox right after it
imported torch (`fork`; `python -m kernelwright.evaluate.runner <socket fd>` starts one afresh
where a fork would be unsafe): the *candidate's* runner imports the candidate (its builds run
here, wrapped by instrument.py) and builds `ModelNew`; the *reference's* runner loads the task under
a name nobody can import and builds `Model`, so the reference is timed through exactly the same
protocol. Neither holds the reference's outputs, the comparison or the result pipe: a runner
receives tensors in its arena (arena.py), calls forward, copies the outputs into the buffers the
judge gave it and replies. What the candidate's runner reports (custom calls, what the probes saw,
its own errors, tampering it noticed) is the candidate's claim: the judge lets it cost the
candidate a verdict, never win one.

Requests are handled one at a time, in order; the runner never starts work on its own.
"""

from __future__ import annotations

import os
import sys

# The reference's runner is trusted and lives beside a candidate that can write the scratch folder,
# which `python -m` put first on the path: nothing may be imported from there (user site-packages,
# under HOME in the scratch, are off too: `-s` in `start`).
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]

import base64  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from contextlib import nullcontext  # noqa: E402
from typing import Any, Optional  # noqa: E402

try:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
except Exception:  # pragma: no cover - not fatal
    pass


class Runner:
    def __init__(self, sock: socket.socket):
        import torch

        self.sock, self.torch = sock, torch
        self.models: dict[str, Any] = {}
        self.arena: Optional[Any] = None
        self.counter: Optional[Any] = None
        self.guard: Optional[Any] = None
        self.new_ops: set[str] = set()
        self.module: Any = None
        self.role = "candidate"
        self.device = torch.device("cpu")
        self.threads0 = torch.get_num_threads()
        self.spot: Optional[Any] = None

    def serve(self) -> None:
        """The request loop. What it needs (receiving, decoding, the handler of each request, encoding,
        sending) is bound to local names here, before the first request, so before the candidate is
        imported: rebinding link.decode_request, Runner.do_call or Reply.model_dump_json later changes
        nothing this loop calls. (Native code can still patch its own process: what it gains is at most
        the protocol's own cost on its side, which both sides pay; docs/evaluator.md.)"""
        from kernelwright.evaluate import link

        recv, decode, send, dump = link.recv_with_fds, link.decode_request, link.send, link.Reply.model_dump_json
        Reply, closed, sock = link.Reply, (link.LinkClosed, OSError), self.sock
        # a tuple: nothing the candidate can find through gc and refill (a dict of them would be)
        handlers, index = tuple(getattr(self, f"do_{op}") for op in link.OPS), link.OPS.index
        while True:
            try:
                data, fds = recv(sock)
            except closed:
                return
            req = decode(data)
            try:
                reply = handlers[index(req.op)](req, fds)
            except SystemExit as e:
                reply = Reply(ok=False, kind="exit", error=f"the candidate called sys.exit({e.code!r})")
            except BaseException as e:  # noqa: BLE001 - candidate code raised where no handler expected it
                reply = Reply(ok=False, kind="error", verdict="runtime_error",
                              error=f"{type(e).__name__}: {str(e)[:2000]}")
            send(sock, dump(reply).encode())

    # -- loading -----------------------------------------------------------------------------

    def do_import(self, req: Any, fds: list[int]) -> Any:
        from kernelwright.evaluate import candidate_load, instrument, work
        from kernelwright.evaluate.link import Reply

        torch = self.torch
        self.device = torch.device(req.device)
        if self.device.type == "cuda":
            # one name for the device (outputs report cuda:0, never bare cuda), and builds for the
            # GPU this runs on
            torch.cuda.set_device(self.device)
            self.device = torch.device("cuda", torch.cuda.current_device())
            major, minor = torch.cuda.get_device_capability(self.device)
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        os.chdir(req.workdir)
        # fp32 means fp32: TF32 off for matmul and cuDNN, for the reference and the candidate alike.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        versions = {"torch": torch.__version__, "cuda": str(torch.version.cuda), "python": sys.version.split()[0]}
        if req.role == "reference":
            if req.compile_baseline:  # dynamo's import wraps torch functions: before anything else
                import torch._dynamo  # noqa: F401
                import torch._inductor.compile_fx  # noqa: F401
            self.role = "reference"
            self.module, _ = work.load_reference(req.source)
            self.guard = instrument.TamperGuard()  # checked in every call, as the candidate's: the same cost
            return Reply(ok=True, versions=versions)
        counter = self.counter = instrument.CallCounter()
        counter.probe = self.spot = work.SpotCheck()  # every ordinary call's custom calls go through it
        place = instrument.BuildPlace(scratch=req.workdir, cache_root=req.builds_root)
        instrument.install(counter, place, candidate_load.build_fn(req.compile_only, req.prebuild))
        self.guard = instrument.TamperGuard()
        ops_before = instrument.dispatcher_ops()
        fields: dict[str, Any] = {}
        roots = (os.path.join(req.workdir, "builds"), req.builds_root or "")  # where builds land
        try:
            self.module = candidate_load.import_candidate(req.source, req.workdir, counter, req.compile_only, fields,
                                                          preamble=req.preamble, roots=roots)
        except candidate_load.Finish as f:
            return Reply(ok=False, kind="error", verdict=f.verdict, error=f.error, builds=counter.builds)
        except SystemExit as e:
            return Reply(ok=False, kind="exit", error=f"the candidate called sys.exit({e.code!r})",
                         builds=counter.builds)
        self.new_ops = instrument.dispatcher_ops() - ops_before
        if req.compile_only:
            verdict, error = candidate_load.compile_only_verdict(self.module, counter.builds, roots)
            return Reply(ok=False, kind="error", verdict=verdict, error=error, builds=counter.builds)
        return Reply(ok=True, builds=counter.builds, versions=versions)

    def do_echo(self, req: Any, fds: list[int]) -> Any:
        from kernelwright.evaluate.link import Reply

        return Reply(ok=True)

    def do_init(self, req: Any, fds: list[int]) -> Any:
        from kernelwright.evaluate import candidate_load
        from kernelwright.evaluate.link import Reply
        from kernelwright.measure import draw

        name = "Model" if self.role == "reference" else "ModelNew"
        cls = getattr(self.module, name, None)
        if cls is None:
            return Reply(ok=False, kind="error", verdict="runtime_error", error="the candidate defines no ModelNew")
        init = pickle.loads(base64.b64decode(req.init_pickle))  # noqa: S301 - sent by the judge
        try:
            draw.seed_all(req.seed)
            with self.torch.no_grad():
                self.models["main"] = cls(*copy.deepcopy(init)).to(self.device)
        except SystemExit as e:
            return Reply(ok=False, kind="exit", error=f"the candidate called sys.exit({e.code!r})")
        except Exception as e:
            verdict, error = candidate_load.classify_runtime(e)
            return Reply(ok=False, kind="error", verdict=verdict, error=error)
        return Reply(ok=True)

    def do_compile(self, req: Any, fds: list[int]) -> Any:
        """torch.compile of the reference, for the compile baseline (the reference's runner only)."""
        from kernelwright.evaluate.link import Reply

        if self.role != "reference":
            return Reply(ok=False, kind="error", verdict="runtime_error", error="compile is for the reference")
        try:
            self.models["compiled"] = self.torch.compile(self.models["main"])
        except Exception as e:  # noqa: BLE001 - recorded by the judge as the baseline's error
            return Reply(ok=False, kind="error", verdict="runtime_error", error=f"{type(e).__name__}: {e}")
        return Reply(ok=True)

    def do_arena(self, req: Any, fds: list[int]) -> Any:
        from kernelwright.evaluate.arena import Arena
        from kernelwright.evaluate.link import Reply

        if self.arena is not None:
            self.arena.close()
        if req.cuda_handle is not None:
            from kernelwright.evaluate.cuda_arena import CudaArena

            for extra in fds:
                os.close(extra)
            self.arena = CudaArena.attach(req.cuda_handle, req.nbytes, self.device)
            return Reply(ok=True)
        self.arena = Arena.attach(fds[0], req.nbytes)
        for extra in fds[1:]:
            os.close(extra)
        return Reply(ok=True)

    def do_threads(self, req: Any, fds: list[int]) -> Any:
        from kernelwright.evaluate.link import Reply

        self.torch.set_num_threads(req.n or self.threads0)
        return Reply(ok=True)

    def do_checks(self, req: Any, fds: list[int]) -> Any:
        """Tampering the candidate's process can see in itself (every call's reply carries the same).
        Leftover threads and processes are the judge's to find, from /proc (leftovers.py)."""
        from kernelwright.evaluate.link import Reply

        return Reply(ok=True, reasons=list(self.guard.changed()) if self.guard is not None else [])

    # -- calls --------------------------------------------------------------------------------

    def _probing(self, req: Any) -> tuple[Any, Any]:
        """The work probe the judge asked for (work.py) and the context the call runs in with it."""
        from kernelwright.evaluate import work

        probe: Any = None
        if req.probe == "time":
            probe = work.TimeProbe(self._sync)
        elif req.probe == "inspect":
            probe = work.InspectProbe(self._sync)
        elif req.probe == "perturb":
            probe = work.PerturbProbe(set(req.perturb))
        probing = work.probing(self.counter, probe, self.new_ops) if probe is not None else nullcontext()
        if req.probe != "none" and self.guard is not None and not self.guard.changed():
            # The profiler's first session and the first dispatch mode (the probes' router, the
            # inspect probe's work.LibraryOps) import torch._dynamo, which wraps torch.manual_seed:
            # make that import ours, and take the tamper guard's snapshot again.
            import torch._dynamo  # noqa: F401

            self.guard.rebase()
        return probe, probing

    def _observed(self, counter: Any, before: dict[str, int], seconds: float, probe: Any) -> dict[str, Any]:
        """What this process saw of the call, sent beside the outputs (claims, docs/evaluator.md):
        its custom calls, its time, tampering, spot-checked outputs and the probe's observations."""
        from kernelwright.evaluate import work

        calls = {k: v - before.get(k, 0) for k, v in (counter.snapshot() if counter else {}).items()
                 if v - before.get(k, 0)}
        extra: dict[str, Any] = {"calls": calls, "seconds": seconds,
                                 "reasons": list(self.guard.changed()) if self.guard is not None else [],
                                 "perturbed": sorted(set(self.spot.perturbed)) if self.spot is not None else []}
        if isinstance(probe, work.TimeProbe):
            extra["custom_seconds"] = probe.seconds
        if isinstance(probe, work.InspectProbe):
            extra["seen"], extra["work"] = sorted(probe.seen), sorted(probe.work)
            extra["library_seconds"], extra["library_ops"] = probe.library.seconds, probe.library.ops
            extra["library_made"] = sorted(probe.library_made)
        return extra

    def _outputs(self, torch: Any, out: Any, refs: list[Any], extra: dict[str, Any]) -> Any:
        """The outputs into the judge's buffers (`refs`; None: a value sent back in the reply), or
        the reason they do not fit them: a tensor subclass, or another shape, dtype or device."""
        from kernelwright.evaluate.link import Reply
        from kernelwright.measure.compare import flatten

        items = flatten(out)
        subclass = [(i, type(t).__name__) for i, t in enumerate(items)
                    if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor]
        if subclass:
            i, name = subclass[0]
            return Reply(ok=False, kind="subclass", error=f"output {i} is a {name}, a torch.Tensor subclass",
                         **extra)
        if not self._fits(items, refs):
            return Reply(ok=False, kind="spec", spec=[self._spec(x) for x in items], **extra)
        values = []
        for item, ref in zip(items, refs):
            if ref is None:
                values.append(_jsonable(item))
            else:
                self.arena.view(ref).copy_(item)
        self._sync()
        return Reply(ok=True, values=values, **extra)

    # Its parts are bound as defaults when the class is made, before any candidate code runs, as
    # serve binds do_call itself: rebinding Runner._outputs (or the others) later changes nothing it calls.
    def do_call(self, req: Any, fds: list[int], _probing: Any = _probing, _observed: Any = _observed,
                _outputs: Any = _outputs) -> Any:
        """One call of forward on tensors in the arena, its outputs copied into the judge's buffers."""
        from kernelwright.evaluate import candidate_load, instrument
        from kernelwright.evaluate.link import Reply
        from kernelwright.measure import compare

        try:
            torch = self.torch
            model = self.models[req.model]
            args = [self.arena.view(a.tensor) if a.tensor is not None else a.value for a in req.args]
            counter = self.counter
            before = counter.snapshot() if counter is not None else {}
            if self.spot is not None:
                self.spot.perturbed, self.spot.replaced = [], []
            probe, probing = _probing(self, req)
            start = time.perf_counter()
            try:
                with torch.no_grad(), probing:
                    if req.probe == "count_ops":
                        return Reply(ok=True, calls=instrument.count_new_op_calls(self.new_ops, lambda: model(*args)))
                    out = model(*args)
                # a claim against the candidate (outputs written after forward returned), so its own
                # process may check it; in every call, the reference's runner's too, so that no call
                # differs from another by it (a timed one from a checked one) and both sides pay it
                if self.device.type == "cuda" and compare.unjoined(out, self.device, self._sync):
                    return Reply(ok=False, kind="error", verdict="cheat", error=compare.UNJOINED)
                self._sync()
            except SystemExit as e:
                return Reply(ok=False, kind="exit", error=f"the candidate called sys.exit({e.code!r})")
            except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt raised by candidate code too
                verdict, error = candidate_load.classify_runtime(e)
                # raising on a spot check's noise is depending on it: the judge asks again
                return Reply(ok=False, kind="error", verdict=verdict, error=error,
                             perturbed=sorted(set(self.spot.perturbed)) if self.spot is not None else [])
            seconds = time.perf_counter() - start
            return _outputs(self, torch, out, req.outputs, _observed(self, counter, before, seconds, probe))
        finally:
            if self.spot is not None and self.spot.replaced:
                # the outputs are in the arena (or the call failed): undo the spot check's noise
                # wherever the candidate kept it
                self.spot.restore()
                self._sync()

    def _fits(self, items: list[Any], refs: list[Any]) -> bool:
        from kernelwright.evaluate.arena import dtype_name

        if len(items) != len(refs):
            return False
        for item, ref in zip(items, refs):
            is_tensor = isinstance(item, self.torch.Tensor)
            if (ref is None) == is_tensor:
                return False
            if is_tensor and (list(item.shape) != ref.shape or dtype_name(item.dtype) != ref.dtype
                              or item.device != self.device):
                return False
        return True

    def _spec(self, item: Any) -> Any:
        from kernelwright.evaluate.arena import dtype_name
        from kernelwright.evaluate.link import OutSpec

        if isinstance(item, self.torch.Tensor):
            return OutSpec(tensor=True, shape=list(item.shape)[:64], dtype=dtype_name(item.dtype),
                           device=str(item.device))
        return OutSpec(tensor=False, dtype=type(item).__name__)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()


def _jsonable(x: Any) -> Any:
    try:
        json.dumps(x)
        return x
    except (TypeError, ValueError):
        return repr(x)[:200]


def start(isolate: bool = False) -> tuple[subprocess.Popen, socket.socket]:
    """Start a runner afresh (an interpreter of its own) holding one end of a fresh socket pair and no
    other descriptor of the caller's; returns the process and the caller's end. For a judge that
    already ran tensor operations, where `fork` is unsafe. `isolate`: the candidate's, in namespaces
    of its own (isolation.py) before it imports anything else."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    argv = [sys.executable, "-s", "-m", "kernelwright.evaluate.runner", str(theirs.fileno())]
    proc = subprocess.Popen(argv + (["--isolate"] if isolate else []),
                            stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), close_fds=True)
    theirs.close()
    return proc, mine


def fork(isolate: bool = False) -> tuple["Forked", socket.socket]:
    """A runner forked from the calling process (the judge, right after it imported torch and
    before it ran any tensor operation or read its job): no second interpreter start and torch
    import. The child keeps stdout, stderr and its end of a fresh socket pair; every other
    descriptor, the result pipe first, is closed, and stdin is /dev/null. Returns the child and the
    caller's end. `isolate`: as `start`'s."""
    from kernelwright.evaluate import arena, candidate_load, instrument, link, work  # noqa: F401
    from kernelwright.measure import compare, draw  # noqa: F401

    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()  # nothing buffered here may be written twice
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            mine.close()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            keep = {0, 1, 2, theirs.fileno()}
            for entry in os.listdir("/proc/self/fd"):
                if int(entry) not in keep:
                    try:
                        os.close(int(entry))
                    except OSError:
                        pass  # the listing's own descriptor
            try:
                _apart(isolate)
            except BaseException:  # noqa: BLE001 - before any request (the namespaces, say): said, not swallowed
                import traceback

                traceback.print_exc()
                os._exit(70)  # EX_SOFTWARE: a failure of ours, never the candidate's os._exit(0)
            _serve(theirs)
        finally:
            os._exit(0)
    theirs.close()
    return Forked(pid), mine


class Forked:
    """A forked runner, with the part of subprocess.Popen's interface the judge uses."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"runner {self.pid}", timeout or 0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode


def _apart(isolate: bool) -> None:
    """Before any request: the candidate's runner into namespaces of its own; the reference's
    without capabilities and not dumpable. Either answers interrupts again (the judge ignores them)."""
    import ctypes
    import signal

    from kernelwright.evaluate import isolation

    if isolate:
        isolation.enter_own_namespaces()
        # dumpable (a forked runner inherits the judge's non-dumpable state): the judge opens its
        # /proc maps before the candidate's import (proof.py); the judge and the reference's
        # runner stay non-dumpable, and the namespaces keep the candidate from naming them
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    else:
        isolation.drop_capabilities()
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)


def _serve(sock: socket.socket) -> None:
    from kernelwright.evaluate import candidate_load

    candidate_load.become_subreaper()
    try:
        Runner(sock).serve()
    finally:
        candidate_load.end_process()


def main() -> None:
    fd = int(sys.argv[1])
    _apart("--isolate" in sys.argv[2:])
    # before the first request: a runner started ahead of its job imports all this meanwhile
    import torch  # noqa: F401

    from kernelwright.evaluate import arena, candidate_load, instrument, link, work  # noqa: F401
    from kernelwright.measure import compare, draw  # noqa: F401

    _serve(socket.socket(fileno=fd))


if __name__ == "__main__":
    main()
