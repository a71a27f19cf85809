"""The judge's side of a runner (runner.py): start it, ask it, stage its calls, read its outputs.

A runner is started by the judge (runner.fork, or runner.start) with one end of a Unix socket pair
and nothing else it could use against the judge: not the result pipe (closed in the child), not the
judge's memory (the judge is not dumpable, so a process without capabilities can neither ptrace it nor open
its /proc files), not the other runner's arena. Its replies are read with a size cap and validated.

A call is staged outside the timed interval (room in the arena, output buffers filled with NaN or
random integers) and run inside it: the judge writes the inputs, sends the request, waits for the
reply and copies the outputs out of the arena. Only then does the clock stop: the inputs did not
exist where the runner could see them before the clock started, and every output byte the judge
checks was in place before it stopped, so work done before or after the interval cannot pass.
"""

from __future__ import annotations

import base64
import os
import pickle
import random
import signal
import socket
import subprocess
from dataclasses import dataclass
from typing import Any, Optional

import torch

from kernelwright.evaluate import link
from kernelwright.evaluate.arena import Arena, TensorRef, any_dtype, call_bytes
from kernelwright.evaluate.leftovers import Leftovers
from kernelwright.evaluate.link import Arg, Call, Reply
from kernelwright.measure import footprint
from kernelwright.measure.timing import TimedCallRejected

MIN_ARENA_BYTES = 1 << 20


class RunnerGone(Exception):
    """The runner died, closed its socket or broke the protocol: `how` says which."""

    def __init__(self, runner: "RemoteRunner", how: str):
        super().__init__(f"{runner.name} {how}")
        self.runner, self.how = runner, how


class LeftoverWork(TimedCallRejected):
    """The kernel saw the candidate's process tree at work between two requests (leftovers.py), or
    its runner reported tampering with its own process: a cheat, whatever stage it came in."""

    def __init__(self, reasons: list[str]):
        super().__init__(reasons[0], "; ".join(reasons))
        self.reasons = reasons


class Refused(Exception):
    """The runner answered with an error (the reply says which)."""

    def __init__(self, reply: Reply, runner: "RemoteRunner"):
        super().__init__(reply.error or reply.kind)
        self.reply, self.runner = reply, runner


@dataclass
class Staged:
    """One call's place in a runner's arena."""

    inputs: list[Any]  # the judge's values, written at run time
    args: list[Arg]
    in_views: list[Optional[torch.Tensor]]
    outputs: list[Optional[TensorRef]]
    out_views: list[Optional[torch.Tensor]]
    fresh_place: bool = True  # False: a call over footprint.ONE_PLACE_ABOVE_BYTES, at its arena's start


class RemoteRunner:
    def __init__(self, proc: Any, sock: socket.socket, name: str, watched: bool = False):  # a Popen or a runner.Forked
        self.proc, self.sock, self.name = proc, sock, name
        self.arena: Optional[Any] = None  # an Arena (memfd) on the CPU, a CudaArena on a GPU
        self.device = torch.device("cpu")  # where the arena lives: the judge sets it from the job
        # the candidate's: its process tree is read from /proc between requests (leftovers.py)
        self.leftovers = Leftovers(proc.pid) if watched else None
        # the thread count it keeps for every call, set before its first: a change of it would
        # tell the runner that timing begins or ends
        self.pinned_threads: Optional[int] = None
        self.maps_fd: Optional[int] = None  # its /proc maps, opened by the judge (proof.open_maps)

    @classmethod
    def spawn(cls, name: str) -> "RemoteRunner":
        from kernelwright.evaluate.runner import start

        return cls(*start(), name)

    # -- requests -----------------------------------------------------------------------------

    def request(self, req: link.Request, fds: tuple[int, ...] = (), clocked: bool = False) -> Reply:
        """Send and wait. Unless `clocked` (the clock's owner checks outside it), the runner's tree
        must have been idle since the previous reply (LeftoverWork otherwise)."""
        if not clocked:
            self.idle()
        self.post(req, fds)
        reply = self.collect()
        if not clocked:
            self.settled()
        return reply

    def idle(self) -> None:
        """Raise LeftoverWork if anything of the runner's tree worked since its last reply."""
        if self.leftovers is not None:
            reasons = self.leftovers.check(per_window=self.device.type == "cpu")  # leftovers.GPU_WINDOWS
            if reasons:
                raise LeftoverWork(reasons)

    def settled(self) -> None:
        """Right after a reply: where the next `idle` counts from."""
        if self.leftovers is not None:
            self.leftovers.mark()

    def post(self, req: link.Request, fds: tuple[int, ...] = ()) -> None:
        """Send a request without waiting: its reply is `collect`ed later, in order."""
        try:
            link.send(self.sock, link.encode_request(req), fds)
        except OSError:
            raise RunnerGone(self, self._death()) from None

    def collect(self) -> Reply:
        try:
            return link.decode_reply(link.recv(self.sock, link.MAX_REPLY_BYTES))
        except link.BadReply as e:
            self.kill()
            raise RunnerGone(self, f"broke the evaluation protocol ({e})") from None
        except (link.LinkClosed, OSError):
            raise RunnerGone(self, self._death()) from None

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return "closed its end of the evaluation's socket"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code} before replying (os._exit?)"

    def load(self, req: link.Import) -> Reply:
        return self.request(req)

    def init(self, seed: int, init_inputs: list[Any]) -> Reply:
        return self.request(init_request(seed, init_inputs))

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.sock.close()
        if self.maps_fd is not None:
            os.close(self.maps_fd)
            self.maps_fd = None
        if self.arena is not None:
            self.arena.close()

    def pin_threads(self, n: int) -> None:
        """Run every later call with `n` intra-op threads (timed or not: the same for all)."""
        reply = self.request(link.Threads(n=n))
        if not reply.ok:
            raise Refused(reply, self)
        self.pinned_threads = n

    # -- calls --------------------------------------------------------------------------------

    def stage(self, inputs: list[Any], like: list[Any]) -> Staged:
        """Room for `inputs` and for outputs shaped like `like` (the reference's flattened outputs),
        the output buffers pre-filled so that nothing the runner did not write can pass."""
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)] + [x for x in like if isinstance(x, torch.Tensor)]
        nbytes = call_bytes(tensors)
        self._room(nbytes)
        arena = self.arena
        assert arena is not None
        arena.start(nbytes)
        outputs, out_views = [], []
        for r in like:
            if isinstance(r, torch.Tensor):
                ref = arena.place(r.dtype, r.shape)
                view = arena.view(ref)
                _prefill(view)
                outputs.append(ref)
                out_views.append(view)
            else:
                outputs.append(None)
                out_views.append(None)
        args, in_views = [], []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                ref = arena.place(x.dtype, x.shape)
                args.append(Arg(tensor=ref))
                in_views.append(arena.view(ref))
            else:
                args.append(Arg(value=x))
                in_views.append(None)
        return Staged(inputs=inputs, args=args, in_views=in_views, outputs=outputs, out_views=out_views,
                      fresh_place=not footprint.one_place(nbytes))

    def run(self, staged: Staged, model: str = "main", probe: str = "none",
            perturb: Optional[list[str]] = None, null: bool = False,
            clocked: bool = False) -> tuple[list[Any], Reply]:
        """Write the inputs, call, and copy the outputs out: (outputs, reply). What the candidate
        returned when it did not fit the buffers comes back as placeholders that compare.py judges
        like the real thing (count, shape, dtype, subclass). Raises Refused for an error reply.
        `null`: the same copies and round trip with no forward (link.Echo): what the protocol
        itself costs a call of these bytes. `clocked`: inside the judge's clock, which checks the
        runner's tree outside it (Served)."""
        for view, x in zip(staged.in_views, staged.inputs):
            if view is not None:
                view.copy_(x)
        if self.device.type == "cuda":
            # the runner's context does not wait on this process's stream: the inputs (and the
            # prefilled output buffers) must be in place before the request goes out
            torch.cuda.current_stream(self.device).synchronize()
        reply = self.request(link.Echo() if null else
                             Call(model=model, args=staged.args, outputs=staged.outputs, probe=probe,
                                  perturb=perturb or []), clocked=clocked)
        if reply.reasons and self.leftovers is not None:  # the candidate's report of tampering with its process
            raise LeftoverWork(reply.reasons)
        if reply.ok:
            values = iter(reply.values)
            snap = _snapshot if self.device.type == "cpu" else _device_copy
            out = [snap(v) if v is not None else next(values, None) for v in staged.out_views]
            return out, reply
        if reply.kind in ("spec", "subclass"):
            return _placeholders(reply, staged), reply
        raise Refused(reply, self)

    def inputs_after(self, staged: Staged) -> list[Any]:
        """The inputs as the runner left them (a call that wrote into them shows here). On a GPU the
        arena's own views: the runner synchronized its device before replying, and a copy of inputs
        of gigabytes would be two more sets on the device; on the CPU a private snapshot."""
        if self.device.type == "cuda":
            return [v if v is not None else x for v, x in zip(staged.in_views, staged.inputs)]
        return [v.clone() if v is not None else x for v, x in zip(staged.in_views, staged.inputs)]

    def _room(self, nbytes: int) -> None:
        if self.arena is not None and self.arena.fits(nbytes):
            return
        size = max(MIN_ARENA_BYTES, footprint.arena_bytes(nbytes))
        if self.device.type == "cuda":
            from kernelwright.evaluate.cuda_arena import CudaArena

            arena: Any = CudaArena.create(size, self.device)
            reply = self.request(link.SetArena(nbytes=arena.nbytes, cuda_handle=arena.handle()))
        else:
            arena = Arena.create(size)
            reply = self.request(link.SetArena(nbytes=arena.nbytes), fds=(arena.fd,))
        if not reply.ok:
            arena.close()
            raise Refused(reply, self)
        if self.arena is not None:
            self.arena.close()
        self.arena = arena


SNAPSHOT_CHUNKS = 16
_SYSTEM_RANDOM = random.SystemRandom()


def _snapshot(view: torch.Tensor) -> torch.Tensor:
    """A private copy of an output buffer, read in chunks in a random order. A runner that replied
    early and keeps writing from another thread cannot stay ahead of a read whose order it does not
    know: whatever it finished after the first chunk was read is likely wrong in the copy."""
    out = torch.empty_like(view)
    src, dst = view.reshape(-1), out.view(-1)
    n = src.numel()
    step = max(1, -(-n // SNAPSHOT_CHUNKS))
    order = list(range(-(-n // step)))
    _SYSTEM_RANDOM.shuffle(order)  # not torch's generator: the judge seeds that with known seeds
    for i in order:
        dst[i * step:(i + 1) * step].copy_(src[i * step:(i + 1) * step])
    return out


def _device_copy(view: torch.Tensor) -> torch.Tensor:
    """A private copy of an output buffer on a GPU: one copy on the judge's stream, which the
    caller's device synchronize ends. (The CPU's random chunk order guards against a thread
    writing behind the read; on a GPU every byte read is either final or makes the check fail, and
    either way the work ended before the clock stops.)"""
    return view.clone()


def init_request(seed: int, init_inputs: list[Any]) -> link.Init:
    return link.Init(seed=seed, init_pickle=base64.b64encode(pickle.dumps(init_inputs)).decode())


def _prefill(view: torch.Tensor) -> None:
    if view.is_floating_point() or view.is_complex():
        view.fill_(float("nan"))
    elif view.dtype == torch.bool:
        view.copy_(torch.randint(0, 2, view.shape, dtype=torch.bool, device=view.device))
    else:
        info = torch.iinfo(view.dtype)
        view.copy_(torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1), view.shape, dtype=view.dtype,
                                 device=view.device))


class _Claimed(torch.Tensor):
    """Stands for an output the candidate's runner said was a torch.Tensor subclass."""


class _NotATensor:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<a {self.name}>"


def _placeholders(reply: Reply, staged: Staged) -> list[Any]:
    """The candidate's outputs as its runner described them, on the meta device (no memory)."""
    if reply.kind == "subclass":
        return [torch.empty(v.shape, dtype=v.dtype, device="meta").as_subclass(_Claimed) if v is not None else None
                for v in staged.out_views]
    out: list[Any] = []
    for spec in reply.spec:
        dtype = any_dtype(spec.dtype) if spec.tensor else None
        if not spec.tensor or dtype is None:
            out.append(_NotATensor(spec.dtype[:40] or "value"))
            continue
        try:
            out.append(torch.empty([max(0, int(s)) for s in spec.shape], dtype=dtype, device="meta"))
        except (RuntimeError, ValueError, OverflowError):
            out.append(_NotATensor("malformed tensor"))
    return out


class Served:
    """One model in a runner, as timing.time_served_pair sees it."""

    def __init__(self, runner: RemoteRunner, like: list[Any], model: str = "main"):
        self.runner, self.like, self.model = runner, like, model

    def stage(self, inputs: list[Any]) -> Staged:
        return self.runner.stage(inputs, self.like)

    def run(self, staged: Staged) -> list[Any]:
        return self.runner.run(staged, self.model, clocked=True)[0]

    def run_null(self, staged: Staged) -> list[Any]:
        """The call's copies and round trip, no forward (RemoteRunner.run's `null`)."""
        return self.runner.run(staged, null=True, clocked=True)[0]

    def before_call(self) -> None:
        """Outside the clock, before a timed call: the runner's tree was idle since its last reply."""
        self.runner.idle()

    def after_call(self) -> None:
        """Outside the clock, after a timed call."""
        self.runner.settled()

    def inputs_after(self, staged: Staged) -> list[Any]:
        return self.runner.inputs_after(staged)

    def threads(self, n: Optional[int]) -> None:
        if self.runner.pinned_threads is not None:
            return  # set once for every call (RemoteRunner.pin_threads)
        reply = self.runner.request(link.Threads(n=n))
        if not reply.ok:
            raise Refused(reply, self.runner)
