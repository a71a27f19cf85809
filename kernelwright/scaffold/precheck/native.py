"""C++ and CUDA regions on the host: the skeleton's own kernel with the region in it, compiled by
the system compiler without torch headers, run on the probes.

One translation unit holds every region of a call, each in its own namespace around a copy of the
skeleton's kernel (skeleton.cpp_kernel / cuda_kernel, so the region sees exactly the names it
sees in the real program). `at::Half` / `at::BFloat16` are floats here: the probes hold the values
as the kernel loads them, and the store's rounding is applied by the comparison.

CUDA kernels run as the GPU would run them, one block at a time: every thread of a block is a
host thread, `__syncthreads()` a barrier of the block, `__shared__` a variable the block's threads
share, `block_sum` / `block_max` reductions over the block through that barrier, warp shuffles an
exchange among a warp's threads (all of the block's threads must reach it, as they must reach the
skeleton's helpers). Device math names map to <cmath>; intrinsics to what they approximate.

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

from ..skeleton import PLACEHOLDER, ROW_THREADS, ELEMENTWISE_THREADS, cpp_kernel, cuda_kernel
from ..types import Probes, Segment, SegmentKind
from .compare import decode
from .types import RegionRun

COMPILER = os.environ.get("CXX", "c++")
# -O0: the regions are a few lines run on a few thousand values; compile time is what counts
FLAGS = ["-std=gnu++20", "-O0", "-pthread", "-w", "-fmax-errors=20"]
RUN_TIMEOUT_S = 20.0
REGION_TIMEOUT_S = 3  # per region, in the forked child (alarm)
ERROR = re.compile(r"^[^:\n]+:(\d+):(?:\d+:)? (?:fatal )?error: (.*)$", re.M)
# nvcc rejects calls from device code to host functions; the standard library's algorithms are
# host functions, its math (and, with torch's --expt-relaxed-constexpr, min/max) is not.
STD_NAME = re.compile(r"\bstd::(\w+)")
CUDA_STD_OK = frozenset({"exp", "expf", "log", "logf", "log1p", "sqrt", "sqrtf", "tanh", "tanhf", "erf", "erff",
                         "pow", "powf", "fabs", "fabsf", "abs", "fmax", "fmaxf", "fmin", "fminf", "max", "min",
                         "isnan", "isinf", "isfinite", "floor", "ceil", "round", "exp2", "log2", "sin", "cos",
                         "cosh", "sinh", "expm1", "cbrt", "rsqrt", "numeric_limits", "size_t", "int64_t",
                         "int32_t", "uint32_t"})
TORCH_NAMES = re.compile(r"\b(?:torch|at|c10)::|\bdata_ptr\s*<|\.item\s*\(")

COMMON = r'''
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
namespace at { using Half = float; using BFloat16 = float; }
'''

CUDA_SHIM = r'''
#include <pthread.h>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct dim3 { unsigned x = 1, y = 1, z = 1; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
// One block at a time, its threads as host threads (plain pthreads: no templates to instantiate,
// which made each compile several times slower).
static pthread_barrier_t kw_bar;
static void (*kw_body)(void);
struct kw_id { unsigned t, b; };
static void* kw_thread(void* p) {
    const kw_id* id = static_cast<const kw_id*>(p);
    threadIdx.x = id->t; blockIdx.x = id->b;
    kw_body();
    return nullptr;
}
static void kw_launch(unsigned blocks, unsigned threads, void (*body)(void)) {
    static pthread_t ts[1024];
    static kw_id ids[1024];
    blockDim.x = threads; gridDim.x = blocks; kw_body = body;
    pthread_attr_t attr; pthread_attr_init(&attr); pthread_attr_setstacksize(&attr, 1 << 20);
    for (unsigned b = 0; b < blocks; ++b) {
        pthread_barrier_init(&kw_bar, nullptr, threads);
        for (unsigned t = 0; t < threads; ++t) { ids[t] = {t, b}; pthread_create(&ts[t], &attr, kw_thread, &ids[t]); }
        for (unsigned t = 0; t < threads; ++t) pthread_join(ts[t], nullptr);
        pthread_barrier_destroy(&kw_bar);
    }
}
static inline void __syncthreads() { pthread_barrier_wait(&kw_bar); }
static inline void __syncwarp(unsigned = 0xffffffffu) {}
static inline void __threadfence() {}
static float kw_exchange[1024];
static inline float kw_swap(float v, unsigned from) {
    __syncthreads(); kw_exchange[threadIdx.x] = v; __syncthreads();
    float r = kw_exchange[from < blockDim.x ? from : threadIdx.x]; __syncthreads(); return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int o, int = 32) { return kw_swap(v, threadIdx.x ^ o); }
static inline float __shfl_down_sync(unsigned, float v, unsigned o, int = 32) {
    unsigned lane = threadIdx.x & 31; return kw_swap(v, lane + o < 32 ? threadIdx.x + o : threadIdx.x); }
static inline float __shfl_up_sync(unsigned, float v, unsigned o, int = 32) {
    unsigned lane = threadIdx.x & 31; return kw_swap(v, lane >= o ? threadIdx.x - o : threadIdx.x); }
static inline float __shfl_sync(unsigned, float v, int src, int = 32) {
    return kw_swap(v, (threadIdx.x & ~31u) + (unsigned)(src & 31)); }
static inline float block_sum(float v) {
    __syncthreads(); kw_exchange[threadIdx.x] = v; __syncthreads();
    float s = 0.0f; for (unsigned t = 0; t < blockDim.x; ++t) s += kw_exchange[t];
    __syncthreads(); return s;
}
static inline float block_max(float v) {
    __syncthreads(); kw_exchange[threadIdx.x] = v; __syncthreads();
    float s = -INFINITY; for (unsigned t = 0; t < blockDim.x; ++t) s = fmaxf(s, kw_exchange[t]);
    __syncthreads(); return s;
}
static pthread_mutex_t kw_atomic = PTHREAD_MUTEX_INITIALIZER;
static inline float atomicAdd(float* a, float v) {
    pthread_mutex_lock(&kw_atomic); float o = *a; *a += v; pthread_mutex_unlock(&kw_atomic); return o; }
static inline float atomicMax(float* a, float v) {
    pthread_mutex_lock(&kw_atomic); float o = *a; *a = fmaxf(*a, v); pthread_mutex_unlock(&kw_atomic); return o; }
// glibc declares some of these names itself: macros, not definitions
#define __expf expf
#define __logf logf
#define __log2f log2f
#define __powf powf
#define __tanhf tanhf
#define __sinf sinf
#define __cosf cosf
#define exp10f(v) powf(10.0f, (v))
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __saturatef(float a) { return fminf(fmaxf(a, 0.0f), 1.0f); }
static inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
static inline double rsqrt(double v) { return 1.0 / sqrt(v); }
static inline float normcdff(float v) { return 0.5f * erfcf(-v / sqrtf(2.0f)); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
template <class T> static inline T __ldg(const T* p) { return *p; }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline float min(float a, float b) { return fminf(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
typedef float __half;
typedef float __nv_bfloat16;
static inline float __half2float(float v) { return v; }
static inline float __float2half(float v) { return v; }
static inline float __bfloat162float(float v) { return v; }
static inline float __float2bfloat16(float v) { return v; }
#define CUDART_INF_F INFINITY
'''


def cache_dir() -> Path:
    d = Path(os.environ.get("KERNELWRIGHT_PRECHECK_CACHE") or Path(tempfile.gettempdir()) / f"kw-precheck-{os.getuid()}")
    d.mkdir(parents=True, exist_ok=True)
    return d


def screen(target: str, region: str) -> str:
    """What the harness cannot judge (torch calls: `unsupported`) or what nvcc would reject
    that the host compiler accepts (a host function in device code): one line, or ''."""
    if TORCH_NAMES.search(region):
        return "unsupported: the region calls torch / ATen, which the pre-check compiles without"
    if target == "cuda":
        for name in STD_NAME.findall(_code_only(region)):
            if name not in CUDA_STD_OK:
                return (f"compile_error: calling a __host__ function(\"std::{name}\") from a __global__ function "
                        "is not allowed")
    return ""


def _code_only(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


# ---- the translation unit ------------------------------------------------------------------------

def _kernel(seg: Segment, target: str, region: str) -> str:
    """The kernel text with the region in it (CUDA's device helpers are the shim's host versions)."""
    kernel, indent = cpp_kernel(seg) if target == "cpp" else cuda_kernel(seg)[:2]
    body = "\n".join((indent + ln) if ln.strip() else "" for ln in (region.strip("\n") or "").splitlines())
    # the marker comments stand where the skeleton puts them, so error line numbers map to the region
    return kernel.replace(indent + PLACEHOLDER, f"{indent}// REGION BEGIN\n{body}\n{indent}// REGION END")


def _call(seg: Segment, count: int, cols: int) -> str:
    """The kernel call inside `main`: pointers to the probe arrays, broadcasting already applied."""
    args = []
    for a in seg.args:
        args.append(f"kw_in_{a.name}")
        if a.pattern == "broadcast":
            args += ["1", str(count * cols)]  # values[(i / 1) % total] == values[i]
    args.append("kw_out")
    args += [str(count)] if seg.kind == SegmentKind.ELEMENTWISE else [str(count), str(cols)]
    return ", ".join(args)


def _launch(seg: Segment, target: str, k: int, count: int) -> str:
    if target == "cpp":
        return f"        kw_body_{k}();\n"
    threads = ELEMENTWISE_THREADS if seg.kind == SegmentKind.ELEMENTWISE else ROW_THREADS
    blocks = (count + threads - 1) // threads if seg.kind == SegmentKind.ELEMENTWISE else count
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
    call = _call(seg, count, cols)
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
    text = COMMON + (CUDA_SHIM if target == "cuda" else "")
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


def confined_run(argv: list[str], scratch: str, visible: list[str], timeout: float,
                 stdin: str = "") -> tuple[int, str]:
    """(exit status, stdout) of `argv` run under the evaluator's confinement (no network, the file
    system read-only but `scratch`, limits), as far as this machine offers it: the pre-check runs
    model-written code. -1 if it ran past `timeout`."""
    from kernelwright.evaluate import confine

    limits = confine.Limits(memory_bytes=2 << 30, cpu_seconds=int(timeout) + 5)
    held = confine.box(argv, scratch, visible, limits, env_scrubbed=True, required=False)
    env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LC_ALL": "C"}
    proc = subprocess.Popen(held.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=scratch, env=env, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(stdin, timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        confine.kill_tree(proc.pid, held.cgroup)
        proc.wait()
        return -1, ""
    finally:
        held.release()


def _execute(binary: Path, seg: Segment, probes: Probes, n: int, out_len: int) -> list[RegionRun]:
    inputs = _inputs_file(seg, probes)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        prefix = str(Path(tmp) / "out")
        code, stdout = confined_run([str(binary), str(inputs), prefix], tmp, [str(cache_dir())], RUN_TIMEOUT_S)
        if code == -1:
            return [RegionRun(runtime_error="the probe run did not finish") for _ in range(n)]
        status = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
        results = []
        for k in range(n):
            st = status.get(str(k), "missing")
            path = Path(f"{prefix}.{k}")
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

