"""The trusted builder: compile and link the literal `load_inline` calls of a candidate, run nothing.

It runs in the same sandbox as a worker (a pool's started worker takes a build job too: see
judge.main), gets from the parent the arguments read from the candidate's source
(buildspec.py) with the key the parent computed, and builds in its box's private scratch. It
never imports the candidate and never loads what it built: torch's loader is replaced by a no-op
before the first build, so no code of the candidate (a static initializer in its library, say)
runs here. The parent sends one key per box (evaluator.shared_builds): a hostile flag's command
runs at build time in that box, where no other key's build is. The product, the one library
torch's layout names, is copied to `builds/<key>/` of the outbox: a descriptor of the host folder
under the scratch, which nothing else in the box holds. The parent promotes only the key it
computed into the shared scope of the build cache (buildcache.py). A build that fails leaves its
error text (torch's exception, the compiler's output in it) in `<key>/FAILED` instead; the parent
records it in the shared scope too, and the worker raises it where its own load_inline would have
raised the same, so a failing build costs one compile, not two, and ends in the same verdict.
For a compile-only job it builds as the worker's compile-only `load_inline` would (candidate_load.
build_fn): where that compiles to objects only, `<key>/OBJECTS` says it did, and the build's
success or failure, observed by the parent, is the judge's evidence for that build (built.py).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from typing import IO

from kernelwright.evaluate import buildcache, candidate_load
from kernelwright.records import BuildJob


def run(job: BuildJob, outbox: int) -> None:
    import torch.utils.cpp_extension as cpp_extension

    if not hasattr(cpp_extension, "_import_module_from_library"):
        return  # a torch whose loader moved: build nothing rather than load a build here
    cpp_extension._import_module_from_library = lambda *a, **k: None  # build, never load
    os.environ["TORCH_CUDA_ARCH_LIST"] = job.arch  # the arch the worker will build for
    load_inline = candidate_load.build_fn(job.compile_only, False) or cpp_extension.load_inline
    for build in job.builds:
        folder = os.path.join(job.workdir, "trusted-builds", build.key)
        os.makedirs(folder, exist_ok=True)
        arguments = {**build.arguments, "build_directory": folder, "verbose": False}
        if build.pch and os.path.isfile(build.pch):
            # the parsed torch header, where the flags match (GCC checks); the key stays the arguments'
            arguments["extra_cflags"] = [*(arguments.get("extra_cflags") or []), "-include", build.pch]
        name = f"{arguments.get('name')}{buildcache.SUFFIX}"
        try:
            built = load_inline(**arguments)
            if isinstance(getattr(built, "__dict__", {}).get("__objects__"), list):
                # compile-only with a CPU torch: objects, no library to cache; the parent is told so
                _deliver(outbox, build.key, buildcache.OBJECTS, io.BytesIO(b"compiled, not linked\n"))
                continue
            with open(os.path.join(folder, name), "rb") as f:
                _deliver(outbox, build.key, name, f)
        except Exception as e:  # noqa: BLE001 - recorded; the worker raises it as its own build's
            text = f"{type(e).__name__}: {e}"[: buildcache.MAX_FAILURE_BYTES]
            _deliver(outbox, build.key, buildcache.FAILED, io.BytesIO(text.encode()))
            print(f"builder: {arguments.get('name')}: {type(e).__name__}", file=sys.stderr)


def _deliver(outbox: int, key: str, name: str, data: IO[bytes]) -> None:
    """`data` as `builds/<key>/<name>` under the outbox descriptor (the host's folder): complete or
    absent (written under a temporary name, then renamed), so a full disk never leaves half a
    library for the parent to promote."""
    for part in ("builds", f"builds/{key}"):
        try:
            os.mkdir(part, dir_fd=outbox)
        except FileExistsError:
            pass
    partial = f"builds/{key}/.{name}.part"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=outbox)
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(data, out)
        os.rename(partial, f"builds/{key}/{name}", src_dir_fd=outbox, dst_dir_fd=outbox)
    except BaseException:
        os.unlink(partial, dir_fd=outbox)
        raise
