"""The judge's link to a runner: typed requests and replies over a Unix socket pair.

Frames are a 4-byte length and a JSON document. The judge's requests are trusted by the runner;
the runner's replies are the candidate's claims, read by the judge with a size cap and parsed by
pydantic (never unpickled, never evaluated), and whatever they say can only make the candidate
lose: a reply cannot carry a verdict the judge would accept as a win (`CLAIMABLE`). A descriptor
crosses only from the judge to the runner (the arena's memfd, as SCM_RIGHTS); the judge reads
replies with plain recv, so descriptors a runner sends along are closed by the kernel unseen.
"""

from __future__ import annotations

import array
import socket
import struct
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from kernelwright.evaluate.arena import TensorRef

MAX_REPLY_BYTES = 1 << 20  # a reply is a few fields and some error text; more is an attack
_HEADER = struct.Struct("!I")

# Verdicts a runner may report about its own candidate: all of them lose, and all are the candidate's.
# `compiled` ends a compile-only job, whose verdict was only ever the build's own word. Nothing that
# withholds the verdict or blames the task or the machine (a full disk, the reference failing) can
# be claimed: the judge and the evaluator observe those themselves.
CLAIMABLE = {"syntax_error", "compile_error", "hallucinated_api", "runtime_error", "no_custom_kernel", "cheat",
             "out_of_memory"}


class LinkClosed(Exception):
    """The other side closed the socket or died."""


class BadReply(Exception):
    """A reply that is too long or not a Reply: the runner broke the protocol."""


# --- requests (judge -> runner) ---------------------------------------------------------------

class Arg(BaseModel):
    """One positional argument of forward: a tensor in the arena, or a JSON value."""

    tensor: Optional[TensorRef] = None
    value: Any = None


class Import(BaseModel):
    op: Literal["import"] = "import"
    role: Literal["candidate", "reference"] = "candidate"
    source: str
    workdir: str
    device: str
    compile_only: bool = False
    prebuild: bool = False
    builds_root: Optional[str] = None
    # compile-only: keys the trusted builder compiled to objects (nothing to load): not built again
    compiled_keys: list[str] = Field(default_factory=list)
    compile_baseline: bool = False
    # executed in the candidate's module namespace before the candidate (--compat kernelbench: the
    # task module's names, as KernelBench's loader leaves them visible)
    preamble: Optional[str] = None


class Init(BaseModel):
    op: Literal["init"] = "init"
    seed: int
    init_pickle: str  # base64 pickle of get_init_inputs(): judge to runner only


class SetArena(BaseModel):
    op: Literal["arena"] = "arena"
    nbytes: int  # on the CPU the memfd travels with this frame
    cuda_handle: Optional[str] = None  # on a GPU: the allocation's CUDA IPC handle (cuda_arena.py), hex


class Call(BaseModel):
    op: Literal["call"] = "call"
    model: Literal["main", "compiled"] = "main"
    args: list[Arg]
    outputs: list[Optional[TensorRef]]  # the reference's output structure: a buffer per tensor, None per value
    probe: Literal["none", "time", "inspect", "perturb", "count_ops"] = "none"
    perturb: list[str] = Field(default_factory=list)


class Threads(BaseModel):
    op: Literal["threads"] = "threads"
    n: Optional[int] = None  # None: back to the count the runner started with


class Checks(BaseModel):
    op: Literal["checks"] = "checks"


class Compile(BaseModel):
    op: Literal["compile"] = "compile"


class Echo(BaseModel):
    """Answer at once, running nothing: the timing protocol's null call (timing.time_served_pair)
    to the reference's runner, and the candidate's first request (its runner is then in place)."""

    op: Literal["echo"] = "echo"


Request = Union[Import, Init, SetArena, Call, Threads, Checks, Compile, Echo]
# every request's `op`: the runner binds one handler per op before it imports anything
OPS = ("import", "init", "arena", "call", "threads", "checks", "compile", "echo")


class RequestFrame(BaseModel):
    request: Request = Field(discriminator="op")


# --- replies (runner -> judge): claims --------------------------------------------------------

class OutSpec(BaseModel):
    """What the candidate's forward returned at one position, when it did not fit the buffers."""

    model_config = ConfigDict(extra="forbid")
    tensor: bool
    shape: list[int] = Field(default_factory=list, max_length=64)
    dtype: str = ""
    device: str = ""
    subclass: str = ""


class Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ok: bool
    kind: Literal["ok", "error", "spec", "subclass", "exit"] = "ok"
    verdict: Optional[str] = None  # a claimed (losing) verdict, with `error`
    error: Optional[str] = None
    spec: list[OutSpec] = Field(default_factory=list)
    values: list[Any] = Field(default_factory=list)  # the non-tensor outputs, in order
    calls: dict[str, int] = Field(default_factory=dict)  # custom calls during this request
    builds: list[dict[str, Any]] = Field(default_factory=list)
    seconds: Optional[float] = None  # the runner's own clock: claims for custom_share only
    custom_seconds: Optional[float] = None
    seen: list[str] = Field(default_factory=list)
    work: list[str] = Field(default_factory=list)
    # custom entry points whose returned tensors this call's spot check replaced by noise (work.SpotCheck)
    perturbed: list[str] = Field(default_factory=list)
    library_seconds: Optional[float] = None  # ATen compute dispatched inside custom calls (work.LibraryOps)
    library_ops: dict[str, int] = Field(default_factory=dict)
    library_made: list[str] = Field(default_factory=list)  # entry points whose results ATen operators returned
    reasons: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)


# --- framing -----------------------------------------------------------------------------------

def send(sock: socket.socket, payload: bytes, fds: tuple[int, ...] = ()) -> None:
    header = _HEADER.pack(len(payload))
    if fds:
        sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(header)
    sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise LinkClosed()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, limit: Optional[int] = None) -> bytes:
    """One frame's payload (the judge's side: no descriptors accepted, `limit` bytes at most)."""
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if limit is not None and n > limit:
        raise BadReply(f"a reply of {n} bytes (at most {limit})")
    return _recv_exact(sock, n)


def recv_with_fds(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One frame and the descriptors sent with it (the runner's side)."""
    fds = array.array("i")
    msg, anc, _flags, _addr = sock.recvmsg(_HEADER.size, socket.CMSG_SPACE(4 * fds.itemsize))
    if not msg:
        raise LinkClosed()
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if len(msg) < _HEADER.size:
        msg += _recv_exact(sock, _HEADER.size - len(msg))
    (n,) = _HEADER.unpack(msg)
    return _recv_exact(sock, n), list(fds)


def encode_request(req: Request) -> bytes:
    return RequestFrame(request=req).model_dump_json().encode()


def decode_request(data: bytes) -> Request:
    return RequestFrame.model_validate_json(data).request


def decode_reply(data: bytes) -> Reply:
    try:
        return Reply.model_validate_json(data)
    except ValueError as e:
        raise BadReply(f"not a reply: {str(e)[:200]}") from None
