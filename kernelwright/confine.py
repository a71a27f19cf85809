"""OS-level containment of the evaluation (the judge, its runners) and everything it starts, builds included.

The runners run candidate code, so Python-level guards cannot hold a hostile candidate; what holds
it is the operating system:
- `bwrap` (bubblewrap, from the distribution) where it works, else util-linux's `unshare` plus
  confine_mounts.py (run before any candidate code) for the same layout:
  an empty network namespace, a PID namespace (killing its init ends the whole tree: compilers
  ninja put in their own process groups, `setsid` double-fork daemons), a filesystem that holds
  only what the evaluation needs, read-only (`view`: no home, task file, study folder, build cache
  or device-lock folder), writable only in private size- and inode-limited tmpfs (its scratch,
  /tmp, /dev/shm), no capabilities and no_new_privs (so it can neither remount nor write
  root-owned kernel files such as cgroup.procs or /proc/sys), death when the evaluating process dies;
- limits: a cgroup (v2, or v1's memory and pids hierarchies) for memory and processes, falling
  back to RLIMIT_DATA (private writable memory; unlike RLIMIT_AS it leaves CUDA's huge address
  reservations alone: checked on the H200, whose container cannot delegate a memory cgroup) and
  RLIMIT_NPROC; RLIMIT_CPU as a backstop to the wall clock; no core dumps;
- the environment is an allowlist (evaluator.py builds it), recorded as `env_scrubbed`.

What this machine offers is detected once per process (`offer()`), by running the mechanism, not
by looking for it. Every result records the protections that were active (records.Confinement);
a missing required one refuses the evaluation unless EvalConfig.unconfined says otherwise.
`KERNELWRIGHT_CONFINE=bwrap|unshare|none` forces a mechanism (tests, debugging).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kernelwright.records import Confinement

log = logging.getLogger(__name__)

MECHANISMS = ("bwrap", "unshare", "none")
REQUIRED = ("env_scrubbed", "network", "filesystem", "pid_namespace", "die_with_parent", "caps_dropped",
            "memory_limit", "process_limit", "cpu_limit")
PROCESS_LIMIT = 4096  # tasks (threads count): room for ninja, compilers and torch's pools, not a fork bomb
CGROUP_FS = Path("/sys/fs/cgroup")
MOUNTS_SCRIPT = str(Path(__file__).with_name("confine_mounts.py"))


class ConfinementUnavailable(Exception):
    """A required protection is missing on this machine (EvalConfig.unconfined runs anyway)."""


# -- what this machine offers ------------------------------------------------------------------

def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _box_works(prefix: Any, tools: tuple[str, ...]) -> bool:
    """Whether `prefix` (a mechanism's command prefix) runs `true` in a box here."""
    if not all(shutil.which(t) for t in tools):
        return False
    probe = tempfile.mkdtemp(prefix="kw-probe-")
    try:
        return _works(prefix(probe, [], 1 << 20) + ["true"])
    finally:
        remove_tree(probe)


def _bwrap_works() -> bool:
    return _box_works(_bwrap_prefix, ("bwrap",))


def _unshare_works() -> bool:
    return _box_works(_unshare_prefix, ("unshare", "setpriv"))


@dataclass(frozen=True)
class Offer:
    bwrap: bool
    unshare: bool
    setpriv: bool
    prlimit: bool
    cgroup: Optional[str]  # "v2" | "v1" | None: where a child cgroup with memory and pids limits can be made

    def mechanism(self) -> str:
        forced = os.environ.get("KERNELWRIGHT_CONFINE", "auto")
        if forced in MECHANISMS:
            if forced == "bwrap" and not self.bwrap or forced == "unshare" and not self.unshare:
                raise ConfinementUnavailable(f"KERNELWRIGHT_CONFINE={forced}, but {forced} does not work here")
            return forced
        return "bwrap" if self.bwrap else "unshare" if self.unshare else "none"


@functools.lru_cache(maxsize=1)
def offer() -> Offer:
    """Detected once per process: each mechanism is tried for real."""
    found = Offer(bwrap=_bwrap_works(), unshare=_unshare_works(), setpriv=bool(shutil.which("setpriv")),
                  prlimit=bool(shutil.which("prlimit")), cgroup=Cgroup.kind())
    log.info("confinement offered here: %s", found)
    return found


# -- cgroups -------------------------------------------------------------------------------------

def _own_cgroup(controller: str) -> Optional[str]:
    """This process's cgroup path in the hierarchy of `controller` ("" for the v2 unified one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if (controller == "" and ctrls == "") or controller in ctrls.split(","):
            return path
    return None


class Cgroup:
    """A cgroup (v2, or one per v1 hierarchy) holding one sandbox; the parent made it, the
    sandbox joins it at its first exec and cannot leave (no capabilities, /sys read-only)."""

    def __init__(self, version: str, dirs: list[Path]):
        self.version, self.dirs = version, dirs

    @staticmethod
    def _parents() -> tuple[str, dict[str, Path]] | None:
        if (CGROUP_FS / "cgroup.controllers").exists():
            own = _own_cgroup("")
            if own is None:
                return None
            parent = CGROUP_FS / own.lstrip("/")
            wanted = {"memory", "pids"}
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
            if not wanted <= enabled:
                try:  # fails (EBUSY) where processes live in the parent itself: then none here
                    (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted - enabled))
                except OSError:
                    return None
            return "v2", {"memory": parent, "pids": parent}
        out = {}
        for ctrl in ("memory", "pids"):
            own = _own_cgroup(ctrl)
            base = CGROUP_FS / ctrl
            if own is None or not base.is_dir():
                return None
            out[ctrl] = base / own.lstrip("/")
        return "v1", out

    @classmethod
    def kind(cls) -> Optional[str]:
        try:
            made = cls.make(1 << 30, 64)
        except OSError:
            return None
        if made is None:
            return None
        made.remove()
        return made.version

    @classmethod
    def make(cls, memory_bytes: int, pids: int) -> Optional[Cgroup]:
        parents = cls._parents()
        if parents is None:
            return None
        version, where = parents
        name = f"kw-{uuid.uuid4().hex[:12]}"
        dirs = sorted({p / name for p in where.values()})
        made: list[Path] = []
        try:
            for d in dirs:
                d.mkdir()
                made.append(d)
            if version == "v2":
                (dirs[0] / "memory.max").write_text(str(memory_bytes))
                if (dirs[0] / "memory.swap.max").exists():  # swap would let it exceed the limit
                    (dirs[0] / "memory.swap.max").write_text("0")
                (dirs[0] / "pids.max").write_text(str(pids))
            else:
                (where["memory"] / name / "memory.limit_in_bytes").write_text(str(memory_bytes))
                (where["pids"] / name / "pids.max").write_text(str(pids))
        except OSError:
            for d in made:
                d.rmdir()
            raise
        return cls(version, dirs)

    def join(self, argv: list[str]) -> list[str]:
        """`argv`, run by a shell that first moves itself into this cgroup: everything it then
        starts is inside from its first instruction (no window for a fork to slip out)."""
        procs = " ".join(shlex.quote(str(d / "cgroup.procs")) for d in self.dirs)
        script = f'for f in {procs}; do echo $$ > "$f" || exit 97; done; exec "$@"'
        return ["/bin/sh", "-c", script, "kw-join", *argv]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return out

    def oom_kills(self) -> int:
        """How many processes the kernel killed in this cgroup for reaching its memory limit."""
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        for d in self.dirs:
            try:
                for line in (d / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
            except OSError:
                continue
        return 0

    def kill(self) -> None:
        kill_file = self.dirs[0] / "cgroup.kill"
        if self.version == "v2" and kill_file.exists():
            try:
                kill_file.write_text("1")
                return
            except OSError:
                pass
        for pid in self.pids():
            _sigkill(pid)

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):  # the last tasks may still be exiting
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


# -- the plan for one worker -------------------------------------------------------------------

SCRATCH_MB = 1024  # the box's writable space (each of its scratch, /tmp and /dev/shm): a build needs tens of MB


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    cpu_seconds: int
    scratch_bytes: int = SCRATCH_MB << 20  # each private tmpfs (scratch, /tmp, /dev/shm), in memory

    @staticmethod
    def for_run(timeout: float, memory_mb: Optional[int] = None, scratch_mb: Optional[int] = None) -> Limits:
        """Half the machine's memory (at least 4 GiB) unless `memory_mb` says otherwise."""
        try:
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            ram = 16 << 30
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        memory = memory_mb << 20 if memory_mb else max(4 << 30, ram // 2)
        return Limits(memory_bytes=memory, cpu_seconds=int(timeout * max(1, cores)) + 60,
                      scratch_bytes=(scratch_mb or SCRATCH_MB) << 20)


_BWRAP_FLAGS = ["--die-with-parent", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--cap-drop", "ALL"]
# What the judge keeps until it has started its runners, and then drops (evaluate/isolation.py):
# CAP_SYS_ADMIN makes the candidate's runner its own PID and mount namespaces with a fresh /proc,
# CAP_SETPCAP lets every process of the box empty its bounding set. No job is read before.
JUDGE_CAPS = ("sys_admin", "setpcap")

# -- what the box sees -----------------------------------------------------------------------------
# The box's root is empty; only these are put in it. Everything else is absent: the real home
# (/root, /home) and other users' files, the task's file and the study folder (the judge gets the
# task's source on stdin), the build cache (the parent copies in the entries the job may load),
# and the machine-wide device-lock folder (the judge inherits descriptors of its device's locks).

# read-only, where present: the system's programs and libraries
SYSTEM = (
    "/usr",  # compilers, their headers and libraries, ninja, CUDA (/usr/local/cuda) and the GPU
             # driver's user-space libraries (/usr/lib/x86_64-linux-gnu, /usr/local/nvidia)
    "/sys",  # read-only kernel facts: CPU topology for torch's thread pools, PCI devices for CUDA
    "/run/nvidia-persistenced",  # the GPU driver's daemon socket, where it runs
)
# merged-/usr links (recreated as links), or the folders themselves (bound read-only)
TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d",  # the dynamic loader's index (Triton finds libcuda here)
    "alternatives",  # Debian's cc/c++ -> gcc/g++ links
    "passwd", "group", "nsswitch.conf",  # user-name lookups (getpass); the password hashes stay out
    "localtime", "hosts",
)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")  # bwrap's --dev makes the same set
SCRATCH_INODES = 1 << 17  # files and folders in the scratch: a build makes tens, Triton's cache hundreds


@dataclass(frozen=True)
class Mount:
    """One step of building the box's root. kind: ro (bind read-only), rw (bind writable), dev (a device node), link
    (a symlink to `source`), tmpfs (writable, `size` bytes and `inodes` files at most), dir, proc."""

    kind: str
    target: str
    source: str = ""
    size: int = 0
    inodes: int = 0


def _within_any(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


_CHECKOUT = str(Path(__file__).resolve().parents[1])


def python_paths() -> list[str]:
    """What a box running this Python and this package reads from the host (real paths): Python's
    prefixes, the package's folder (not the checkout around it, which may hold task files and
    tests) and PYTHONPATH's other folders. Bound read-only, nothing in them is the candidate's."""
    paths = {os.path.join(_CHECKOUT, "kernelwright"), sys.prefix, sys.base_prefix,
             *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
               if p and os.path.realpath(p) != os.path.realpath(_CHECKOUT))}
    return sorted(os.path.realpath(p) for p in paths)


def view(scratch: str, visible: list[str], scratch_bytes: int, keep_scratch: bool = False) -> list[Mount]:
    """The box's filesystem, in the order it is built (bubblewrap and confine_mounts.py both
    follow it). `visible`: extra read-only paths (Python, the package, the cache copy in the
    scratch); `scratch`: a private tmpfs of `scratch_bytes`, as are /tmp and /dev/shm, unless
    `keep_scratch`: then the host's folder itself, writable, so that what the box writes there
    outlives it (the pre-check's harness leaves its values in files; it runs no candidate's
    build and holds no secret, and its memory limit bounds it)."""
    out: list[Mount] = []
    inside = [p for p in visible if _within_any(os.path.realpath(p), [scratch])]
    wanted: list[str] = []
    for link in TOP_LINKS:
        if os.path.islink(link):
            out.append(Mount("link", link, os.readlink(link)))
        elif os.path.isdir(link):
            wanted.append(link)
    wanted += [*SYSTEM, *(os.path.join("/etc", name) for name in ETC), *_library_paths(),
               *(p for p in visible if p not in inside)]
    real = [r for r in dict.fromkeys(os.path.realpath(p) for p in wanted) if os.path.exists(r)]
    # A folder bound inside another bound one is dropped: bound first, it would be hidden by its
    # parent, and remounting it read-only (confine_mounts.py) then fails, since it is no longer a
    # mount point (a venv's bin/ from PATH under the venv Python lives in)
    real = sorted((r for r in real if not any(o != r and _within_any(r, [o]) for o in real)),
                  key=lambda r: r.rstrip("/").count("/"))
    volatile = ["/tmp", "/dev"]  # the box's own tmpfs and /dev are mounted over these first
    out += [Mount("ro", r, r) for r in real if not _within_any(r, volatile)]
    out.append(Mount("dev", "/dev"))  # a minimal /dev: the nodes of DEVICES
    for node in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri")):
        out.append(Mount("dev", node, node))  # the GPU stays usable
    out.append(Mount("proc", "/proc"))
    out.append(Mount("tmpfs", "/tmp", size=scratch_bytes, inodes=SCRATCH_INODES))
    out.append(Mount("tmpfs", "/dev/shm", size=scratch_bytes, inodes=SCRATCH_INODES))
    out += [Mount("ro", r, r) for r in real if _within_any(r, volatile)]
    # the scratch after the read-only paths: a visible parent of it (the pre-check's cache folder
    # holds its scratch) bound later would cover it read-only
    if keep_scratch:
        out.append(Mount("rw", os.path.realpath(scratch), os.path.realpath(scratch)))
    else:
        out.append(Mount("tmpfs", scratch, size=scratch_bytes, inodes=SCRATCH_INODES))
        out.append(Mount("dir", os.path.join(scratch, "tmp")))
    for path in sorted(inside, key=lambda p: p.rstrip("/").count("/")):
        host = os.path.realpath(path)
        if os.path.exists(host):
            out.append(Mount("ro", host, host))  # the host's folder, over the private scratch
    return out


# The tools a build runs: where PATH finds them may be a link out of /usr (a GPU image's compilers
# under /opt, say: inside a box without them every build failed with "No such file or directory: 'gcc'").
BUILD_TOOLS = ("cc", "c++", "gcc", "g++", "nvcc", "ninja", "ld", "as")


def _library_paths() -> list[str]:
    """CUDA, library and tool folders the environment names outside /usr (a CUDA in /opt, say):
    CUDA_HOME, LD_LIBRARY_PATH, the folders of PATH, and the real folder of each build tool."""
    paths = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    paths += os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    tools = os.environ.get("PATH", "").split(os.pathsep)
    for tool in BUILD_TOOLS:
        found = shutil.which(tool)
        if found:
            tools.append(os.path.dirname(os.path.realpath(found)))
    # a tool folder P/bin is an installation P: its compiler finds its own headers and programs in
    # P/lib and P/libexec (a GPU image's gcc in /opt/gcc: bin/ alone built nothing, "stddef.h: No
    # such file or directory")
    paths += [os.path.dirname(t) if os.path.basename(t.rstrip("/")) in ("bin", "sbin") else t
              for t in (t.rstrip("/") for t in tools) if t]
    return [p for p in dict.fromkeys(paths)
            if p and os.path.isabs(p) and os.path.realpath(p) != "/"
            and not _within_any(os.path.realpath(p), ["/root", "/home", "/tmp"])]


def _bwrap_prefix(scratch: str, visible: list[str], scratch_bytes: int, caps: tuple[str, ...] = (),
                  keep_scratch: bool = False) -> list[str]:
    keep = [f for cap in caps for f in ("--cap-add", f"CAP_{cap.upper()}")]
    argv = ["bwrap", *_BWRAP_FLAGS, *keep]
    for m in view(scratch, visible, scratch_bytes, keep_scratch):
        if m.kind == "ro":
            argv += ["--ro-bind", m.source, m.target]
        elif m.kind == "rw":
            argv += ["--bind", m.source, m.target]
        elif m.kind == "link":
            argv += ["--symlink", m.source, m.target]
        elif m.kind == "dev":
            argv += ["--dev", "/dev"] if not m.source else ["--dev-bind", m.source, m.target]
        elif m.kind == "proc":
            argv += ["--proc", m.target]
        elif m.kind == "tmpfs":
            # bubblewrap sets a tmpfs's size, not its inode count: there the files' memory, which
            # the box's memory limit counts, bounds them
            argv += ["--size", str(m.size), "--tmpfs", m.target]
        elif m.kind == "dir":
            argv += ["--dir", m.target]
    return argv + ["--remount-ro", "/", "--chdir", scratch, "--"]


def _unshare_prefix(scratch: str, visible: list[str], scratch_bytes: int, caps: tuple[str, ...] = (),
                    keep_scratch: bool = False) -> list[str]:
    keep = ",".join(["-all", *(f"+{cap}" for cap in caps)])
    plan = json.dumps([m.__dict__ for m in view(scratch, visible, scratch_bytes, keep_scratch)])
    return ["setpriv", "--pdeathsig", "KILL", "--",
            "unshare", "--pid", "--fork", "--kill-child", "--mount", "--net", "--ipc", "--uts",
            "--mount-proc", "--propagation", "private", "--",
            sys.executable, "-I", MOUNTS_SCRIPT, scratch, plan, "--",
            "setpriv", "--bounding-set", keep, "--inh-caps", keep, "--ambient-caps", keep, "--no-new-privs",
            "--"]


def _uid0_tasks() -> int:
    """Tasks (threads) of uid 0 now: RLIMIT_NPROC counts them all, the host's included."""
    total = 0
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            text = Path(status).read_text()
        except OSError:
            continue
        uid = threads = None
        for line in text.splitlines():
            if line.startswith("Uid:"):
                uid = line.split()[1]
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
        if uid == "0" and threads:
            total += threads
    return total


@dataclass
class Box:
    """How one worker is held: its command prefix, its cgroup and the record of it."""

    argv: list[str]
    cgroup: Optional[Cgroup]
    record: Confinement

    def release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.remove()


def box(inner: list[str], scratch: str, visible: list[str], limits: Limits, env_scrubbed: bool,
        required: bool, caps: tuple[str, ...] = (), keep_scratch: bool = False) -> Box:
    """The command that runs `inner` confined to `scratch`, with `visible` paths readable.
    `caps`: capabilities `inner` keeps to drop them itself (the judge: JUDGE_CAPS); none else.
    Raises ConfinementUnavailable when `required` and a required protection is missing."""
    here = offer()
    mech = here.mechanism()
    rec = Confinement(mechanism=mech, env_scrubbed=env_scrubbed)
    argv = list(inner)
    cg: Optional[Cgroup] = None
    if here.cgroup:
        try:
            cg = Cgroup.make(limits.memory_bytes, PROCESS_LIMIT)
        except OSError as e:
            log.warning("could not make a cgroup: %s", e)
    caps_dropped = mech != "none"
    if cg is not None:
        rec.memory_limit_mb, rec.memory_via = limits.memory_bytes >> 20, f"cgroup_{cg.version}"
        rec.process_limit, rec.process_via = PROCESS_LIMIT, f"cgroup_{cg.version}"
    if here.prlimit:
        rl = [f"--cpu={limits.cpu_seconds}", "--core=0"]
        rec.cpu_limit_s = limits.cpu_seconds
        if cg is None:
            rl.append(f"--data={limits.memory_bytes}")
            rec.memory_limit_mb, rec.memory_via = limits.memory_bytes >> 20, "rlimit_data"
        if cg is None and caps_dropped:
            # root ignores RLIMIT_NPROC only while it holds CAP_SYS_RESOURCE/ADMIN, which the box drops
            nproc = _uid0_tasks() + PROCESS_LIMIT if os.getuid() == 0 else PROCESS_LIMIT
            rl.append(f"--nproc={nproc}")
            rec.process_limit, rec.process_via = PROCESS_LIMIT, "rlimit_nproc"
        argv = ["prlimit", *rl, "--", *argv]
    if mech == "bwrap":
        argv = _bwrap_prefix(scratch, visible, limits.scratch_bytes, caps, keep_scratch) + argv
    elif mech == "unshare":
        argv = _unshare_prefix(scratch, visible, limits.scratch_bytes, caps, keep_scratch) + argv
    elif here.setpriv:
        argv = ["setpriv", "--pdeathsig", "KILL", "--", *argv]
    if mech != "none":
        rec.network = rec.filesystem = rec.pid_namespace = rec.caps_dropped = True
        rec.scratch_limit_mb = limits.scratch_bytes >> 20
    rec.die_with_parent = mech != "none" or here.setpriv
    if cg is not None:
        argv = cg.join(argv)
    rec.missing = [name for name in REQUIRED if not _has(rec, name)]
    rec.trusted = not rec.missing
    if rec.missing and required:
        if cg is not None:
            cg.remove()
        raise ConfinementUnavailable(
            f"confinement '{mech}' here lacks: {', '.join(rec.missing)} (install bubblewrap, or run as root with "
            "cgroups; EvalConfig(unconfined=True) / --unconfined runs anyway and marks results untrusted)")
    return Box(argv=argv, cgroup=cg, record=rec)


def _has(rec: Confinement, name: str) -> bool:
    if name == "memory_limit":
        return rec.memory_limit_mb is not None
    if name == "process_limit":
        return rec.process_limit is not None
    if name == "cpu_limit":
        return rec.cpu_limit_s is not None
    return bool(getattr(rec, name))


# -- ending a tree -------------------------------------------------------------------------------

def _sigkill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def children_map() -> dict[int, list[int]]:
    """ppid -> pids, from one pass over /proc (callers with several roots pass it to `descendants`)."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # the name in parentheses may hold spaces
            children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return children


def descendants(root: int, children: Optional[dict[int, list[int]]] = None) -> list[int]:
    children = children_map() if children is None else children
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """Running (a zombie has finished: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def kill_tree(pid: int, cgroup: Optional[Cgroup] = None, grace_s: float = 5.0) -> None:
    """SIGKILL `pid`, everything under it and everything in its cgroup, then wait until they are gone.
    The namespace's init is among the descendants: its death takes the whole PID namespace,
    processes in their own groups and sessions included."""
    seen: set[int] = set()
    for _ in range(3):  # a fork racing the first pass is caught by the next
        found = [p for p in descendants(pid) if p not in seen]
        if not found:
            break
        for p in found:
            _sigkill(p)
        seen.update(found)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _sigkill(pid)
    if cgroup is not None:
        cgroup.kill()
        seen |= cgroup.pids()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in seen):
        time.sleep(0.02)


def remove_tree(path: str) -> None:
    """Remove a folder whatever its depth (shutil.rmtree recurses once per level: a tree
    thousands of folders deep raises RecursionError). Missing is fine."""
    if not os.path.lexists(path):
        return
    rm = shutil.which("rm")
    if rm:
        subprocess.run([rm, "-rf", "--one-file-system", "--", path], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    if os.path.lexists(path):  # no rm here, or it could not: an iterative walk, deepest first
        stack = [path]
        while stack:
            top = stack[-1]
            try:
                entries = list(os.scandir(top))
            except NotADirectoryError:
                entries = []
            except OSError:
                stack.pop()
                continue
            subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            for e in entries:
                if not e.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.unlink(e.path)
            if subdirs:
                stack.extend(subdirs)
                continue
            stack.pop()
            with contextlib.suppress(OSError):
                os.rmdir(top) if os.path.isdir(top) and not os.path.islink(top) else os.unlink(top)
