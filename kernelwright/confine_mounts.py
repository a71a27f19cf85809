"""The filesystem layout of the `unshare` fallback (confine.py), set up before any candidate code.

Runs as PID 1 of fresh mount, PID and network namespaces (util-linux `unshare` made them), still
holding capabilities, and then execs the rest of the command, which drops them:

    confine_mounts.py SCRATCH [VISIBLE ...] -- COMMAND ...

- /tmp and /dev/shm become private tmpfs; SCRATCH and the VISIBLE paths that lived under /tmp are
  bound back at their own names;
- every mount becomes read-only (a per-mount bind remount: the host's mounts are untouched),
  except SCRATCH, /tmp, /dev/shm and /proc, whose kernel knobs (/proc/sys, ...) are made read-only
  the same way bubblewrap does.
Stdlib only, run with `python -I`: nothing from the project or the environment is imported.
Any failure exits 96 before the command runs: a half-confined worker never starts.
"""

from __future__ import annotations

import ctypes
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
_KEPT = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
         "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
_PROC_KNOBS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


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


def setup(scratch: str, visible: list[str]) -> None:
    # bound parents first: a path inside another (the pre-check's scratch lies inside its cache, which
    # is visible read-only) must be bound after it, or the parent's bind hides it, read-only
    paths = sorted(dict.fromkeys([scratch, *visible]), key=lambda p: p.rstrip("/").count("/"))
    held = {p: os.open(p, os.O_PATH) for p in paths if os.path.exists(p)}
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for path, fd in held.items():
        os.makedirs(path, exist_ok=True)  # under the new /tmp, or already there
        # through the descriptor: the original, now hidden under the private /tmp
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    for knob in _PROC_KNOBS:
        if os.path.exists(knob):
            _mount(knob, knob, None, MS_BIND | MS_REC)
    private = ("/tmp", "/dev/shm")
    for point, keep in _mounts():
        if _within(point, scratch) or point in private:
            continue
        if _within(point, "/proc") and not any(_within(point, k) for k in _PROC_KNOBS):
            continue
        if not os.path.exists(point):
            continue  # hidden under a later mount
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except OSError:
            # a mount of the host's /tmp or /dev/shm, hidden by the private ones: unreachable
            if not any(_within(point, p) for p in private):
                raise

def main(argv: list[str]) -> None:
    try:
        split = argv.index("--")
        scratch, visible, command = argv[0], argv[1:split], argv[split + 1:]
        setup(os.path.realpath(scratch), [os.path.realpath(v) for v in visible])
        os.chdir(scratch)
    except (OSError, ValueError, IndexError) as e:
        print(f"kernelwright confine_mounts: {e}", file=sys.stderr)
        os._exit(96)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
