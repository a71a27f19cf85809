"""Static rules: each rule fires on its trick (also when renamed) and stays quiet on honest code."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from kernelwright.evaluate import static_checks
from kernelwright.evaluate.static_checks import RULES, check_source
from kernelwright.records import Finding

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

# A realistic honest answer: a fused CUDA kernel built with load_inline, called from forward.
HONEST_CUDA = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void bias_relu_kernel(const float* __restrict__ x, const float* __restrict__ b,
                                 float* __restrict__ out, int n, int features) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] + b[i % features];
        out[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor b) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    bias_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, b.numel());
    return out;
}
"""

cpp_source = "torch::Tensor bias_relu(torch::Tensor x, torch::Tensor b);"

bias_relu = load_inline(
    name="bias_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias_relu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Adds a learnable bias to the input and applies ReLU, in one kernel."""

    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.ext = bias_relu

    def forward(self, x):
        return self.ext.bias_relu(x.contiguous(), self.bias)
'''

# The same with Triton; the wrapper allocates with empty_like and hands it to the kernel.
HONEST_TRITON = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(x_ptr, b_ptr, out_ptr, n, features, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs % features, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + b, 0.0), mask=mask)


def bias_relu(x, b):
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 1024),)
    bias_relu_kernel[grid](x, b, out, n, b.numel(), BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return bias_relu(x.contiguous(), self.bias)
'''

# A CPU C++ answer: load_inline with cpp_sources only, threads through at::parallel_for.
HONEST_CPP = '''
import torch
import torch.nn as nn
import torch.utils.cpp_extension as cpp_ext

try:
    import triton  # optional, unused here
except ImportError:
    triton = None

source = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
torch::Tensor bias_relu(torch::Tensor x, torch::Tensor b) {
    auto out = torch::empty_like(x);
    const float* xp = x.data_ptr<float>(); const float* bp = b.data_ptr<float>();
    float* op = out.data_ptr<float>();
    int64_t f = b.numel();
    at::parallel_for(0, x.numel(), 2048, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) { float v = xp[i] + bp[i % f]; op[i] = v > 0 ? v : 0; }
    });
    return out;
}
"""
ext = cpp_ext.load_inline("bias_relu_cpu", cpp_sources=source, functions=["bias_relu"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        out = ext.bias_relu(x.contiguous(), self.bias)
        torch.cuda.synchronize()
        return out
'''


def rules_hit(source: str) -> set[str]:
    return {f.rule for f in check_source(textwrap.dedent(source))}


def model(forward_body: str, init_body: str = "pass", extra: str = "") -> str:
    """A ModelNew with the given __init__ and forward bodies (4-space indented inside)."""
    indent = lambda s: textwrap.indent(textwrap.dedent(s).strip("\n"), " " * 8)  # noqa: E731
    return (HEADER + textwrap.dedent(extra) + "\nclass ModelNew(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n" + indent(init_body) + "\n"
            "    def forward(self, x):\n" + indent(forward_body) + "\n")


# --- the rule table ------------------------------------------------------------------------

def test_rule_table_names_and_severities() -> None:
    strict = {"missing_modelnew", "inherits_reference", "fallback_in_except", "monkeypatch", "evaluator_access",
              "concurrency", "library_call_in_kernel"}
    warning = {"stream_use", "state_in_forward", "no_custom_code", "torch_compute_in_forward", "guarded_build",
               "uninitialized_output", "timing_keywords", "library_compute_in_kernel"}
    assert strict <= set(RULES) and warning <= set(RULES)
    for name, rule in RULES.items():
        assert rule.name == name and rule.description
        assert rule.severity == ("strict" if name in strict | {"unanalyzable"} else "warning")


def test_library_calls_in_kernel_sources() -> None:
    def rules(cpp: str) -> set[str]:
        return {f.rule for f in check_source(f'SRC = r"""{cpp}"""\nclass ModelNew:\n    pass\n')}

    # the dispatcher cannot see these: refused
    for call in ("cublasSgemm(handle, a, b);", "cudnnConvolutionForward(h);", "at::native::addmm(b, x, w);",
                 "at::cpu::softmax(x, 1, false);", "at::cuda::blas::gemm<float>(a);", "cblas_sgemm(o);"):
        assert "library_call_in_kernel" in rules(call), call
    # the dispatcher sees these: the work stage measures them, the rule names them
    for call in ("return at::addmm(b, x, w);", "torch::conv2d(x, w);", "auto y = x.matmul(w);"):
        found = rules(call)
        assert "library_compute_in_kernel" in found and "library_call_in_kernel" not in found, call
    # a stream, an allocation and a pointwise helper are no library compute
    plain = rules("auto s = at::cuda::getCurrentCUDAStream(); auto y = torch::empty_like(x); at::relu(x);")
    assert not plain & {"library_call_in_kernel", "library_compute_in_kernel"}


@pytest.mark.parametrize("source", [HONEST_CUDA, HONEST_TRITON, HONEST_CPP], ids=["cuda", "triton", "cpp"])
def test_honest_candidates_are_clean(source: str) -> None:
    findings = check_source(source)
    assert [f for f in findings if f.severity == "strict"] == []
    assert findings == [], findings  # not even a warning: these are what we ask the model for


# --- strict rules: (source, expected to fire) ---------------------------------------------

def _cases(rule: str, positives: list[str], negatives: list[str]) -> list:
    return [pytest.param(rule, s, True, id=f"{rule}+{i}") for i, s in enumerate(positives)] + \
        [pytest.param(rule, s, False, id=f"{rule}-{i}") for i, s in enumerate(negatives)]


CASES = []
CASES += _cases("missing_modelnew", [
    HEADER + "class Other(nn.Module):\n    pass\n",
    HEADER + "def make():\n    class ModelNew(nn.Module):\n        pass\n    return ModelNew\n",  # not module level
    HEADER + "def f():\n    ModelNew = 1\n    return ModelNew\n",
], [
    HEADER + "class ModelNew(nn.Module):\n    pass\n",
    HEADER + "def build():\n    return nn.Identity\nModelNew = build()\n",
    HEADER + "if True:\n    class ModelNew(nn.Module):\n        pass\n",
    HEADER + "try:\n    import triton\nexcept ImportError:\n    pass\nelse:\n    ModelNew, X = nn.Identity, 1\n",
])
CASES += _cases("inherits_reference", [
    HEADER + "class Model(nn.Module):\n    pass\nclass ModelNew(Model):\n    pass\n",
    HEADER + "class Base(Model):\n    pass\nclass Mid(Base):\n    pass\nclass ModelNew(Mid):\n    pass\n",
    HEADER + "from reference import Model as R\nclass ModelNew(R):\n    pass\n",
    HEADER + "Ref = Model\nclass ModelNew(Ref, nn.Module):\n    pass\n",
    HEADER + "ModelNew = Model\n",
    HEADER + 'ModelNew = type("ModelNew", (Model,), {})\n',
    HEADER + "import reference\nclass ModelNew(reference.Model):\n    pass\n",
], [
    HEADER + "class Model(nn.Module):\n    pass\nclass ModelNew(nn.Module):\n    pass\n",
    HEADER + "class Helper(Model):\n    pass\nclass ModelNew(nn.Module):\n    pass\n",
    model("return ext.f(x)", init_body="self.m = Model"),
])
CASES += _cases("fallback_in_except", [
    model("try:\n    return ext.f(x)\nexcept Exception:\n    return torch.relu(x)"),
    model("try:\n    return ext.f(x)\nexcept RuntimeError:\n    return F.relu(x)"),
    model("try:\n    return ext.f(x)\nexcept:\n    return T.matmul(x, x)", extra="import torch as T\n"),
    model("try:\n    return ext.f(x)\nexcept Exception:\n    return relu(x)", extra="from torch import relu\n"),
    model("try:\n    return ext.f(x)\nexcept Exception:\n    return super().forward(x)"),
    model("try:\n    return ext.f(x)\nexcept Exception:\n    return self.ref(x)", init_body="self.ref = Model()"),
    model("try:\n    return ext.f(x)\nexcept Exception:\n    return self.conv(x)",
          init_body="self.conv = nn.Conv2d(3, 3, 3)"),
    model("try:\n    return ext.f(x)\nexcept Exception:\n    return x @ self.w"),
    model("try:\n    return ext.f(x)\nexcept Exception:\n    return x.relu()"),
    model("try:\n    return ext.f(x)\nexcept Exception:\n    pass\nreturn F.relu(x)"),  # after the try
    model("try:\n    return ext.f(x)\nexcept Exception as e:\n    print(e)\n    return Model.forward(self, x)"),
    model("def inner():\n    try:\n        return ext.f(x)\n    except Exception:\n        return self.lin(x)\n"
          "return inner()",
          init_body="self.lin = nn.Linear(4, 4)"),
    # at module level, a handler that binds a PyTorch replacement
    HEADER + "try:\n    ext = load()\nexcept Exception:\n    kernel = F.relu\nclass ModelNew(nn.Module):\n    pass\n",
    HEADER + ("try:\n    ext = load()\nexcept Exception:\n    class ModelNew(nn.Module):\n"
              "        def forward(self, x):\n            return torch.relu(x)\n"),
    HEADER + "try:\n    ext = load()\nexcept Exception:\n    ModelNew = Model\n",
], [
    HEADER + "try:\n    import triton\nexcept ImportError:\n    triton = None\nclass ModelNew(nn.Module):\n    pass\n",
    HEADER + "try:\n    import triton\n    DT = torch.float16\nexcept ImportError:\n    DT = torch.float32\n",
    model("try:\n    return ext.f(x)\nexcept RuntimeError as e:\n    torch.cuda.synchronize()\n"
          "    raise RuntimeError(f'kernel failed: {e}') from e"),
    model("try:\n    return ext.f(x)\nexcept torch.cuda.OutOfMemoryError:\n    torch.cuda.empty_cache()\n"
          "    return ext.f(x)"),
    model("try:\n    y = ext.f(x)\nexcept Exception:\n    self.failed = True\n    y = ext.g(x)\nreturn y"),
    model("try:\n    y = ext.f(x)\nexcept Exception:\n    pass\nreturn torch.relu(y)"),  # runs on both paths
    model("try:\n    return ext.f(x)\nexcept RuntimeError:\n    return ext.relu(x.contiguous())",
          extra="ext = torch.utils.cpp_extension.load_inline('k', 's', functions=['f', 'relu'])\n"),
    HEADER + "try:\n    ext = load_inline('a', 'b')\nexcept Exception:\n    ext = None\n",
])
CASES += _cases("monkeypatch", [
    HEADER + "torch.cuda.Event.elapsed_time = lambda self, other: 0.001\n",
    HEADER + "torch.cuda.synchronize = lambda: None\n",
    "import time\ntime.perf_counter = lambda: 0.0\n",
    HEADER + "torch.Tensor.__eq__ = lambda a, b: True\n",
    HEADER + "torch.allclose = lambda *a, **k: True\n",
    "import torch.cuda as tc\ntc.synchronize = print\n",
    "from torch import Tensor\nTensor.__eq__ = lambda a, b: True\n",
    "import time as t\nt.perf_counter = lambda: 0.0\n",
    HEADER + "tc = torch.cuda\nsync_owner = tc\nsync_owner.synchronize = print\n",
    HEADER + 'getattr(torch, "cuda").synchronize = print\n',
    HEADER + 'setattr(torch, "allclose", lambda *a, **k: True)\n',
    "import time\ndelattr(time, 'perf_counter')\n",
    HEADER + 'torch.__dict__["allclose"] = print\n',
    "import time\nvars(time)['perf_counter'] = print\n",
    HEADER + "torch.cuda.__dict__.update(synchronize=print)\n",
    HEADER + "object.__setattr__(torch, 'allclose', print)\n",
    HEADER + "del torch.allclose\n",
    HEADER + "from unittest import mock\nmock.patch('torch.allclose', return_value=True).start()\n",
    HEADER + "from unittest.mock import patch\npatch.object(torch.cuda, 'synchronize').start()\n",
    HEADER + "def f(x):\n    type(x).__eq__ = lambda a, b: True\n",
    HEADER + "def f(out):\n    out.__class__ = Fake\n",
    "import numpy as np\nnp.allclose = lambda *a, **k: True\n",
    "import builtins\nbuiltins.print = lambda *a: None\n",
    "import sys\nsys.stdout = None\n",
    HEADER + "torch.backends.cudnn.benchmark = True\n",  # global state shared with the reference
    HEADER + "lib = torch.library.Library('aten', 'IMPL')\n",
    HEADER + 'src = """\nTORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("eq.Tensor", fake_eq); }\n"""\n',
    HEADER + "def patch():\n    global torch\n    torch.cuda.synchronize = print\n",
    # the module arrives through a loop variable / parameter / computed getattr: caught by the name
    HEADER + "for m in [torch.cuda]:\n    m.synchronize = print\n",
    HEADER + "def p(m):\n    m.elapsed_time = lambda *a: 0.0\np(torch.cuda.Event)\n",
    HEADER + "getattr(torch, 'cu' + 'da').synchronize = print\n",
    HEADER + "def p(m):\n    setattr(m, 'allclose', lambda *a, **k: True)\n",
    HEADER + "def fake():\n    pass\ntorch.cuda.synchronize.__code__ = fake.__code__\n",
], [
    model("return x", init_body="self.weight = nn.Parameter(torch.randn(3))"),
    HEADER + "ev = torch.cuda.Event(enable_timing=True)\nev.tag = 'mine'\n",
    HEADER + "def f(input):\n    input.tag = 1\n    return input\n",
    HEADER + "class ModelNew(nn.Module):\n    def f(self):\n        type(self).calls = 0\n"
             "        self.__class__.n = 1\n",
    HEADER + "x = torch.randn(3)\nx.requires_grad = True\n",
    HEADER + "def f(x):\n    out = torch.empty_like(x)\n    out[0] = 1\n    return out\n",
])
CASES += _cases("evaluator_access", [
    "import kernelwright\n",
    "from kernelwright.evaluate import timing\n",
    "import inspect\n", "import gc\n", "import ctypes\n", "from ctypes import CDLL\n", "import importlib\n",
    "import pickle\n", "import marshal\n", "import builtins\n", "import __main__\n", "import cffi\n",
    "import sys\nsys.modules['torch']\n",
    "import sys as s\nframe = s._getframe(1)\n",
    "from sys import modules\nm = modules.get('time')\n",
    "import sys\nsys.settrace(print)\n", "import sys\nsys.setprofile(print)\n",
    "globals()['ModelNew'] = object\n", "globals().update(x=1)\n",
    "__import__('time')\n", "eval('1+1')\n", "exec('x = 1')\n", "compile('1', 'f', 'eval')\n",
    "e = eval\ne('1')\n", "run = exec\n",
    "open('f.txt', 'w')\n", "open('f.txt', mode='a')\n", "def f(m):\n    open('x', m)\n",
    "import io\nio.open('x', 'wb')\n",
    "import os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '1'\n",
    "import os\nos.environ.update({'X': '1'})\n",
    "from os import environ\nenviron['X'] = '1'\n",
    "import os\ndel os.environ['X']\n",
    "import os\nos.putenv('X', '1')\n",
    "x = __builtins__['eval']\n",
    HEADER + "class T(torch.Tensor):\n    @classmethod\n"
             "    def __torch_function__(cls, f, t, a=(), k=None):\n        return True\n",
    HEADER + "torch.save({}, 'cache.pt')\n",
    HEADER + "cached = torch.load('cache.pt')\n",
    "from pathlib import Path\nPath('x').write_text('')\n",
    "import os\nos.remove('/tmp/results.json')\n",
    "import sys\nm = sys.__dict__['modules']\n",
    "def f(eval=eval):\n    return eval('1')\n",  # the default is the builtin, evaluated outside f
    "def f():\n    def g():\n        eval = None\n    return eval('1')\n",  # g's local is not f's
    "def f():\n    [0 for exec in [1]]\n    exec('x = 1')\n",  # comprehension variables stay inside
    "if False:\n    eval = None\ndef f():\n    return eval('1')\n",
], [
    "open('kernel.cu').read()\n", "open('kernel.cu', 'rb')\n",
    "import os\nflag = os.environ.get('X')\n",
    HEADER + "m = torch.compile(nn.Linear(2, 2))\n",
    "import re\np = re.compile('x')\n",
    HEADER + "class ModelNew(nn.Module):\n    def f(self):\n        self.eval()\n        return self.compile\n",
    "def compile(src):\n    return src\ncompile('x')\n",  # the file's own helper, not the builtin
    "def build(src, compile=True):\n    return src if compile else None\n",  # a parameter shadows
    "def f():\n    open = lambda *a: None\n    open('x', 'w')\n",  # a local shadows for the whole body
    HEADER + "from torch.utils.cpp_extension import load\next = load(name='k', sources=['k.cu'])\n",
    "import sys\nprint(sys.version)\n",
])
CASES += _cases("concurrency", [
    "import threading\n", "from concurrent.futures import ThreadPoolExecutor\n", "import subprocess\n",
    "import asyncio\n", "import signal\n", "import socket\n", "import multiprocessing as mp\n", "import _thread\n",
    "import torch.multiprocessing as mp\n", "from torch import multiprocessing\n",
    "import os\nos.fork()\n", "import os\nos.system('nvidia-smi')\n", "import os\nos.popen('ls')\n",
    "import os\nos.spawnl(os.P_NOWAIT, '/bin/true')\n", "import os\nos.execv('/bin/true', [])\n",
    "import os\nos.kill(os.getppid(), 9)\n", "import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n",
    "exit()\n", "quit()\n", "from os import system as s\ns('ls')\n", "raise SystemExit(0)\n",
    "import os\nf = os.fork\n",
    'src = """\nvoid go() { system("pkill python"); }\n"""\n',
    'src = """\nint pid = fork();\n"""\n',
], [
    'src = """\n#include <thread>\nstd::thread t(work); t.join();\n#pragma omp parallel for\n"""\n',
    'src = """\n#include <filesystem>\n// uses the file system (not a call)\n"""\n',
    HEADER + "class ModelNew(nn.Module):\n    def f(self):\n        return self.exit()\n",
    "import os\nn = os.cpu_count()\n",
])


@pytest.mark.parametrize("rule,source,expected", CASES)
def test_strict_rule(rule: str, source: str, expected: bool) -> None:
    findings = [f for f in check_source(source) if f.rule == rule]
    assert bool(findings) == expected, (rule, findings)
    assert all(f.severity == "strict" for f in findings)
    if expected:
        assert any(f.line is not None for f in findings) or rule == "missing_modelnew"


# --- warning rules -------------------------------------------------------------------------

WARN = []
WARN += _cases("stream_use", [
    model("s = torch.cuda.Stream()\nreturn x"),
    model("with torch.cuda.stream(self.s):\n    y = ext.f(x)\nreturn y"),
    model("torch.cuda.set_stream(self.s)\nreturn x"),
    model("return torch.cuda.ExternalStream(self.ptr)"),
    model("g = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    y = ext.f(x)\nreturn y"),
    "from torch.cuda import Stream as S\ns = S()\n",
    'src = """\ncudaStream_t s; cudaStreamCreate(&s);\n"""\n',
    "flags = ['--default-stream=per-thread']\n",
], [
    model("s = torch.cuda.current_stream()\nreturn ext.f(x, s.cuda_stream)"),
    'src = """\nk<<<g, b, 0, at::cuda::getCurrentCUDAStream()>>>(p);\n"""\n',
])
WARN += _cases("state_in_forward", [
    model("self.cache = ext.f(x)\nreturn self.cache"),
    model("self._last[x.shape] = y = ext.f(x)\nreturn y", init_body="self._last = {}"),
    model("return self._run(x)").replace(
        "    def forward(self, x):", "    def _run(self, x):\n        self.out = x\n        return x\n"
        "    def forward(self, x):"),
    model("global _CACHE\n_CACHE = ext.f(x)\nreturn _CACHE"),
    model("_CACHE[id(x)] = y = ext.f(x)\nreturn y", extra="_CACHE = {}\n"),
    model("y = ext.f(x)\nself.buf.copy_(y)\nreturn self.buf"),
    model("return run(x)", extra="import functools\n@functools.lru_cache(None)\ndef run(x):\n    return ext.f(x)\n"),
    model("return x").replace("def forward(self, x):", "def forward(self, x, _seen={}):"),
    model("setattr(self, 'last', x)\nreturn x"),
], [
    model("return ext.f(x)", init_body="self.cache = {}\nself.w = nn.Parameter(torch.randn(3))"),
    model("out = ext.f(x)\nout[out < 0] = 0\nparts = []\nparts.append(out)\nreturn parts[0]"),
    HEADER + "class ModelNew(nn.Module):\n    def reset(self):\n        self.n = 0\n    def forward(self, x):\n"
             "        return x\n",
])
WARN += _cases("no_custom_code", [
    model("return torch.relu(x)"),
    HEADER + "w = torch.load('w.pt')\nclass ModelNew(nn.Module):\n    pass\n",  # torch.load is not a build
], [
    HONEST_CUDA, HONEST_TRITON, HONEST_CPP,
    HEADER + "ext = torch.utils.cpp_extension.load_inline('k', 'src', functions=['f'])\n",
    "import torch.utils.cpp_extension as ce\next = ce.load(name='k', sources=['k.cu'])\n",
    "from torch.utils import cpp_extension\next = cpp_extension.load_inline('k', 's')\n",
    "from triton import jit\n@jit\ndef k(p):\n    pass\n",
])
WARN += _cases("torch_compute_in_forward", [
    model("return torch.matmul(x, self.w)"),
    model("return F.linear(x, self.w)"),
    model("return x @ self.w"),
    model("return self.conv(x)", init_body="self.conv = nn.Conv2d(3, 8, 3)"),
    model("return x.softmax(-1)"),
    model("return fn.layer_norm(x, x.shape[-1:])", extra="import torch.nn.functional as fn\n"),
    model("return self.ref(x)", init_body="self.ref = Model()"),
    model("return helper(x)", extra="def helper(x):\n    return torch.bmm(x, x)\n"),
], [
    model("return ext.matmul(x, self.w)", extra="from torch.utils.cpp_extension import load_inline\n"
                                                  "ext = load_inline('m', 's', functions=['matmul'])\n"),
    model("return self.ext.conv2d(x)",
          init_body="self.ext = torch.utils.cpp_extension.load_inline('m', 's', functions=['conv2d'])"),
    model("return F.relu(x + self.b)"),
    model("return ext.f(x)",
          init_body="self.lin = nn.Linear(3, 3)\ny = torch.matmul(self.lin.weight, self.lin.weight)"),
])
WARN += _cases("guarded_build", [
    HEADER + "from torch.utils.cpp_extension import load_inline\ntry:\n    ext = load_inline('k', 's')\n"
             "except Exception:\n    ext = None\n",
    model("return x", init_body="try:\n    self.ext = torch.utils.cpp_extension.load_inline('k', 's')\n"
                                "except Exception:\n    self.ext = None"),
], [
    HEADER + "from torch.utils.cpp_extension import load_inline\ntry:\n    ext = load_inline('k', 's')\n"
             "except Exception as e:\n    raise RuntimeError('build failed') from e\n",
    HEADER + "try:\n    import triton\nexcept ImportError:\n    triton = None\n",
])
WARN += _cases("uninitialized_output", [
    model("out = torch.empty_like(x)\nreturn out"),
    model("return torch.empty(x.shape, device=x.device)"),
    model("out = x.new_empty(x.shape)\nn = out.numel()\nreturn out"),
    model("out = el(x).contiguous()\nreturn out, x", extra="from torch import empty_like as el\n"),
    model("out = torch.empty_like(x)\nreturn out.view(-1)"),
    model("return torch.Tensor(*x.shape)"),
    model("return torch.cuda.FloatTensor(x.numel())"),
], [
    model("out = torch.empty_like(x)\next.f(x, out)\nreturn out"),
    model("out = torch.empty_like(x)\nkernel[(1,)](x, out, x.numel())\nreturn out"),
    model("out = torch.empty_like(x)\nout.copy_(ext.f(x))\nreturn out"),
    model("out = torch.empty_like(x)\nout[:] = ext.f(x)\nreturn out"),
    model("out = torch.empty_like(x)\nout = ext.f(x, out=out)\nreturn out"),
    model("out = torch.zeros_like(x)\nreturn out"),
    model("out = torch.empty_like(x)\next.f(x, out)\nreturn out.view(-1)"),
    model("return torch.Tensor([1.0, 2.0])"),
])
WARN += _cases("timing_keywords", [
    "import time\nt0 = time.perf_counter()\n",
    "from time import perf_counter as pc\n",
    HEADER + "start = torch.cuda.Event(enable_timing=True)\n",
    "def f(a, b):\n    return a.elapsed_time(b)\n",
    HEADER + "sync = torch.cuda.synchronize\n",
    HEADER + "torch.cuda.current_stream().synchronize()\n",
    "import time as t\nnow = t.time()\n",
    'src = """\ncudaEventElapsedTime(&ms, a, b);\n"""\n',
], [
    HEADER + "torch.cuda.synchronize()\n",
    "from torch.cuda import synchronize\nsynchronize()\n",
    "import time\n",
    'src = """\ncudaDeviceSynchronize();\n"""\n',
])


@pytest.mark.parametrize("rule,source,expected", WARN)
def test_warning_rule(rule: str, source: str, expected: bool) -> None:
    findings = [f for f in check_source(source) if f.rule == rule]
    assert bool(findings) == expected, (rule, findings)
    assert all(f.severity == "warning" for f in findings)


def test_guarded_build_alone_is_not_strict() -> None:
    source = HONEST_CUDA.replace("bias_relu = load_inline(", "try:\n    bias_relu = load_inline(").replace(
        '    verbose=False,\n)\n', '    verbose=False,\n)\nexcept Exception:\n    bias_relu = None\n')
    findings = check_source(source)
    assert {f.rule for f in findings} == {"guarded_build"}
    assert findings[0].severity == "warning" and findings[0].line is not None


def test_line_numbers_point_at_the_offence() -> None:
    source = "import torch\nimport torch.cuda as tc\n\n\ntc.synchronize = print\n"
    [hit] = [f for f in check_source(source) if f.rule == "monkeypatch"]
    assert hit.line == 5
    source = 'x = 1\nsrc = """\nline a\nline b\ncudaStreamCreate(&s);\n"""\n'
    [hit] = [f for f in check_source(source) if f.rule == "stream_use"]
    assert hit.line == 5


def test_findings_are_strict_first_and_typed() -> None:
    source = model("import os\nos.system('x')\nreturn torch.matmul(x, x)")
    findings = check_source(source)
    assert all(isinstance(f, Finding) for f in findings)
    severities = [f.severity for f in findings]
    assert severities == sorted(severities, key=lambda s: s != "strict")
    assert {"concurrency", "torch_compute_in_forward"} <= {f.rule for f in findings}


# --- robustness ----------------------------------------------------------------------------

ODD_SOURCES = [
    "", "\n\n", "pass", "x = (", "\x00", "def f(:\n", "ModelNew = lambda: 0",
    "match x:\n    case [a, *b] if a:\n        pass\n    case {'k': v, **rest}:\n        pass\n"
    "    case _:\n        pass\n",
    "async def forward(self, x):\n    async with a as b:\n        async for c in d:\n            await e\n",
    "class ModelNew:\n    forward = lambda self, x: x\n    def __call__(self, *a, **k):\n        return self(*a)\n",
    "try:\n    pass\nexcept* ValueError:\n    import torch\n    torch.relu(1)\n",
    "def f():\n    try:\n        pass\n    except* (ValueError, TypeError):\n        return torch.relu(1)\n",
    "x = " + "a." * 3000 + "b\n",
    "x = " + "(" * 150 + "1" + ")" * 150 + "\n",
    "[x for x in y if (z := x)]\nf'{a!r:{b}}'\n",
    "class A(B, metaclass=M, **kw):\n    del x.y, z[0]\n    (a, *b), c = d\n",
    "@(lambda f: f)\ndef g(a, /, b=[], *c, d={}, **e): yield from a\n",
    "getattr()\nsetattr()\ntype()\nvars()\nopen()\n",
    "class ModelNew(nn.Module):\n    def forward(x):\n        return x\n",  # no self parameter
    "class ModelNew(nn.Module):\n    def forward():\n        self.a = 1\n",
    "import torch.cuda\ntorch = torch\ntorch.x = 1\n",
    "a = b\nb = a\na.x = 1\n",  # rename cycle
    "del ModelNew\nModelNew: int\n",
]


@pytest.mark.parametrize("source", ODD_SOURCES)
def test_odd_code_never_raises(source: str) -> None:
    findings = check_source(source)
    assert isinstance(findings, list) and all(f.rule in RULES for f in findings)
    assert not any("could not be checked" in f.message for f in findings), findings


def test_a_crashing_rule_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: object) -> list:
        raise RuntimeError("bug in a rule")
    monkeypatch.setitem(static_checks._CHECKS, "monkeypatch", boom)
    findings = check_source(HONEST_CUDA)
    assert [(f.rule, f.severity) for f in findings] == [("monkeypatch", "strict")]


def _fixture_dirs() -> list[Path]:
    root = Path(__file__).resolve().parents[2]
    return [d for d in (root / "shared" / "fixtures" / "small-model-answers",
                        root.parent / "shared" / "fixtures" / "small-model-answers") if d.is_dir()]


def _small_model_answers() -> list[Path]:
    dirs = _fixture_dirs()
    return sorted(dirs[0].glob("*.txt")) if dirs else []


@pytest.mark.skipif(not _small_model_answers(), reason="shared small-model fixtures not present")
@pytest.mark.parametrize("path", _small_model_answers(), ids=lambda p: p.name)
def test_real_small_model_answers_never_raise(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)(?:```|\Z)", text, re.DOTALL)  # some answers are cut off unclosed
    assert match, path
    code = match.group(1)
    findings = check_source(code)
    assert all(isinstance(f, Finding) and f.rule in RULES for f in findings)
    assert not any("could not be checked" in f.message for f in findings)
    try:
        ast.parse(code)
    except SyntaxError:
        assert findings == []  # syntax errors are reported by the evaluator, not here
    else:
        assert "missing_modelnew" not in {f.rule for f in findings}  # every answer defines ModelNew


def test_stdlib_sources_never_raise() -> None:
    """Real, varied Python: the rules must not crash on constructs no candidate has used yet."""
    lib = Path(ast.__file__).parent
    files = sorted(lib.glob("*.py"))[::4]
    assert files
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
            ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        findings = check_source(source)
        assert not any("could not be checked" in f.message for f in findings), (path, findings)
