"""The candidate's runner apart from the judge and the reference's runner, by the kernel.

All three processes of an evaluation run in one box (confine.py) as the same uid. Sharing a PID
namespace would let the candidate stop and resume the reference's runner (SIGSTOP/SIGCONT), lower
its priority or pin it (setpriority, sched_setaffinity, sched_setscheduler), pin the judge, read
/proc/<pid>/schedstat to see which calls the reference runs, or interrupt either (SIGINT). So the
candidate's runner starts in namespaces of its own, before any candidate code exists:

- a session of its own (setsid): kill(0) and killpg reach a process group whatever the PID
  namespace, so the candidate shares a group with nothing of the judge's side;
- a PID namespace: a PID of the box names nothing in there, and kill, setpriority, sched_* and
  /proc lookups only resolve PIDs of the caller's namespace (PRIO_USER and kill(-1) skip tasks it
  cannot see);
- a mount namespace with a fresh /proc of that PID namespace (/proc/sys and the other kernel knobs
  bound read-only again, as the box has them), so /proc/<pid> of the judge or the reference does
  not exist;
- no capabilities and no_new_privs, as everywhere in the box.

Making the PID namespace and mounting /proc need CAP_SYS_ADMIN: the box lets the judge keep it
(confine.JUDGE_CAPS) until its runners are started, and every process drops it before it reads a
job (`drop_capabilities`). Where the caller holds no such capability (an unconfined run by a
user), a user namespace that maps only the caller's own uid gives the same; where even that is
refused the runner stays where it is and the judge records it (`judge.py`: `runner_isolated`).

Tree, seen from the box: the process the judge started (the *stand-in*, which reports the runner's
exit as its own) -> the namespace's init (PID 1, reaps, dies with the stand-in) -> the runner
(PID 2). Everything the candidate starts, double forks and clone(CLONE_PARENT) included, stays
below the stand-in, where leftovers.py counts it.
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CAP_SYS_ADMIN = 21
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def drop_capabilities() -> None:
    """No capability left, in any set, for this process and whatever it execs."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for cap in range(64):  # needs CAP_SETPCAP; without it the bounding set stays, harmless under no_new_privs
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last
            break
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAP_VERSION_3, 0)
    if _libc.capset(ctypes.byref(header), (_CapData * 2)()) != 0:
        raise OSError(ctypes.get_errno(), "capset: " + os.strerror(ctypes.get_errno()))


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _close_all_but_stdio() -> None:
    for entry in os.listdir("/proc/self/fd"):
        if int(entry) > 2:
            try:
                os.close(int(entry))
            except OSError:
                pass  # the listing's own descriptor


def _deaf() -> None:
    """The stand-in and the init answer no signal they may ignore: the candidate can reach their
    process group (kill(0) before its own setsid) and the init from inside."""
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError):
                pass


def _stand_in(init: int) -> NoReturn:
    """The judge's child outside the namespace: holds nothing, ends as the runner ended."""
    _deaf()
    _close_all_but_stdio()
    try:
        drop_capabilities()
    except OSError:
        pass
    _, status = os.waitpid(init, 0)
    code = os.waitstatus_to_exitcode(status)
    if code > 128:  # the init's report of a runner killed by a signal (an init cannot raise one on itself)
        signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    os._exit(code)


def _init(runner: int) -> NoReturn:
    """PID 1 of the namespace: reaps whatever is left to it until the runner ends; its own death
    (with the stand-in's, by PDEATHSIG) ends everything in the namespace."""
    _deaf()
    _close_all_but_stdio()
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == runner:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def _fresh_proc() -> None:
    from kernelwright.confine_mounts import MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REC, \
        MS_REMOUNT, PROC_KNOBS, mount

    ms_private = 1 << 18
    mount(None, "/", None, MS_REC | ms_private)  # nothing mounted here propagates back to the box
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for knob in PROC_KNOBS:  # root without capabilities could still write these
        if os.path.exists(knob):
            mount(knob, knob, None, MS_BIND | MS_REC)
            mount(None, knob, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def enter_own_namespaces() -> bool:
    """Called in a process the judge just started, before any candidate code: returns in the
    runner (PID 2 of a new PID namespace, a fresh /proc, no capabilities, a session of its own);
    the caller's process stays behind as the stand-in and never returns. False (and nothing
    changed but the session) where the kernel refuses the namespaces."""
    os.setsid()
    uid, gid = os.geteuid(), os.getegid()
    own_user = not effective_capabilities() >> CAP_SYS_ADMIN & 1
    # The mount namespace is the init's alone (unshared after the fork): shared with the
    # stand-in, the init's fresh /proc (of a PID namespace the stand-in is not in) would leave the
    # stand-in a dangling /proc/self whenever the init mounted first.
    if _libc.unshare(CLONE_NEWPID | (CLONE_NEWUSER if own_user else 0)) != 0:
        drop_capabilities()
        return False
    if own_user:  # only the caller's own ids, which needs no privilege
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    init = os.fork()
    if init:
        _stand_in(init)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    try:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _fresh_proc()
    except OSError:
        # a user namespace under a /proc with covered knobs may not mount another (the kernel's
        # mount_too_revealing): the PID namespace still holds, /proc/<pid> of the box stays readable
        pass
    drop_capabilities()
    runner = os.fork()
    if runner:
        _init(runner)
    os.setsid()  # a process group of its own: kill(0) from here reaches neither the init nor the stand-in
    return True
