"""Custom work proven where it is timed, and only with code this evaluation built (the judge's side).

Timed calls. The trials and the work stage (work.py) show that custom code computed the output,
but a candidate that behaves one way when counted or probed and another when timed would be
credited for work its timed calls never did. So in the timing loop the candidate's model is served
through `ProvenServed`:
- every timed and warm-up call must report custom calls (the runner counts every call the same
  way, whatever its stage), where the trials did;
- a call whose spot check (work.SpotCheck, drawn inside the runner after a custom call returned, so
  that nothing tells the candidate beforehand) replaced a custom call's returned tensors with noise
  must come out wrong (or fail on the noise): an output that still matches the reference was not
  computed by the custom code (`no_custom_kernel`). The noise costs that call a little time, inside
  the candidate's own interval (1 call in 16 on average: the median barely moves).

Libraries. What a runner reports about its builds is its own word; which shared objects its process
has mapped is the kernel's (`/proc/<pid>/maps`, read by the judge). A library mapped from where a
candidate could have put it (its scratch, the build cache, `/tmp`, a memfd, a deleted file) that is
not one of this evaluation's builds earns no custom credit, and credit for compiled code needs one
of this evaluation's builds mapped: a library loaded from another candidate's cache entry, or
evidence forged from Python with no compiled code at all, is `no_custom_kernel`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from kernelwright import confine
from kernelwright.evaluate.candidate_load import Finish
from kernelwright.evaluate.remote import Served

_KEY = re.compile(r"^[0-9a-f]{24}$")


def compiled_keys(calls: Iterable[str]) -> list[str]:
    """Custom entry points counted by the runner's wrappers in every call (extension functions,
    Triton launches); operators registered with the dispatcher are counted only under a profiler."""
    return sorted(k for k in calls if not k.startswith("op."))


class ProvenServed(Served):
    """The candidate's model in time_served_pair: each call must run custom code where the trials
    did, and a call whose spot check replaced custom outputs by noise (work.SpotCheck) is judged by
    `spotted` instead of the output check (`checking`)."""

    def __init__(self, runner: Any, like: list[Any], required: bool,
                 spotted: Callable[[list[Any], list[Any], list[Any], list[str]], None]):
        super().__init__(runner, like)
        self.required, self.spotted = required, spotted
        self.last_spotted: Optional[tuple[list[Any], list[str]]] = None
        self.without_custom = False  # the last call ran no custom code

    def run(self, staged: Any) -> list[Any]:
        from kernelwright.evaluate.remote import Refused

        try:
            out, reply = self.runner.run(staged, self.model, clocked=True)
        except Refused as e:
            if not e.reply.perturbed:
                raise
            # the forward failed on the noise: it depended on the custom outputs
            self.last_spotted = ([None] * len(staged.out_views), [])
            return self.last_spotted[0]
        self.without_custom = self.required and not compiled_keys(reply.calls)
        self.last_spotted = (out, reply.perturbed) if reply.perturbed else None
        return out

    def checking(self, check: Callable[[Any, Any, list[Any]], Optional[str]]) -> Callable[..., Optional[str]]:
        """time_served_pair's output check, with a spot-checked call judged by `spotted`, and a right
        output computed without custom code a cheat (a wrong one is first a wrong output)."""

        def checked(out_r: Any, out_c: Any, inputs: list[Any]) -> Optional[str]:
            if self.last_spotted is not None and out_c is self.last_spotted[0]:
                if self.last_spotted[1]:  # (none: the forward failed on the noise)
                    self.spotted(out_r, out_c, inputs, self.last_spotted[1])
                return None
            wrong = check(out_r, out_c, inputs)
            if wrong is None and self.without_custom:
                raise Finish("cheat", "custom code ran in every trial but not in a timed call", custom_kernel=False,
                             cheat_reasons=["no custom call in a timed call (custom code only when counted)"])
            return wrong

        return checked


# --- libraries the candidate's process mapped ----------------------------------------------

@dataclass
class Libraries:
    """The shared objects the candidate's process was seen to map, by where they came from."""

    ours: set[str] = field(default_factory=set)  # this evaluation's builds
    foreign: set[str] = field(default_factory=set)  # from a place the candidate could fill, not ours
    unreadable: bool = False
    triton: bool = False  # Triton's own compiled library is loaded


    def merge(self, other: "Libraries") -> None:
        self.ours |= other.ours
        self.foreign |= other.foreign
        self.unreadable |= other.unreadable
        self.triton |= other.triton


def open_maps(pid: int) -> Optional[int]:
    """A descriptor of process `pid`'s /proc maps, or None. Opened while the process may still be
    read (the access check is made at open): later reads see its mappings as they are then."""
    try:
        return os.open(f"/proc/{pid}/maps", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def read_maps(fd: Optional[int]) -> Optional[str]:
    """The maps text behind `open_maps`'s descriptor now (None: there is none, or it fails)."""
    if fd is None:
        return None
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None


def mapped_libraries(workdir: str, builds_root: str, build_keys: Iterable[str], maps: Optional[str]) -> Libraries:
    """Classify the executable file mappings in `maps` (a process's /proc maps; None: unreadable).

    Ours, for a key of `build_keys` (the parent's keys of the candidate's literal builds, whose
    entries are the only cache entries its box was given, and the keys of the builds its runner
    made): `<builds_root>/shared/<key>/<name>.so` (the trusted builder's) and
    `<workdir>/builds/<key>/<name>.so` (built in this evaluation's scratch). A library put into
    a build folder of a key no build had is not ours. Foreign: any
    other executable mapping under the scratch, the build cache, /tmp, /dev/shm, a memfd or a
    deleted file, except Triton's own launcher in its cache (`.triton/`). Everything else (the
    interpreter, torch, system libraries) is not the candidate's to place and is neither."""
    found = Libraries()
    if maps is None:
        found.unreadable = True
        return found
    roots = [os.path.realpath(p) for p in (workdir, builds_root) if p]
    keys = set(build_keys)
    open_places = roots + ["/tmp", "/dev/shm", "/var/tmp"]
    # Python, the package and PYTHONPATH are bound read-only into the box, wherever they live on
    # the host (a checkout's venv under /tmp, a GPU machine's wheels in /tmp/site): not the
    # candidate's to place. A folder that holds an open place is not one of them.
    bound = [p for p in confine.python_paths() if not any(_under(place, p) for place in open_places)]
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or "x" not in parts[1]:
            continue
        path = parts[5].strip()
        if path.startswith("[") or not path:
            continue  # anonymous, [vdso], [stack]: no file (a JIT's code, torch's own)
        if path.startswith("/memfd:") or path.endswith(" (deleted)"):
            found.foreign.add(path)
            continue
        if "/triton/_C/" in path:
            found.triton = True
        if not any(_under(path, place) for place in open_places) or "/.triton/" in path:
            continue
        if not any(_under(path, r) for r in roots) and any(_under(path, b) for b in bound):
            continue
        if _our_build(path, workdir, builds_root, keys):
            found.ours.add(path)
        else:
            found.foreign.add(path)
    return found


def _under(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:
        return False


def _our_build(path: str, workdir: str, builds_root: str, keys: set[str]) -> bool:
    from kernelwright.evaluate.buildcache import SHARED

    parent, name = os.path.split(path)
    folder, key = os.path.split(parent)
    if not name.endswith(".so") or not _KEY.match(key):
        return False
    folder = os.path.realpath(folder)
    if key not in keys:
        return False
    return (bool(builds_root) and folder == os.path.realpath(os.path.join(builds_root, SHARED))) or \
        (bool(workdir) and folder == os.path.realpath(os.path.join(workdir, "builds")))


def library_verdict(libs: Libraries, calls: Iterable[str]) -> Optional[Finish]:
    """No custom credit for code this evaluation did not build (None: nothing against the credit)."""
    if libs.foreign:
        shown = ", ".join(sorted(libs.foreign)[:3])
        return Finish("no_custom_kernel", f"the candidate's process ran code this evaluation did not build: {shown}")
    if any(k.startswith("triton.") for k in calls) and not libs.triton and not libs.unreadable:
        return Finish("no_custom_kernel", "Triton launches were reported, but Triton is not loaded")
    compiled = [k for k in calls if not k.startswith("triton.")]
    if compiled and libs.unreadable:
        return Finish("no_custom_kernel", "the candidate's process hid its mappings: its compiled code is unverified")
    # an extension function's key is `<extension name>.<function>`: its library must be one of ours
    names = {os.path.basename(p)[: -len(".so")] for p in libs.ours}
    unbuilt = [k for k in compiled if not (k.startswith("op.") and libs.ours) and k.split(".")[0] not in names]
    if unbuilt:
        return Finish("no_custom_kernel", "custom calls were reported, but no library this evaluation built was "
                      f"loaded for them: {', '.join(sorted(unbuilt)[:3])}")
    return None
