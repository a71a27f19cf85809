"""Triton regions without a GPU: the skeleton's `@triton.jit` kernel with the region in it, run by
a NumPy stand-in for `triton.language` (tl_child.py) in a confined child.

Why not Triton's own interpreter (TRITON_INTERPRET=1): it needs torch in the child, and a torch
import is 2-7 s on the development machine against about 0.2 s for NumPy, for every call of a
search loop; the stand-in models what small models' regions use (the whole of what the prompt
lists, tl.math, libdevice's common functions) and answers `unsupported` for a real Triton name it
does not model, so it never turns what it does not know into a verdict. The confusion matrix
against the evaluator (docs/results/precheck-confusion.md) is what says whether it is faithful.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import sys
import tempfile
from array import array
from pathlib import Path

from kernelwright.scaffold.precheck.confined import cache_dir, confined_run
from kernelwright.scaffold.precheck.types import RegionRun
from kernelwright.scaffold.types import Probes, Segment, SegmentKind
from kernelwright.scaffold.writers.base import PLACEHOLDER
from kernelwright.scaffold.writers.triton import TRITON_BLOCK, triton_kernel

CHILD = Path(__file__).with_name("tl_child.py")
NAMES_FILE = Path(__file__).resolve().parents[2] / "grounding" / "triton_names.json"
RUN_TIMEOUT_S = 60.0


@functools.lru_cache(maxsize=1)
def tl_names() -> list[str]:
    """The public names of triton.language (the list grounding keeps for machines without triton)."""
    return json.loads(NAMES_FILE.read_text())["members"]["triton.language"]


def kernel_source(seg: Segment, region: str) -> str:
    kernel, indent = triton_kernel(seg)
    body = "\n".join((indent + ln) if ln.strip() else "" for ln in region.strip("\n").splitlines()) or f"{indent}pass"
    return kernel.replace(indent + PLACEHOLDER, body)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def job(seg: Segment, probes: Probes, regions: list[str]) -> dict:
    total = probes.count * probes.cols
    if seg.kind == SegmentKind.ELEMENTWISE:
        grid, block, tail, out_len = -(-total // TRITON_BLOCK), TRITON_BLOCK, [total], total
    else:
        grid, block, tail = probes.count, _next_power_of_2(probes.cols), [probes.cols]
        out_len = probes.count if seg.per_row_output else total
    return {"sources": [kernel_source(seg, r) for r in regions], "grid": grid, "block": block, "tail": tail,
            "out_len": out_len, "out_dtype": seg.out_dtype, "tl_names": tl_names(),
            "args": [{"values": probes.inputs[a.name], "pattern": a.pattern} for a in seg.args]}


def run(seg: Segment, target: str, probes: Probes, regions: list[str]) -> list[RegionRun]:
    del target  # always triton here
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        # the script and the interpreter (with NumPy) must be visible inside the confinement, whose
        # /tmp is private: a checkout or a virtual environment under /tmp would vanish there
        visible = sorted({os.path.realpath(p) for p in (str(CHILD.parent), sys.prefix, sys.base_prefix)})
        code, stdout = confined_run([sys.executable, "-I", str(CHILD)], tmp, visible, RUN_TIMEOUT_S,
                                    stdin=json.dumps(job(seg, probes, regions)))
    replies = {}
    for line in stdout.splitlines():
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            continue
        replies[reply.get("k")] = reply
    out = []
    # The child runs the regions in order: the first without a reply was running when it died or ran
    # out of time (its fault), those after it were never run. A child that answered nothing did not
    # start here (the harness's failure, or a busy machine): no region is judged by it.
    culprit = min((k for k in range(len(regions)) if k not in replies), default=None) if replies else None
    for k in range(len(regions)):
        reply = replies.get(k)
        if reply is None and k == culprit:
            why = "the run did not finish" if code == -1 else f"the child ended (exit {code}) in this region"
            out.append(RegionRun(runtime_error=why))
        elif reply is None:
            out.append(RegionRun(unsupported="not run: the probe child " + (
                "did not start here" if not replies else "ended in an earlier region")))
        elif "values" in reply:
            vals = array("f")
            vals.frombytes(base64.b64decode(reply["values"]))
            out.append(RegionRun(values=vals))
        elif reply["kind"] == "compile":
            out.append(RegionRun(compile_error=reply["error"]))
        elif reply["kind"] == "unsupported":
            out.append(RegionRun(unsupported=reply["error"]))
        else:
            out.append(RegionRun(runtime_error=reply["error"]))
    return out
