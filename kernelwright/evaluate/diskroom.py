"""Is the machine's disk too full to evaluate on? Decided by the evaluator from its own observations.

A full disk is the machine's state, not a candidate's outcome, so it ends an evaluation without a
verdict (InfrastructureError). That is why nothing the candidate chooses may decide it: an exception
or a compiler `#error` saying "No space left on device", an OSError with errno ENOSPC raised from
Python, are all the candidate's text. The evaluator asks the filesystem itself, after the sandbox's
tree is dead and its scratch removed (so what the candidate wrote there is gone and cannot count):
statvfs of the folder the scratch lived in, and a write of its own there. Only then, and only for a
verdict a full disk can cause (a failed build, import or call, a crash), is the verdict withheld.
"""

from __future__ import annotations

import errno
import os
import secrets
from typing import Optional

MIB = 1 << 20
# Room an honest evaluation needs in its scratch: a CUDA extension's objects, ninja's files, Triton's
# cache. Less than this free after the candidate's own files are gone is a disk too full to judge on.
ROOM_FLOOR_BYTES = 256 * MIB
_PROBE_BYTES = MIB


def shortage(folder: str) -> Optional[str]:
    """Why the filesystem holding `folder` has no room for an evaluation now, or None."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None  # the folder is gone or unreadable: no observation, no claim
    free = st.f_bavail * st.f_frsize
    if free < ROOM_FLOOR_BYTES:
        return f"no space left on device: {free / MIB:.1f} MiB free under {folder} (an evaluation needs " \
               f"{ROOM_FLOOR_BYTES // MIB} MiB)"
    failed = _own_write(folder)
    if failed is not None:
        return f"no space left on device: our own write under {folder} failed: {os.strerror(failed)}"
    return None


def _own_write(folder: str) -> Optional[int]:
    """The errno of a small write of ours that failed for want of room (ENOSPC, EDQUOT), or None."""
    path = os.path.join(folder, f".kw-room-{secrets.token_hex(8)}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        return e.errno if e.errno in (errno.ENOSPC, errno.EDQUOT) else None
    try:
        if os.write(fd, b"\0" * _PROBE_BYTES) < _PROBE_BYTES:
            return errno.ENOSPC  # a short write to a regular file: the room ran out
        os.fsync(fd)  # delayed allocation reports the want of room here
        return None
    except OSError as e:
        return e.errno if e.errno in (errno.ENOSPC, errno.EDQUOT) else None
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
