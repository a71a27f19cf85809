"""The trusted builder: compile and link the literal `load_inline` calls of a candidate, run nothing.

It runs in the same sandbox as a worker (a pool's started worker takes a build job too: see
worker.main), gets from the parent the arguments read from the candidate's source
(buildspec.py) with the key the parent computed for each, and builds each into
`<scratch>/builds/<key>/`. It never imports the candidate and never loads what it built: torch's
loader is replaced by a no-op before the first build, so no code of the candidate (a static
initializer in its library, say) runs here. The parent promotes only the keys it computed into
the shared scope of the build cache (buildcache.py). A build that fails leaves its error text
(torch's exception, the compiler's output in it) in `<key>/FAILED`; the parent records it in the
shared scope too, and the worker raises it where its own load_inline would have raised the same,
so a failing build costs one compile, not two, and ends in the same verdict.
"""

from __future__ import annotations

import os
import sys

from kernelwright.evaluate import buildcache
from kernelwright.records import BuildJob


def run(job: BuildJob) -> None:
    import torch.utils.cpp_extension as cpp_extension

    if not hasattr(cpp_extension, "_import_module_from_library"):
        return  # a torch whose loader moved: build nothing rather than load a build here
    cpp_extension._import_module_from_library = lambda *a, **k: None  # build, never load
    os.environ["TORCH_CUDA_ARCH_LIST"] = job.arch  # the arch the worker will build for
    for build in job.builds:
        folder = os.path.join(job.workdir, "builds", build.key)
        os.makedirs(folder, exist_ok=True)
        arguments = {**build.arguments, "build_directory": folder, "verbose": False}
        try:
            cpp_extension.load_inline(**arguments)
        except Exception as e:  # noqa: BLE001 - recorded; the worker raises it as its own build's
            text = f"{type(e).__name__}: {e}"[: buildcache.MAX_FAILURE_BYTES]
            with open(os.path.join(folder, buildcache.FAILED), "w") as f:
                f.write(text)
            print(f"builder: {arguments.get('name')}: {type(e).__name__}", file=sys.stderr)
