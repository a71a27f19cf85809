"""The corpus and the BM25 researcher's tool (kernelwright.knowledge.retrieval)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import re
from pathlib import Path

import pytest

from kernelwright.knowledge import retrieval as R

NOTES = R.notes()
BY_ID = {n.id: n for n in NOTES}

# Each required topic, the note that covers it, and phrases the note must contain (case-insensitive).
REQUIRED_TOPICS = {
    "load-inline": ["cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
                    "extra_include_paths", "build_directory", "verbose", "with_cuda", "is_python_module",
                    "no `sources=`", "PYBIND11_MODULE", "#include <torch/extension.h>",
                    "#include <ATen/cuda/CUDAContext.h>", "#include <c10/cuda/CUDAException.h>",
                    "at::cuda::getCurrentCUDAStream()", "C10_CUDA_KERNEL_LAUNCH_CHECK()"],
    "cuda-elementwise": ["TORCH_CHECK", ".contiguous()", "torch::empty_like", "threads", "blocks", "<<<",
                         "getCurrentCUDAStream()", "C10_CUDA_KERNEL_LAUNCH_CHECK()", "class ModelNew"],
    "cpu-cpp-openmp": ["#pragma omp parallel for", 'extra_cflags=["-O3", "-fopenmp"]', 'extra_ldflags=["-fopenmp"]',
                       "data_ptr<float>()"],
    "triton-basics": ["@triton.jit", "tl.program_id", "tl.arange", "mask", "tl.load", "tl.store", "triton.cdiv",
                      "lambda meta", "tl.constexpr", "BLOCK_SIZE"],
    "memory-coalescing": ["coalesc", "threadIdx.x", "contiguous", "transpose", "bank"],
    "vectorized-loads": ["float4", "16-byte aligned", "tail", "reinterpret_cast"],
    "reductions-warp-shuffle": ["__shfl_down_sync(0xffffffff, v, offset)", "__shared__", "__syncthreads()",
                                "one block per row", "block_sum"],
    "epilogue-fusion": ["cuBLAS", "cuDNN", "memory-bound", "one kernel", "same order", "weights"],
    "online-softmax": ["online", "max", "rescale", "log-softmax", "numerically", "-inf"],
    "numerics-tolerances": ["1e-4", "1e-2", "fp32", "accumulate", "erff", "tanhf", "expf", "logf", "log1pf",
                            "TF32", "allow_tf32 = False"],
    "build-errors": ["unexpected keyword argument 'sources'", "missing", "#include <ATen/cuda/CUDAContext.h>",
                     'identifier "relu" is undefined', "fmaxf", "not declared", "PYBIND11_MODULE",
                     "at::Tensor", "torch::Tensor", "double", "data_ptr<float>()"],
    "activation-formulas": ["gelu", "erff", "tanh", "silu", "swish", "mish", "hardswish", "softplus", "threshold",
                            "sigmoid", "clamp"],
    "layernorm-rmsnorm": ["layernorm", "rmsnorm", "welford", "two passes", "eps", "biased"],
    "broadcast-indexing": ["nchw", "(i / HW) % C", "per-channel", "bias"],
}


# --- the corpus --------------------------------------------------------------------------------


def test_corpus_has_at_least_twelve_notes():
    assert len(NOTES) >= 12
    assert [n.id for n in NOTES] == sorted(n.id for n in NOTES)


@pytest.mark.parametrize("note", NOTES, ids=[n.id for n in NOTES])
def test_note_is_well_formed(note):
    assert note.title and len(note.tags) >= 3, "a title and at least three tags"
    assert 150 <= note.words <= 600, f"{note.id}: {note.words} words, keep notes 150-600"
    assert note.sections and all(s.text.strip() for s in note.sections)
    assert len({s.title for s in note.sections}) == len(note.sections), "section titles repeat"
    assert note.body.count("```") % 2 == 0, "an unclosed code fence"


def test_titles_are_unique():
    assert len({n.title for n in NOTES}) == len(NOTES)


@pytest.mark.parametrize("note_id", sorted(REQUIRED_TOPICS))
def test_required_topic_is_covered(note_id):
    assert note_id in BY_ID, f"missing note {note_id}"
    body = BY_ID[note_id].body.lower()
    missing = [phrase for phrase in REQUIRED_TOPICS[note_id] if phrase.lower() not in body]
    assert not missing, f"{note_id} lacks {missing}"


def test_notes_teach_no_wrong_api():
    """Things a small model would copy that do not exist or are wrong, outside `text` blocks
    (where an error example may show them on purpose)."""
    wrong = [r"\bsources\s*=", r"\bextra_cuda_flags\s*=", r"\bextra_cxx_cflags\s*=", r"\btl\.tanh\b",
             r"\btl\.log1p\b", r"__shfl_down\(", r"\bload_inline\([^)]*\bverbose=1\b"]
    for note in NOTES:
        code = re.sub(r"```text\n.*?```", "", note.body, flags=re.S)
        code = re.sub(r"`[^`\n]*`", "", code)  # inline code in prose names wrong things to avoid them
        for pattern in wrong:
            assert not re.search(pattern, code), f"{note.id} shows {pattern}"


# --- search ------------------------------------------------------------------------------------


def test_load_inline_error_query_finds_build_errors_and_load_inline():
    hits = R.search("load_inline unexpected keyword sources")
    assert hits[0].note_id in {"build-errors", "load-inline"}
    assert {h.note_id for h in hits[:3]} <= {"build-errors", "load-inline"}
    assert hits[0].note_id == "build-errors" and hits[0].section == "Wrong keyword arguments"


def test_warp_shuffle_query_finds_reductions():
    hits = R.search("warp shuffle reduction")
    assert hits[0].note_id == "reductions-warp-shuffle"


@pytest.mark.parametrize("query, note_id", [
    ("float4 vectorized load alignment", "vectorized-loads"),
    ("online softmax max sum rescale", "online-softmax"),
    ("log_softmax numerically stable", "online-softmax"),
    ("#pragma omp parallel for -fopenmp", "cpu-cpp-openmp"),
    ("triton program_id mask tl.load", "triton-basics"),
    ("per-channel bias NCHW index", "broadcast-indexing"),
    ("fuse epilogue after conv cuDNN", "epilogue-fusion"),
    ("tolerance atol rtol TF32", "numerics-tolerances"),
    ("identifier relu is undefined", "build-errors"),
    ("hardswish mish softplus formula", "activation-formulas"),
    ("layernorm variance eps", "layernorm-rmsnorm"),
    ("coalesced memory access transpose", "memory-coalescing"),
    ("half bf16 AT_DISPATCH scalar_t", "half-precision"),
    ("triton softmax per row next_power_of_2", "triton-row-kernels"),
    ("elementwise CUDA kernel load_inline example", "cuda-elementwise"),
])
def test_query_finds_its_note_first(query, note_id):
    if note_id not in BY_ID:
        pytest.skip(f"no note {note_id}")
    assert R.search(query)[0].note_id == note_id


def test_search_hits_are_sections_with_scores():
    hits = R.search("warp shuffle reduction", k=5)
    assert len(hits) == 5
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for h in hits:
        note = BY_ID[h.note_id]
        assert h.title == note.title and h.section in {s.title for s in note.sections} and h.text


def test_search_edge_cases():
    assert R.search("") == []
    assert R.search("the of and") == []  # stopwords only
    assert R.search("zzzqqq xxyyzz") == []
    assert R.search("softmax", k=0) == []


def test_tokenizer_splits_identifiers_and_stems_words():
    toks = R.tokenize("load_inline getCurrentCUDAStream __shfl_down_sync reductions")
    assert {"load_inline", "load", "inlin", "get", "current", "cuda", "stream", "shfl_down_sync", "shfl",
            "reduct"} <= set(toks)


# --- brief -------------------------------------------------------------------------------------

QUERIES = ["load_inline unexpected keyword sources", "warp shuffle reduction", "online softmax"]


def test_brief_cites_its_sources():
    b = R.brief(QUERIES)
    assert b.text and b.sources
    assert [s.n for s in b.sources] == list(range(1, len(b.sources) + 1))
    headers = re.findall(r"^\[(\d+)\] (.+) › (.+)$", b.text, re.M)
    assert len(headers) == len(b.hits)
    by_n = {s.n: s for s in b.sources}
    for (n, title, section), hit in zip(headers, b.hits, strict=True):
        assert by_n[int(n)].title == title == hit.title and by_n[int(n)].note_id == hit.note_id
        assert section == hit.section
    assert {int(n) for n, _, _ in headers} == set(by_n), "every source is cited and every citation listed"
    assert str(b.sources[0]) == f"[1] {b.sources[0].note_id}: {b.sources[0].title}"
    cited = {s.note_id for s in b.sources}
    assert {"build-errors", "reductions-warp-shuffle", "online-softmax"} <= cited


def test_brief_has_no_duplicate_sections():
    b = R.brief(QUERIES + QUERIES, k_per_query=4, max_chars=100_000)
    keys = [(h.note_id, h.section) for h in b.hits]
    assert len(keys) == len(set(keys))


def test_brief_puts_sections_found_by_several_queries_first():
    b = R.brief(["warp shuffle reduction", "__shfl_down_sync block reduce shared memory"], max_chars=100_000)
    assert b.hits[0].note_id == "reductions-warp-shuffle"


@pytest.mark.parametrize("max_chars", [0, 50, 300, 700, 1500, 4000, 9000])
def test_brief_respects_the_budget(max_chars):
    b = R.brief(QUERIES, k_per_query=4, max_chars=max_chars)
    assert len(b.text) <= max_chars
    assert b.text.count("```") % 2 == 0, "a cut excerpt must close its code block"
    if max_chars >= 1500:
        assert b.hits


def test_brief_trims_an_excerpt_rather_than_leave_room_unused():
    full = R.brief(["warp shuffle reduction"], k_per_query=1, max_chars=100_000)
    size = len(full.text)
    cut = R.brief(["warp shuffle reduction"], k_per_query=1, max_chars=size - 200)
    assert cut.text.endswith(R._TRIM_MARKER) and len(cut.text) <= size - 200
    assert cut.text.count("```") % 2 == 0


def test_brief_is_deterministic_and_serializable():
    a, b = R.brief(QUERIES), R.brief(QUERIES)
    assert a == b
    R.cache_clear()
    assert R.brief(QUERIES) == a  # a rebuilt index gives the same answer
    data = json.loads(a.model_dump_json())
    assert data["sources"][0]["n"] == 1


def test_brief_of_nothing_is_empty():
    b = R.brief([])
    assert b.text == "" and b.sources == [] and b.hits == []
    assert R.brief(["   ", ""]).text == ""


# --- notes from another folder: parsing and ties -----------------------------------------------


def _write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.md").write_text(text)


NOTE = """---
title: {title}
tags: [alpha, beta]
---

Intro about widgets.

## Widgets

Widgets spin.

```python
## not a heading: a comment inside code
x = 1
```

## Gadgets

Gadgets hum.
"""


def test_sections_split_at_headings_outside_code(tmp_path):
    _write(tmp_path, "one", NOTE.format(title="One"))
    (note,) = R.notes(tmp_path)
    assert note.title == "One" and note.tags == ("alpha", "beta")
    assert [s.title for s in note.sections] == ["Widgets", "Gadgets"]
    assert note.sections[0].text.startswith("Intro about widgets.")  # the intro joins the first section
    assert "## not a heading" in note.sections[0].text


def test_equal_scores_are_ordered_by_note_id(tmp_path):
    for name in ("b-note", "a-note", "c-note"):
        _write(tmp_path, name, NOTE.format(title="Same"))
    hits = R.search("gadgets hum", k=3, notes_dir=tmp_path)
    assert [h.note_id for h in hits] == ["a-note", "b-note", "c-note"]
    assert len({h.score for h in hits}) == 1


def test_a_note_without_front_matter_is_an_error(tmp_path):
    _write(tmp_path, "bad", "# no front matter\n\ntext\n")
    with pytest.raises(R.NoteFormatError):
        R.notes(tmp_path)


def test_bm25s_is_imported_without_jax(tmp_path):
    """bm25s runs a JAX op at import when JAX is installed, and JAX then reserves most of a GPU's
    memory in this process; the retrieval module keeps JAX out. A stand-in `jax` package that
    records being imported shows whether bm25s reached it (in a child: bm25s loads once per process)."""
    fake = tmp_path / "jax"
    fake.mkdir()
    (fake / "__init__.py").write_text("import os\nopen(os.environ['KW_JAX_MARK'], 'w').write('imported')\n")
    (fake / "lax.py").write_text("def top_k(x, k):\n    return x[:k], list(range(k))\n")
    mark = tmp_path / "mark"
    code = ("import sys\nfrom kernelwright.knowledge import retrieval\nretrieval.search('shared memory tiling', 2)\n"
            "print('jax' in sys.modules)\n")
    env = {**os.environ, "KW_JAX_MARK": str(mark),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False" and not mark.exists()
    # the stand-in is importable on that path: without the guard, bm25s would have imported it
    p = subprocess.run([sys.executable, "-c", "import bm25s"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0 and mark.exists(), p.stderr


def test_missing_names_what_to_install(monkeypatch):
    from kernelwright.strategies.config import RegimeError, check_runnable, parse_regime

    assert R.missing() == []
    monkeypatch.setitem(sys.modules, "bm25s", None)
    assert R.missing() == ["bm25s"]
    with pytest.raises(RegimeError, match="pip install bm25s"):
        check_runnable(parse_regime("agentic"))
    check_runnable(parse_regime("agentic+no_retrieval"))
    check_runnable(parse_regime("zero_shot"))
