"""The filesystem of the `unshare` fallback (confine.py), built before any candidate code runs.

Runs as PID 1 of fresh mount, PID and network namespaces (util-linux `unshare` made them), still
holding capabilities, and then execs the rest of the command, which drops them:

    confine_mounts.py SCRATCH PLAN -- COMMAND ...

PLAN is confine.view()'s list as JSON: the same root bubblewrap builds. An empty tmpfs becomes the
new root; each step puts one thing in it (a read-only bind of a host path, a device node, a link,
a size- and inode-limited tmpfs, a folder, a fresh /proc); then the root is pivoted onto it and the
old one detached, so nothing else of the host's filesystem is reachable. Every mount is then made
read-only (a per-mount bind remount) except the writable tmpfs, and /proc's kernel knobs
(/proc/sys, ...) are made read-only the way bubblewrap does.
Stdlib only, run with `python -I`: nothing from the project or the environment is imported.
Any failure exits 96 before the command runs: a half-confined worker never starts.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
MNT_DETACH = 2
_KEPT = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
         "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
PROC_KNOBS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")  # bubblewrap's --dev set
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203}
NEW_ROOT = "/tmp"  # a tmpfs is mounted here and becomes "/": the host's /tmp is hidden anyway

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _unescape(path: str) -> str:
    return path.encode().decode("unicode_escape") if "\\" in path else path


def _mounts() -> list[tuple[str, int]]:
    """(mount point, flags to keep) for every mount, parents before children; of a point mounted
    over several times, the top one (listed last)."""
    out: dict[str, int] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            options = fields[5].split(",")
            point = _unescape(fields[4])
            out.pop(point, None)
            out[point] = sum(_KEPT.get(o, 0) for o in options)
    return list(out.items())


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _place(target: str, like_file: bool) -> None:
    """An empty file or folder at `target` (in the new root) to mount over."""
    os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
    if like_file:
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    else:
        os.makedirs(target, exist_ok=True)


def setup(plan: list[dict]) -> list[str]:
    """Build the new root from `plan` and pivot into it; returns the writable mount points."""
    # descriptors of every source first: the new root's tmpfs hides the host's /tmp, where the
    # scratch's host folder (the copy of the cache entries) lives
    held = {}
    for step in plan:
        if step["kind"] in ("ro", "rw", "dev") and step["source"]:
            held[step["source"]] = os.open(step["source"], os.O_PATH)
    devices = {name: os.open(f"/dev/{name}", os.O_PATH) for name in _DEVICES if os.path.exists(f"/dev/{name}")}
    mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID, "mode=0755")
    writable = []

    def at(path: str) -> str:
        return NEW_ROOT + path

    for step in plan:
        kind, target = step["kind"], step["target"]
        if kind in ("ro", "rw") or (kind == "dev" and step["source"]):
            fd = held[step["source"]]
            _place(at(target), like_file=not os.path.isdir(f"/proc/self/fd/{fd}"))
            # through the descriptor: the original, wherever a mount now hides it
            mount(f"/proc/self/fd/{fd}", at(target), None, MS_BIND | MS_REC)
            if kind == "rw":
                writable.append(target)
        elif kind == "dev":
            os.makedirs(at("/dev"), exist_ok=True)
            mount("tmpfs", at("/dev"), "tmpfs", MS_NOSUID, "mode=0755,size=64k")
            for name, fd in devices.items():
                _place(at(f"/dev/{name}"), like_file=True)
                mount(f"/proc/self/fd/{fd}", at(f"/dev/{name}"), None, MS_BIND)
            for name, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
                os.symlink(to, at(f"/dev/{name}"))
            os.makedirs(at("/dev/shm"), exist_ok=True)
        elif kind == "link":
            os.makedirs(os.path.dirname(at(target)), exist_ok=True)
            os.symlink(step["source"], at(target))
        elif kind == "proc":
            os.makedirs(at(target), exist_ok=True)
            mount("proc", at(target), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        elif kind == "tmpfs":
            os.makedirs(at(target), exist_ok=True)
            mount("tmpfs", at(target), "tmpfs", MS_NOSUID | MS_NODEV,
                   f"size={step['size']},nr_inodes={step['inodes']},mode=1777")
            writable.append(target)
        elif kind == "dir":
            os.makedirs(at(target), exist_ok=True)
        else:
            raise ValueError(f"unknown step {kind!r}")
    for fd in [*held.values(), *devices.values()]:
        os.close(fd)
    _pivot()
    for knob in PROC_KNOBS:
        if os.path.exists(knob):
            mount(knob, knob, None, MS_BIND | MS_REC)
    for point, keep in _mounts():
        if point in writable:  # not what is bound beneath it (the cache's copy in the scratch)
            continue
        if _within(point, "/proc") and not any(_within(point, k) for k in PROC_KNOBS):
            continue
        mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
    return writable


def _pivot() -> None:
    """Make the new root "/" and detach the old one: no path leads back to the host's files."""
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(0, f"pivot_root: unknown system call number on {platform.machine()}")
    os.chdir(NEW_ROOT)
    os.makedirs(".old-root", exist_ok=True)
    _check(_libc.syscall(ctypes.c_long(number), b".", b".old-root"), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old-root", MNT_DETACH), "umount the old root")
    os.rmdir("/.old-root")


def main(argv: list[str]) -> None:
    try:
        split = argv.index("--")
        scratch, plan, command = argv[0], json.loads(argv[1]), argv[split + 1:]
        setup(plan)
        os.chdir(scratch)
    except (OSError, ValueError, IndexError, KeyError) as e:
        print(f"kernelwright confine_mounts: {e}", file=sys.stderr)
        os._exit(96)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
