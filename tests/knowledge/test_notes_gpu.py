"""The notes' GPU code, run for real on a GPU (`gpu` marker; skipped without CUDA).

- Every complete CUDA or Triton program in the notes runs and passes its own check against PyTorch.
- Every stand-alone `cuda` block is launched through a small harness and compared with PyTorch.
- Every `tl.*`, `tl.math.*` and `triton.*` name the notes use exists in the installed Triton.

Builds are slow (nvcc over torch's headers); run them in parallel: `pytest -m gpu -n 8 tests/knowledge`.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
import torch
import torch.utils.cpp_extension as cpp_extension

from tests.knowledge import _harness as H
from tests.knowledge import _snippets as S

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

SNIPPETS = S.snippets()
GPU_PROGRAMS = [s for s in SNIPPETS if s.is_program and s.needs_gpu]
TRITON_BLOCKS = [s for s in SNIPPETS if s.uses_triton]


@pytest.mark.parametrize("snippet", GPU_PROGRAMS, ids=[s.label for s in GPU_PROGRAMS])
def test_gpu_program_runs_and_matches_torch(snippet, tmp_path):
    script = tmp_path / f"{snippet.note_id}_{snippet.ordinal}.py"
    script.write_text(snippet.code)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=850)
    assert proc.returncode == 0 and "ok" in proc.stdout.split(), \
        f"{snippet.label} failed:\n{S.first_errors(proc.stdout + proc.stderr, 60)}"


def _attribute_chains(tree: ast.AST, root: str) -> set[str]:
    chains = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, cur = [], node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id == root:
                chains.add(".".join(reversed(parts)))
    return chains


@pytest.mark.parametrize("snippet", TRITON_BLOCKS, ids=[s.label for s in TRITON_BLOCKS])
def test_triton_names_exist(snippet):
    triton = pytest.importorskip("triton")
    import triton.language as tl

    tree = ast.parse(snippet.code)
    missing = []
    for root, module in (("tl", tl), ("triton", triton)):
        for chain in sorted(_attribute_chains(tree, root)):
            obj = module
            for i, part in enumerate(chain.split(".")):
                if isinstance(obj, type(tl)) or i == 0:  # follow modules; stop at the first non-module
                    if not hasattr(obj, part):
                        missing.append(f"{root}.{chain}")
                        break
                    obj = getattr(obj, part)
    assert not missing, f"{snippet.label}: not in triton {triton.__version__}: {missing}"


def _build(name: str, cpp: str, cuda: str, functions: list[str], tmp_path) -> object:
    return cpp_extension.load_inline(name=name, cpp_sources=cpp, cuda_sources=cuda, functions=functions,
                                     extra_cuda_cflags=["-O3"], build_directory=str(tmp_path))


def test_activation_device_functions_match_pytorch(tmp_path):
    block = H.activation_block()
    ext = _build("kw_gpu_act", "torch::Tensor apply(torch::Tensor x, int64_t which);",
                 H.activation_cuda_source(block), ["apply"], tmp_path)
    x = H.activation_inputs("cuda")
    for i, (label, (call, reference)) in enumerate(H.ACTIVATIONS.items()):
        torch.testing.assert_close(ext.apply(x, i), reference(x), atol=1e-4, rtol=1e-4,
                                   msg=lambda m, label=label, call=call: f"{label} = {call}: {m}")


def test_coalescing_kernels(tmp_path):
    blocks = H.note_blocks("memory-coalescing")
    cuda = H.CUDA_HEADERS + "".join(H.with_lines(b) for b in blocks) + H.COALESCING_LAUNCHERS
    ext = _build("kw_gpu_coalescing", "torch::Tensor column_sum_launch(torch::Tensor x);\n"
                 "torch::Tensor transpose_launch(torch::Tensor x);", cuda,
                 ["column_sum_launch", "transpose_launch"], tmp_path)
    for rows, cols in [(1, 1), (33, 65), (1000, 777), (4096, 4096)]:
        x = torch.randn(rows, cols, device="cuda")
        torch.testing.assert_close(ext.column_sum_launch(x), x.sum(0), atol=1e-3, rtol=1e-4)
        assert torch.equal(ext.transpose_launch(x), x.t().contiguous())


def test_vectorized_kernels(tmp_path):
    (block,) = H.note_blocks("vectorized-loads")
    cuda = H.CUDA_HEADERS + H.with_lines(block) + H.VECTORIZED_LAUNCHERS
    ext = _build("kw_gpu_vec4", "torch::Tensor scale_launch(torch::Tensor x, double s);\n"
                 "bool is_aligned(torch::Tensor x);", cuda, ["scale_launch", "is_aligned"], tmp_path)
    base = torch.randn(1 << 20 | 7, device="cuda")
    assert ext.is_aligned(base) and not ext.is_aligned(base[1:])
    for n in [1, 3, 4, 5, 1001, 1 << 20, (1 << 20) + 3]:
        for x in (base[:n], base[1:n + 1]):  # aligned (vector path) and misaligned (scalar path)
            torch.testing.assert_close(ext.scale_launch(x, 1.5), x * 1.5)


def test_reduction_helpers(tmp_path):
    (block,) = H.note_blocks("reductions-warp-shuffle")
    cuda = H.CUDA_HEADERS + "#include <vector>\n" + H.with_lines(block) + H.REDUCTION_LAUNCHERS
    ext = _build("kw_gpu_reduce", "std::vector<torch::Tensor> reduce_launch(torch::Tensor x, int64_t threads);",
                 cuda, ["reduce_launch"], tmp_path)
    for threads in (32, 256, 1024):
        x = torch.randn(300, 5000, device="cuda")
        sums, squares, maxes = ext.reduce_launch(x, threads)
        torch.testing.assert_close(sums, x.sum(1), atol=1e-3, rtol=1e-4)
        torch.testing.assert_close(squares, (x * x).sum(1), atol=1e-3, rtol=1e-4)
        assert torch.equal(maxes, x.max(1).values)


def test_broadcast_channel_affine(tmp_path):
    (block,) = H.note_blocks("broadcast-indexing")
    cuda = H.CUDA_HEADERS + H.with_lines(block) + H.BROADCAST_LAUNCHERS
    ext = _build("kw_gpu_affine", "torch::Tensor affine_launch(torch::Tensor x, torch::Tensor scale, "
                 "torch::Tensor shift);", cuda, ["affine_launch"], tmp_path)
    x = torch.randn(3, 5, 7, 9, device="cuda")
    scale, shift = torch.randn(5, 1, 1, device="cuda"), torch.randn(5, device="cuda")
    torch.testing.assert_close(ext.affine_launch(x, scale, shift), x * scale + shift.view(1, 5, 1, 1))
