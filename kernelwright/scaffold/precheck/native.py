"""C++ and CUDA regions on the host: the skeleton's own kernel with the region in it, compiled by
the system compiler without torch headers, run on the probes.

One translation unit holds every region of a call, each in its own namespace around a copy of the
skeleton's kernel (writers.cpp.cpp_kernel / writers.cuda.cuda_kernel, so the region sees exactly the names it
sees in the real program). `at::Half` / `at::BFloat16` are floats here: the probes hold the values
as the kernel loads them, and the store's rounding is applied by the comparison.

CUDA kernels run on the host shim of native_shim.py, one block at a time.

The binary forks once per region, so a region that crashes or hangs costs only its own result.
A translation unit that fails to compile is split: regions the errors point at are compiled on
their own (for their own first error), the rest together again.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import threading
from array import array
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from kernelwright.scaffold.precheck.compare import decode
from kernelwright.scaffold.precheck.confined import cache_dir, confined_run
from kernelwright.scaffold.precheck.native_shim import COMMON, CUDA_SHIM
from kernelwright.scaffold.precheck.types import RegionRun
from kernelwright.scaffold.types import Probes, Segment, SegmentKind, as_compiled
from kernelwright.scaffold.writers.base import PLACEHOLDER
from kernelwright.scaffold.writers.cpp import cpp_kernel
from kernelwright.scaffold.writers.cuda import CUDA_IO, ELEMENTWISE_THREADS, ROW_THREADS, VEC, cuda_kernel, dividers

COMPILER = os.environ.get("CXX", "c++")
# -O0: the regions are a few lines run on a few thousand values; compile time is what counts
FLAGS = ["-std=gnu++20", "-O0", "-pthread", "-w", "-fmax-errors=20"]
RUN_TIMEOUT_S = 20.0
REGION_TIMEOUT_S = 3  # per region, in the forked child (alarm)
ERROR = re.compile(r"^[^:\n]+:(\d+):(?:\d+:)? (?:fatal )?error: (.*)$", re.M)
# ---- the translation unit ------------------------------------------------------------------------

def _kernel(seg: Segment, target: str, region: str) -> str:
    """The kernel text with the region in it (CUDA's device helpers are the shim's host versions)."""
    kernel, indent = cpp_kernel(seg) if target == "cpp" else cuda_kernel(seg)[:2]
    region = as_compiled(target, region)  # as the program runs it
    body = "\n".join((indent + ln) if ln.strip() else "" for ln in (region.strip("\n") or "").splitlines())
    # the marker comments stand where the skeleton puts them, so error line numbers map to the region
    return kernel.replace(indent + PLACEHOLDER, f"{indent}// REGION BEGIN\n{body}\n{indent}// REGION END")


def _call(seg: Segment, target: str, count: int, cols: int) -> str:
    """The kernel call inside `main`: pointers to the probe arrays, broadcasting already applied."""
    args = []
    for a in seg.args:
        args.append(f"kw_in_{a.name}")
        if a.pattern == "broadcast":
            args += ["1", str(count * cols)]  # values[(i / 1) % total] == values[i]
    args.append("kw_out")
    if target == "cuda" and seg.kind == SegmentKind.ELEMENTWISE:  # the broadcast inputs' dividers
        args += [f"kw_divider_of({1 if w == 'inner' else count * cols})" for _, w in dividers(seg)]
    args += [str(count)] if seg.kind == SegmentKind.ELEMENTWISE else [str(count), str(cols)]
    if target == "cuda" and seg.kind == SegmentKind.ROW:
        args.append("1")  # rows staged in shared memory, as the skeleton launches them by default
    return ", ".join(args)


def _launch(seg: Segment, target: str, k: int, count: int) -> str:
    if target == "cpp":
        return f"        kw_body_{k}();\n"
    threads = ELEMENTWISE_THREADS if seg.kind == SegmentKind.ELEMENTWISE else ROW_THREADS
    per_block = threads * VEC  # the elementwise kernel takes VEC elements per thread
    blocks = (count + per_block - 1) // per_block if seg.kind == SegmentKind.ELEMENTWISE else count
    return f"        kw_launch({blocks}, {threads}, kw_body_{k});\n"


def translation_unit(seg: Segment, target: str, regions: list[str], count: int, cols: int,
                     out_len: int) -> tuple[str, list[tuple[int, int]]]:
    """(source, per region the (first, last) line of its kernel in the source). The source starts
    with the common header (precompiled: see _header)."""
    parts = []
    spans = []
    line = 1
    for k, region in enumerate(regions):
        kernel = _kernel(seg, target, region)
        text = f"namespace r{k} {{\n{kernel}}}  // namespace r{k}\n"
        spans.append((line, line + text.count("\n") - 1))
        line += text.count("\n")
        parts.append(text)
    n_in = count * cols
    call = _call(seg, target, count, cols)
    glue = [f"static float kw_buf[{len(seg.args)} * {n_in}];", f"static float kw_out[{max(out_len, 1)}];"]
    glue += [f"static const float* const kw_in_{a.name} = kw_buf + {i * n_in};" for i, a in enumerate(seg.args)]
    glue += [f"static void kw_body_{k}() {{ r{k}::kw_fused_kernel({call}); }}" for k in range(len(regions))]
    main = glue + ["int main(int argc, char** argv) {",
            "    if (argc < 3) return 2;",
            "    FILE* f = fopen(argv[1], \"rb\");",
            f"    if (!f || fread(kw_buf, sizeof(float), {len(seg.args) * n_in}, f) != {len(seg.args) * n_in}) return 3;",
            "    fclose(f);"]
    main += [f"    for (int k = 0; k < {len(regions)}; ++k) {{",
             "        pid_t pid = fork();",
             "        if (pid == 0) {",
             f"            alarm({REGION_TIMEOUT_S});",
             f"            for (int q = 0; q < {max(out_len, 1)}; ++q) kw_out[q] = NAN;",
             "            switch (k) {"]
    for k in range(len(regions)):
        main.append(f"            case {k}: {{\n{_launch(seg, target, k, count)}            break; }}")
    main += ["            }",
             "            char path[4096]; snprintf(path, sizeof path, \"%s.%d\", argv[2], k);",
             "            FILE* o = fopen(path, \"wb\");",
             f"            if (!o || fwrite(kw_out, sizeof(float), {out_len}, o) != {out_len}) _exit(4);",
             "            fclose(o); _exit(0);",
             "        }",
             "        int st = 0; waitpid(pid, &st, 0);",
             "        if (WIFSIGNALED(st)) printf(\"%d signal %d\\n\", k, WTERMSIG(st));",
             "        else printf(\"%d exit %d\\n\", k, WEXITSTATUS(st));",
             "    }",
             "    return 0;",
             "}"]
    parts.append("\n".join(main) + "\n")
    return "".join(parts), spans


# ---- compile and run -----------------------------------------------------------------------------

_header_lock = threading.Lock()


def _header(target: str) -> Path:
    """The standard headers and the CUDA shim, precompiled once per machine: parsing them is most
    of a compile (about 1 s of a 1.1 s compile without it)."""
    text = COMMON + (CUDA_SHIM + CUDA_IO if target == "cuda" else "")
    digest = hashlib.sha256((COMPILER + " ".join(FLAGS) + text).encode()).hexdigest()[:16]
    header = cache_dir() / f"kw-common-{digest}.h"
    gch = header.with_name(header.name + ".gch")
    with _header_lock:
        if not gch.exists():
            header.write_text(text)
            tmp = gch.with_name(f"{gch.name}.{os.getpid()}.tmp")
            proc = subprocess.run([COMPILER, *FLAGS, "-x", "c++-header", str(header), "-o", str(tmp)],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:  # the shim is ours: a bug, not a verdict on any region
                tmp.unlink(missing_ok=True)
                raise RuntimeError(f"the pre-check's own header does not compile: {first_error(proc.stderr)}")
            os.replace(tmp, gch)
    return header


def _compile(source: str, target: str) -> tuple[Optional[Path], str]:
    """(binary, '') or (None, compiler output). Binaries are cached by the source's hash."""
    d = cache_dir()
    header = _header(target)
    digest = hashlib.sha256((COMPILER + " ".join(FLAGS) + header.name + source).encode()).hexdigest()[:24]
    binary = d / f"{digest}.bin"
    if binary.exists():
        return binary, ""
    src = d / f"{digest}.cc"
    src.write_text(source)
    tmp = d / f"{digest}.{os.getpid()}.tmp"
    proc = subprocess.run([COMPILER, *FLAGS, "-include", str(header), "-x", "c++", str(src), "-o", str(tmp)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return None, proc.stderr
    os.replace(tmp, binary)
    return binary, ""


def first_error(stderr: str, span: Optional[tuple[int, int]] = None, region_start: int = 0) -> str:
    """The compiler's first error, its line given relative to the region where it lies in it."""
    for m in ERROR.finditer(stderr):
        line, msg = int(m.group(1)), m.group(2).strip()
        if span is None or span[0] <= line <= span[1]:
            rel = line - region_start
            return f"line {rel} of the region: error: {msg}" if region_start and rel > 0 else f"error: {msg}"
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return lines[0] if lines else "the compiler failed without a message"


def _region_start(source: str, span: tuple[int, int]) -> int:
    lines = source.splitlines()
    for i in range(span[0] - 1, span[1]):
        if lines[i].strip() == "// REGION BEGIN":
            return i + 1
    return 0


def _inputs_file(seg: Segment, probes: Probes) -> Path:
    blob = b"".join(decode(probes.inputs[a.name]).tobytes() for a in seg.args)
    path = cache_dir() / f"in-{hashlib.sha256(blob).hexdigest()[:24]}.bin"
    if not path.exists():
        path.write_bytes(blob)
    return path


def run(seg: Segment, target: str, probes: Probes, regions: list[str]) -> list[RegionRun]:
    """Each region's values on the probes (or its compile / runtime error)."""
    out_len = probes.count * (1 if seg.kind == SegmentKind.ELEMENTWISE or seg.per_row_output else probes.cols)
    outcomes: dict[int, RegionRun] = {}
    pending = list(range(len(regions)))
    for _ in range(3):  # whole TU; then without the regions the errors pointed at
        if not pending:
            break
        source, spans = translation_unit(seg, target, [regions[k] for k in pending], probes.count, probes.cols,
                                         out_len)
        binary, stderr = _compile(source, target)
        if binary is not None:
            outcomes.update(zip(pending, _execute(binary, seg, probes, len(pending), out_len)))
            pending = []
            break
        lines = [int(m.group(1)) for m in ERROR.finditer(stderr)]
        blamed = [k for k, span in zip(pending, spans) if any(span[0] <= ln <= span[1] for ln in lines)]
        if not blamed or len(pending) == 1:
            blamed = list(pending)
        outcomes.update(_alone(seg, target, probes, {k: regions[k] for k in blamed}, out_len))
        pending = [k for k in pending if k not in blamed]
    for k in pending:  # still not compiled after three rounds: one at a time
        outcomes.update(_alone(seg, target, probes, {k: regions[k]}, out_len))
    return [outcomes[k] for k in range(len(regions))]


def _alone(seg: Segment, target: str, probes: Probes, regions: dict[int, str], out_len: int) -> dict[int, RegionRun]:
    def one(k: int) -> tuple[int, RegionRun]:
        source, spans = translation_unit(seg, target, [regions[k]], probes.count, probes.cols, out_len)
        binary, stderr = _compile(source, target)
        if binary is None:
            return k, RegionRun(compile_error=first_error(stderr, None, _region_start(source, spans[0])))
        return k, _execute(binary, seg, probes, 1, out_len)[0]

    with ThreadPoolExecutor(min(4, len(regions))) as pool:
        return dict(pool.map(one, regions))


def _execute(binary: Path, seg: Segment, probes: Probes, n: int, out_len: int) -> list[RegionRun]:
    inputs = _inputs_file(seg, probes)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        prefix = str(Path(tmp) / "out")
        code, stdout = confined_run([str(binary), str(inputs), prefix], tmp, [str(cache_dir())], RUN_TIMEOUT_S)
        status = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
        # The harness's own failures are not the region's: every region has its own alarm, so a run
        # that did not finish, or a harness that could not start, read its inputs or keep a region's
        # values (exit 4: its scratch not writable, as under a confinement that hid it), says nothing
        # about the math. Such a region is not judged here (unsupported: it is built and judged).
        if code == -1:
            return [RegionRun(unsupported="the probe run did not finish in time (the machine is busy)")] * n
        if not status:
            return [RegionRun(unsupported=f"the probe harness did not run here (exit {code})")] * n
        results = []
        for k in range(n):
            st = status.get(str(k), "missing")
            path = Path(f"{prefix}.{k}")
            if st == "exit 4":
                results.append(RegionRun(unsupported="the probe harness could not keep the region's values here"))
                continue
            if st != "exit 0" or not path.exists():
                why = ("ran past the time limit (a deadlock, or a loop that does not end)" if st == "signal 14"
                       else f"crashed ({_signal_name(st)})")
                results.append(RegionRun(runtime_error=f"the region {why} on the probes"))
                continue
            vals = array("f")
            vals.frombytes(path.read_bytes())
            results.append(RegionRun(values=vals))
        return results


def _signal_name(status: str) -> str:
    if status.startswith("signal "):
        import signal

        try:
            return signal.Signals(int(status.split()[1])).name
        except ValueError:
            return status
    return status

