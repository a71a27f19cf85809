"""Static rules over a candidate's source, checked before anything of it runs.

Published kernel speedups collapsed because candidates gamed the harness: cached outputs, side
streams, patched timers, stale memory, PyTorch passed off as a kernel, silent fallback to the
reference. Each rule below names one such trick. A "strict" hit makes the verdict
`static_violation` without running the code; a "warning" is recorded for the reviewer and the
dynamic checks (did custom code run during forward, do outputs match) decide.

Rules read the AST, never raw text, and resolve imports and renames through `Context.qualname`,
so `import torch.cuda as tc; tc.synchronize = f` is the same as `torch.cuda.synchronize = f`.
Kernel sources are string literals; the few rules that look inside them say so.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Optional

from kernelwright import pyast
from kernelwright.astutil import (
    BUILD_CALLS,
    FUNC_TYPES,
    TRITON_JIT,
    Context,
    base_names,
    empty_alloc,
    failure_path,
    filled_names,
    heavy_call,
    import_hits,
    local_names,
    matches,
    module_fallback,
    module_statements,
    patched_target,
    patching_call,
    reference_use,
    reraises,
    state_write,
    store_targets,
    string_hits,
    strip_views,
    write_call,
    write_target,
)
from kernelwright.records import Finding

STRICT, WARNING = "strict", "warning"


@dataclass(frozen=True)
class Rule:
    name: str
    severity: str  # STRICT or WARNING
    description: str


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("missing_modelnew", STRICT, "no `class ModelNew` and no module-level binding of the name ModelNew"),
    Rule("inherits_reference", STRICT, "ModelNew is, or derives (through classes/renames in the file) from, `Model`"),
    Rule("fallback_in_except", STRICT, "an except handler runs PyTorch, Model, a forward or an nn module held in "
         "self instead of re-raising; at module level, a handler that binds a PyTorch fallback"),
    Rule("monkeypatch", STRICT, "writes, setattr/delattr, __dict__ writes or mock.patch on torch, time, triton, "
         "builtins, sys, os, numpy, kernelwright (or a class from them); timing/comparison attributes "
         "(synchronize, elapsed_time, allclose, __eq__, __code__, ...) written on anything but self; patches the "
         "class of an object; registers kernels for aten ops"),
    Rule("evaluator_access", STRICT, "imports introspection/serialization modules (kernelwright, __main__, inspect, "
         "gc, ctypes, cffi, builtins, importlib, pickle, marshal, ...); sys.modules/_getframe/settrace/setprofile; "
         "eval/exec/compile/__import__; globals() or os.environ writes; file writes; __torch_function__ hooks"),
    Rule("concurrency", STRICT, "imports threading/_thread/multiprocessing/subprocess/concurrent/asyncio/signal/"
         "socket; os.fork/system/popen/spawn*/exec*/kill/_exit, sys.exit, exit(), quit(), raise SystemExit"),
    Rule("library_call_in_kernel", STRICT, "kernel source calls a compute library the dispatcher does not see "
         "(cuBLAS, cuBLASLt, cuDNN, cuSPARSE, cuFFT, MKL, CBLAS, oneDNN, at::native::/at::cpu::/at::cuda:: compute, "
         "at::cuda::blas::): its work could not be measured, so it is not credited as a kernel"),
    Rule("unanalyzable", STRICT, "the checker could not analyze the source at all; it fails closed"),
    Rule("stream_use", WARNING, "creates or switches CUDA streams or graphs (Python or C++ source)"),
    Rule("state_in_forward", WARNING, "forward (or what it calls) writes self.<attr>, globals or module-level "
         "containers, or caches results: state that can replay an old output"),
    Rule("no_custom_code", WARNING, "no load_inline/load from torch.utils.cpp_extension and no @triton.jit"),
    Rule("torch_compute_in_forward", WARNING, "forward runs heavy PyTorch ops (matmul, conv, softmax, norms, "
         "pooling, @, nn modules held in self)"),
    Rule("library_compute_in_kernel", WARNING, "kernel source calls ATen compute (at::addmm, torch::conv2d, "
         "at::softmax, .matmul(...)): the work stage measures its share of the custom calls' time"),
    Rule("guarded_build", WARNING, "a load_inline/load build inside try/except that swallows the failure"),
    Rule("uninitialized_output", WARNING, "forward returns torch.empty*/new_empty memory never handed to a call"),
    Rule("timing_keywords", WARNING, "mentions perf_counter, Event, elapsed_time, synchronize or other clocks, "
         "other than calling torch.cuda.synchronize()"),
)}

Hit = tuple[Optional[int], str]  # (line, message) produced by one rule
TRY_TYPES = (ast.Try, getattr(ast, "TryStar", ast.Try))

# --- policy: the names each rule watches -----------------------------------------------------
# Modules the evaluator shares with the candidate: writing into them changes the evaluator too.
PROTECTED = ("torch", "time", "triton", "builtins", "sys", "os", "numpy", "kernelwright")
_EVALUATOR_OWNED = ("os.environ", "os.environb", "sys.modules")  # their writes are evaluator_access hits
# Attribute names nobody's own objects need to overwrite; written on anything but self they are a patch
# even when the object cannot be resolved (a module passed in as a parameter or loop variable).
_CRITICAL_ATTRS = frozenset({"synchronize", "perf_counter", "perf_counter_ns", "elapsed_time", "allclose", "isclose",
                             "equal", "assert_close", "__eq__", "__ne__", "__code__", "__torch_function__",
                             "__torch_dispatch__"})
_ATEN_REGISTRATION = re.compile(r"TORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(\s*aten\b")
# Modules that reach into the evaluator (frames, objects, memory) or run code from data.
_ACCESS_MODULES = ("kernelwright", "__main__", "inspect", "gc", "ctypes", "_ctypes", "cffi", "builtins", "importlib",
                   "pickle", "_pickle", "marshal", "dill", "cloudpickle", "runpy", "code", "codeop")
_ACCESS_NAMES = ("sys.modules", "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
                 "sys.meta_path", "sys.path_hooks", "builtins.eval", "builtins.exec", "builtins.compile",
                 "builtins.__import__", "builtins.breakpoint", "torch.overrides", "torch.utils._python_dispatch",
                 "torch.load", "numpy.load")  # the last two unpickle files: a cache of outputs across runs
_FILE_WRITERS = ("os.open", "os.write", "os.remove", "os.unlink", "os.rename", "os.renames", "os.replace",
                 "os.truncate", "os.ftruncate", "os.rmdir", "os.removedirs", "os.symlink", "os.link", "os.putenv",
                 "os.unsetenv", "shutil.rmtree", "shutil.move", "shutil.copy", "shutil.copy2", "shutil.copyfile",
                 "shutil.copytree", "torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed",
                 "numpy.savetxt")
_CONCURRENCY_MODULES = ("threading", "_thread", "multiprocessing", "subprocess", "concurrent", "asyncio", "signal",
                        "socket", "_posixsubprocess", "pty", "torch.multiprocessing")
_PROCESS_CALLS = ("os.fork", "os.forkpty", "os.system", "os.popen", "os.kill", "os.killpg", "os._exit", "os.abort",
                  "os.register_at_fork", "os.posix_spawn", "os.posix_spawnp", "sys.exit", "builtins.exit",
                  "builtins.quit")
_OS_SPAWN_EXEC = re.compile(r"^os\.(spawn|exec)\w*$")
_CPP_PROCESS = re.compile(r"\b(?:system|popen|fork|vfork|exec[lv]p?e?|posix_spawnp?)\(")
_STREAM_NAMES = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.streams", "torch.cuda.set_stream",
                 "torch.cuda.ExternalStream", "torch.cuda.StreamContext", "torch.cuda.CUDAGraph", "torch.cuda.graph",
                 "torch.cuda.graphs", "torch.cuda.make_graphed_callables", "torch.Stream")
_CPP_STREAMS = re.compile(r"cudaStreamCreate\w*|cudaStreamBeginCapture|cudaGraph\w+|getStreamFromPool|"
                          r"cudaStreamPerThread|cudaStreamNonBlocking|default-stream|setCurrentCUDAStream|"
                          r"CUDAStreamGuard")
_CACHE_DECORATORS = ("functools.lru_cache", "functools.cache", "functools.cached_property")
_HEAVY_OP = re.compile(r"^(matmul|mm|bmm|addmm|addbmm|baddbmm|addmv|mv|einsum|tensordot|linear|bilinear|conv\w*|"
                       r"softmax|log_softmax|softmin|\w+_norm|(adaptive_)?(max|avg|lp)_pool\dd|interpolate|"
                       r"scaled_dot_product_attention|multi_head_attention_forward|cross_entropy|nll_loss|"
                       r"lstm|gru|rnn_\w+|cumsum|cumprod|sort|argsort|topk|cdist|r?fft\w*)$")
_HEAVY_MODULE = re.compile(r"^(Linear|LazyLinear|Bilinear|\w*Conv\w*|\w*Norm\w*|MultiheadAttention|RNN|LSTM|GRU|"
                           r"Transformer\w*|Softmax|LogSoftmax|\w*Pool\w*|Embedding\w*|Upsample\w*|Sequential|Model)$")
_HEAVY_NAMES = _HEAVY_OP.pattern[1:-1]  # the alternatives, unanchored, for C++ sources
# Library compute in a kernel's C++/CUDA source. Through the dispatcher (measured by the work stage):
_CPP_ATEN_COMPUTE = re.compile(rf"\b(?:at|torch)::{_HEAVY_NAMES}\s*\(|\.(?:matmul|mm|bmm|addmm|softmax|conv2d)\s*\(")
# Around it (invisible to the dispatcher, so never measured):
_CPP_LIBRARY_CALL = re.compile(rf"\b(?:cublas|cublasLt|cudnn|cusparse|cufft|cblas_|mkl_|dnnl_)\w*\s*\(|"
                               rf"\bat::(?:native|cpu|cuda)::{_HEAVY_NAMES}\s*\(|\bat::cuda::blas::\w+")
_TIMING_NAMES = {"perf_counter", "perf_counter_ns", "elapsed_time", "synchronize", "Event", "monotonic",
                 "monotonic_ns", "process_time", "process_time_ns", "thread_time", "thread_time_ns", "time_ns"}
_SYNC_CALLS = ("torch.cuda.synchronize", "torch.accelerator.synchronize")
_TIMING_STRINGS = re.compile(r"perf_counter|elapsed_time|cudaEvent(?:ElapsedTime|Record|Create\w*|Synchronize|Query)")


# --- strict rules --------------------------------------------------------------------------

def _missing_modelnew(ctx: Context) -> Iterator[Hit]:
    for stmt in module_statements(ctx.tree.body):
        if isinstance(stmt, (ast.ClassDef, *FUNC_TYPES)) and stmt.name == "ModelNew":
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) \
                and any((a.asname or a.name) == "ModelNew" for a in stmt.names):
            return
        if not isinstance(stmt, ast.Delete) and any(isinstance(t, ast.Name) and t.id == "ModelNew"
                                                    for t in store_targets(stmt)):
            return
    yield None, "no `class ModelNew` and no module-level assignment to ModelNew"


def _inherits_reference(ctx: Context) -> Iterator[Hit]:
    bases: dict[str, list[str]] = {}  # class, or renamed name -> what it derives from / stands for
    first_line: dict[str, int] = {}
    for stmt in module_statements(ctx.tree.body):
        if isinstance(stmt, ast.ClassDef):
            names, targets = [n for b in stmt.bases for n in base_names(ctx, b)], [stmt.name]
        elif isinstance(stmt, ast.Assign):  # `ModelNew = Model`, or `ModelNew = type("X", (Model,), {})`
            value = stmt.value
            is_type = isinstance(value, ast.Call) and ctx.builtin(value.func) == "type" and len(value.args) >= 2
            names = base_names(ctx, value.args[1] if is_type else value)  # type: ignore[union-attr]
            targets = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
        else:
            continue
        for t in targets:
            bases.setdefault(t, []).extend(names)
            first_line.setdefault(t, stmt.lineno)
    came_from: dict[str, str] = {"ModelNew": ""}
    todo = ["ModelNew"]
    while todo:
        name = todo.pop()
        for base in bases.get(name, []):
            if base not in came_from:
                came_from[base] = name
                todo.append(base)
    if "Model" in came_from:
        chain, node = [], "Model"
        while node:
            chain.append(node)
            node = came_from[node]
        yield first_line.get("ModelNew"), f"ModelNew derives from the reference: {' -> '.join(reversed(chain))}"


def _fallback_in_except(ctx: Context) -> Iterator[Hit]:
    for node in ctx.nodes:
        if not isinstance(node, TRY_TYPES):
            continue
        func = ctx.enclosing(node, FUNC_TYPES)
        method = func
        while method is not None and ctx.class_of(method) is None:
            method = ctx.enclosing(method, FUNC_TYPES)  # a closure inside a method still sees self
        for handler in node.handlers:
            if reraises(handler):
                continue
            # Inside a function the handler runs per call; at import time only what it binds matters
            # (`try: import triton except ImportError: triton = None` is fine).
            cls = ctx.class_of(method) if method else None
            hit = next(filter(None, (reference_use(ctx, n, cls) for n in failure_path(ctx, node, handler))), None) \
                if func is not None else module_fallback(ctx, handler)
            if hit:
                yield hit[0], f"except handler (line {handler.lineno}) falls back to {hit[1]} when custom code fails"


def _monkeypatch(ctx: Context) -> Iterator[Hit]:
    for node in ctx.nodes:
        for target in store_targets(node):
            what = patched_target(ctx, target, PROTECTED, _EVALUATOR_OWNED, _CRITICAL_ATTRS)
            if what:
                yield node.lineno, f"modifies {what}, which the evaluator shares"
        if isinstance(node, ast.Call):
            what = patching_call(ctx, node, PROTECTED, _CRITICAL_ATTRS)
            if what:
                yield node.lineno, f"patches through {what}"
    for line, text in string_hits(ctx.nodes, _ATEN_REGISTRATION):
        yield line, f"C++ source registers kernels for PyTorch's own aten ops ({text}...)"


def _evaluator_access(ctx: Context) -> Iterator[Hit]:
    for line, module in import_hits(ctx, _ACCESS_MODULES):
        yield line, f"imports {module}"
    for node, qual in ctx.references:
        if matches(qual, _ACCESS_NAMES):
            yield node.lineno, f"uses {qual}"
        elif matches(qual, PROTECTED) and "__dict__" in qual.split("."):  # sys.__dict__["modules"]
            yield node.lineno, f"reads the namespace {qual}"
    for node in ctx.nodes:
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            yield node.lineno, "uses __builtins__"
        elif isinstance(node, ast.Call) and (what := write_call(ctx, node, _FILE_WRITERS)):
            yield node.lineno, what
        # A tensor subclass with these hooks intercepts the evaluator's own allclose/eq on the output.
        name = node.name if isinstance(node, FUNC_TYPES) else getattr(node, "id", None)
        if name in ("__torch_function__", "__torch_dispatch__"):
            yield node.lineno, f"defines {name} (intercepts the evaluator's torch calls on returned tensors)"
        for t in store_targets(node):
            if what := write_target(ctx, t):
                yield node.lineno, what


def _concurrency(ctx: Context) -> Iterator[Hit]:
    for line, module in import_hits(ctx, _CONCURRENCY_MODULES):
        yield line, f"imports {module}"
    for node, qual in ctx.references:
        if matches(qual, _PROCESS_CALLS) or _OS_SPAWN_EXEC.match(qual):
            yield node.lineno, f"uses {qual}"
    for node in (n for n in ctx.nodes if isinstance(n, ast.Raise)):
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id in ("SystemExit", "KeyboardInterrupt"):
            yield node.lineno, f"raises {exc.id}"  # as good as sys.exit()
    for line, text in string_hits(ctx.nodes, _CPP_PROCESS):
        yield line, f"C++ source starts or replaces processes ({text}...)"


# --- warning rules -------------------------------------------------------------------------

def _stream_use(ctx: Context) -> Iterator[Hit]:
    for node, qual in ctx.references:
        if matches(qual, _STREAM_NAMES):
            yield node.lineno, f"uses {qual}: work off the current stream escapes the timer"
    for line, text in string_hits(ctx.nodes, _CPP_STREAMS):
        yield line, f"source mentions {text}: work off the current stream escapes the timer"


def _state_in_forward(ctx: Context) -> Iterator[Hit]:
    for func in ctx.forward_functions:
        me = ctx.self_name(func) if ctx.class_of(func) else None
        local = local_names(func) - {me} if me else local_names(func)
        for node in ast.walk(func):
            what = state_write(ctx, node, me, local)
            if what:
                yield node.lineno, f"{func.name}() {what}: state kept across calls can replay an old output"
        for dec in func.decorator_list:
            if matches(ctx.qualname(dec.func if isinstance(dec, ast.Call) else dec), _CACHE_DECORATORS):
                yield dec.lineno, f"{func.name}() is memoized ({ast.unparse(dec)})"
        for default in func.args.defaults + [d for d in func.args.kw_defaults if d is not None]:
            if isinstance(default, (ast.List, ast.Dict, ast.Set)):
                yield default.lineno, f"{func.name}() has a mutable default argument (a cache across calls)"


def _no_custom_code(ctx: Context) -> Iterator[Hit]:
    if not any(matches(qual, BUILD_CALLS + TRITON_JIT) for _, qual in ctx.references):
        yield None, "no load_inline/load from torch.utils.cpp_extension and no @triton.jit kernel in the source"


def _torch_compute_in_forward(ctx: Context) -> Iterator[Hit]:
    for func in ctx.forward_functions:
        held = ctx.module_attrs(ctx.class_of(func))
        for node in ast.walk(func):
            what = heavy_call(ctx, node, held, _HEAVY_OP, _HEAVY_MODULE)
            if what:
                yield getattr(node, "lineno", None), f"{func.name}() computes with {what} in PyTorch"


def _library_call_in_kernel(ctx: Context) -> Iterator[Hit]:
    for line, text in string_hits(ctx.nodes, _CPP_LIBRARY_CALL):
        yield line, f"kernel source calls {text.rstrip('( ')}"


def _library_compute_in_kernel(ctx: Context) -> Iterator[Hit]:
    for line, text in string_hits(ctx.nodes, _CPP_ATEN_COMPUTE):
        yield line, f"kernel source computes with {text.rstrip('( ')}"


def _guarded_build(ctx: Context) -> Iterator[Hit]:
    for node in ctx.nodes:
        if isinstance(node, TRY_TYPES) and node.handlers and not all(reraises(h) for h in node.handlers) and any(
                isinstance(n, ast.Call) and matches(ctx.qualname(n.func), BUILD_CALLS)
                for stmt in node.body for n in ast.walk(stmt)):
            yield node.lineno, ("the kernel build is inside try/except that swallows a failure; "
                                "the run must show the kernel was used")


def _uninitialized_output(ctx: Context) -> Iterator[Hit]:
    for func in ctx.forward_functions:
        empties = {t.id: n.lineno for n in ast.walk(func) if isinstance(n, ast.Assign) and empty_alloc(ctx, n.value)
                   for t in n.targets if isinstance(t, ast.Name)}
        filled = filled_names(ctx, func)
        for ret in (n for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None):
            for v in ret.value.elts if isinstance(ret.value, (ast.Tuple, ast.List)) else [ret.value]:
                if empty_alloc(ctx, v):
                    yield ret.lineno, f"{func.name}() returns freshly allocated, uninitialized memory"
                    continue
                v = strip_views(v)  # `return out.view(-1)` returns out's memory
                if isinstance(v, ast.Name) and v.id in empties and v.id not in filled:
                    yield ret.lineno, (f"{func.name}() returns {v.id}, allocated uninitialized at line "
                                       f"{empties[v.id]} and never handed to a kernel (stale memory)")


def _timing_keywords(ctx: Context) -> Iterator[Hit]:
    for node in ctx.nodes:
        if isinstance(node, (ast.Name, ast.Attribute)):
            qual = ctx.qualname(node)
            name = node.id if isinstance(node, ast.Name) else node.attr
            if (name in _TIMING_NAMES or qual in ("time.time", "timeit")) \
                    and not (qual in _SYNC_CALLS and ctx.is_called(node)):  # torch.cuda.synchronize() is fine
                yield node.lineno, f"mentions {qual or name}"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None)
            for a in node.names:
                full = f"{module}.{a.name}" if module else a.name
                if (a.name in _TIMING_NAMES or matches(full, ("timeit",))) and full not in _SYNC_CALLS:
                    yield node.lineno, f"imports {full}"
        elif isinstance(node, (*FUNC_TYPES, ast.ClassDef)) and node.name in _TIMING_NAMES:
            yield node.lineno, f"defines {node.name}"
    for line, text in string_hits(ctx.nodes, _TIMING_STRINGS):
        yield line, f"string mentions {text}"


_CHECKS: dict[str, Callable[[Context], Iterator[Hit]]] = {
    "missing_modelnew": _missing_modelnew,
    "inherits_reference": _inherits_reference,
    "fallback_in_except": _fallback_in_except,
    "monkeypatch": _monkeypatch,
    "evaluator_access": _evaluator_access,
    "concurrency": _concurrency,
    "stream_use": _stream_use,
    "state_in_forward": _state_in_forward,
    "no_custom_code": _no_custom_code,
    "torch_compute_in_forward": _torch_compute_in_forward,
    "library_call_in_kernel": _library_call_in_kernel,
    "library_compute_in_kernel": _library_compute_in_kernel,
    "guarded_build": _guarded_build,
    "uninitialized_output": _uninitialized_output,
    "timing_keywords": _timing_keywords,
}
assert set(_CHECKS) | {"unanalyzable"} == set(RULES), "every rule needs a check and a table entry"


def check_source(source: str) -> list[Finding]:
    """All findings for `source`, strict first, then by line. Never raises: a rule that crashes
    reports itself as a hit of its own severity, so a crafted input cannot switch a rule off."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return []  # reported by the caller as syntax_error
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. nesting deeper than the parser allows
        return [Finding(rule="unanalyzable", severity=STRICT, message=f"{type(exc).__name__}: {exc}"[:300])]
    try:
        ctx = Context(tree)
    except Exception as exc:  # noqa: BLE001 -- fail closed, as for a crashing rule
        return [Finding(rule="unanalyzable", severity=STRICT, message=f"{type(exc).__name__}: {exc}"[:300])]
    findings: list[Finding] = []
    seen: set[tuple[str, Optional[int]]] = set()
    for name, check in _CHECKS.items():
        try:
            hits = list(check(ctx))
        except Exception as exc:  # noqa: BLE001 -- fail closed, see the docstring
            hits = [(None, f"could not be checked ({type(exc).__name__}: {exc})"[:300])]
        for line, message in hits:
            if (name, line) not in seen:  # one finding per rule and line is enough for a reviewer
                seen.add((name, line))
                findings.append(Finding(rule=name, severity=RULES[name].severity, message=message, line=line))
    findings.sort(key=lambda f: (f.severity != STRICT, f.line or 0))
    return findings
