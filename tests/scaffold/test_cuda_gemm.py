"""The CUDA gemm layout (writers/cuda_gemm.py): which plans the CUDA target takes it for, the program
around the region (launch settings, one extension for several regions, the view and words the model
gets), the pre-check, nvcc on every shape family at once (build), and the real evaluator on a GPU
(gpu): each family with the oracle's epilogue is correct, its wrong twin is not.

The shape families are small modules of tests/fixtures/tasks (and the built-in lone matmul): plain,
transposed operands, batched, nn.Linear with a bias and epilogue inputs, matrix times a one-column
matrix, fp16 batched with an epilogue, and a Linear whose tail no kernel here fuses.
"""

from __future__ import annotations

import itertools
import math
import re
import shutil

import pytest

from kernelwright.records import Verdict
from kernelwright.scaffold import (
    SegmentKind,
    assemble,
    default_launch,
    launch_variants,
    plan_tasks,
    precheck,
    region_grammar,
    shared_programs,
    with_launch,
    write,
)
from kernelwright.scaffold.oracle import region
from kernelwright.scaffold.writers import writer_for
from kernelwright.tasks import load_task
from tests.conftest import TASKS

MATMUL = "builtin/L1/10_matmul"
# the families whose plan has no segment of its own: the CUDA target takes the GEMM in
LONE = {"plain": MATMUL, "transposed": str(TASKS / "gemm_transposed.py"), "batched": str(TASKS / "gemm_bmm.py"),
        "matvec": str(TASKS / "gemm_matvec.py"), "linear_tail": str(TASKS / "gemm_max_tail.py")}
# the families with an epilogue kernel after the library's GEMM: CUDA keeps that plan, the gemm one
# is written for CUDA directly here
EPILOGUE = {"linear_epilogue": str(TASKS / "gemm_linear_epilogue.py"), "bmm_fp16": str(TASKS / "bmm_relu_fp16.py")}
FAMILIES = LONE | EPILOGUE


@pytest.fixture(scope="module")
def plans():
    return dict(zip(FAMILIES, plan_tasks([load_task(t) for t in FAMILIES.values()])))


def gemm_scaffold(plan):
    """The CUDA gemm skeleton of the plan's GEMM alternative, whichever plan CUDA picks for it."""
    return writer_for("cuda", SegmentKind.GEMM).write(plan.gemm, plan.gemm.segment)


def test_cuda_takes_the_gemm_where_the_plan_has_no_segment(plans) -> None:
    want = {"plain": (False, False, False), "transposed": (False, False, False), "batched": (False, True, False),
            "matvec": (False, False, True), "linear_tail": (True, False, False)}
    for family, (transposed, batched, one_column) in want.items():
        p = plans[family]
        assert not p.available and "no elementwise" in p.reason  # no kernel of its own before
        sc = write(p, "cuda")
        spec = sc.segment.gemm
        assert sc.available and sc.segment.kind == SegmentKind.GEMM and sc.segment.pass_through, family
        assert (spec.b_transposed, spec.batched, spec.n == 1) == (transposed, batched, one_column), family
        assert region(sc) == "y = x;" and sc.library_twin is None
        assert not write(p, "cpp").available  # C++ keeps the whole-program fallback
    # a GEMM with an epilogue kernel after it keeps that kernel on CUDA: the programs pinned by
    # test_program_digest.py are unchanged
    for family in EPILOGUE:
        p = plans[family]
        assert p.for_target("cuda") is p and write(p, "cuda").segment.kind == SegmentKind.ELEMENTWISE


def test_the_epilogue_reads_the_product_bias_and_inputs_per_element(plans) -> None:
    sc = gemm_scaffold(plans["linear_epilogue"])
    seg = sc.segment
    assert [(a.name, a.pattern) for a in seg.extras] == [("scale", "broadcast"), ("r", "same")]
    assert region(sc) == "y = fmaxf(((x * scale) + r), 0.0f);"
    program = sc.program
    assert "const float x = kw_acc[kw_i][kw_j] + static_cast<float>(kw_bias_ptr[kw_col]);" in program
    assert "const float scale = static_cast<float>(scale_ptr[i / scale_inner % scale_span]);" in program
    assert "const float r = static_cast<float>(r_ptr[i]);" in program
    assert "fused = kw_fused(x, linear_weight, linear_bias, scale, r)" in program
    assert "kw_b = kw_b.t()[None]  # [N, K] weight as [K, N]: a view" in program
    # fp32 in FFMA: no tensor cores, no TF32 (the judge counts a precision downgrade as wrong)
    assert "fmaf(kw_ra[kw_i], kw_rb[kw_j], kw_acc[kw_i][kw_j])" in program
    assert not re.search(r"wmma|mma\.|tf32|__half2float|cublas", program, re.I)
    # operands in their own dtype, converted as they are fetched; the product stored in the output's
    half = gemm_scaffold(plans["bmm_fp16"]).program
    assert "const at::Half* __restrict__ kw_a_ptr" in half and "out_ptr[i] = static_cast<at::Half>(y);" in half


def test_launch_settings_are_the_tile_side(plans) -> None:
    sc = write(plans["plain"], "cuda")
    assert default_launch(sc.segment, "cuda") == {"tile": 0, "split": 0}  # picked at launch from the SMs
    assert launch_variants(sc.segment, "cuda") == [{"tile": 128, "split": 0}, {"tile": 64, "split": 0},
                                                   {"tile": 0, "split": 1}]
    assert "KW_LAUNCH = {'tile': 0, 'split': 0}" in sc.program
    assert 'KW_LAUNCH["tile"], KW_LAUNCH["split"])' in sc.program
    assert "KW_LAUNCH = {'tile': 64, 'split': 1}" in with_launch(sc.program, {"tile": 64, "split": 1})
    for side, bk, t in ((128, 8, 8), (64, 16, 4)):
        for b_k in ("true", "false"):
            assert f"kw_go(kw_fused_kernel<{side}, {side}, {bk}, {t}, {t}, {b_k}>);" in sc.program


def test_several_regions_share_one_extension(plans) -> None:
    sc = gemm_scaffold(plans["linear_epilogue"])
    good, wrong = region(sc), region(sc, wrong=True)
    programs = shared_programs(sc, [good, wrong])
    assert programs is not None and len(programs) == 2
    first, second = programs
    # the kernel template and its host function in a namespace each, the tiles' helpers shared
    assert first.count("struct KwTile") == 1 and first.count("namespace kw_v1 {\ntemplate <int KW_BM") == 1
    assert good in first and "+ 1.0f" in first
    assert "kw_ext.kw_fused_impl_v0(" in first and "kw_ext.kw_fused_impl_v1(" in second
    # the extension (sources, name, flags) is the same text in both: one build serves them
    assert first.split("\ndef kw_fused(")[0] == second.split("\ndef kw_fused(")[0]


def test_the_model_sees_one_element_and_the_names_it_reads(plans) -> None:
    sc = gemm_scaffold(plans["linear_epilogue"])
    assert set(re.findall(r"\bkw_\w+", sc.kernel_view)) <= {"kw_fused_kernel"}
    assert "REGION BEGIN" in sc.kernel_view and "the loop over K computes x" in sc.kernel_view
    assert sc.variables[0].startswith("`x` (float, this thread's output element): the GEMM's result, "
                                      "`x = self.linear(x)` above, its bias included")
    assert [v.split("`")[1] for v in sc.variables[1:4]] == ["scale", "r", "y"]
    grammar = region_grammar(sc)
    assert '"scale"' in grammar and '"r"' in grammar and "(j)" not in grammar  # elementwise names, no row loop
    got = assemble(sc, "```cuda\nfloat y = fmaxf(x * scale + r, 0.0f);\n```")
    assert got.region == "y = fmaxf(x * scale + r, 0.0f);" and got.code == sc.program_with(got.region)


def test_the_precheck_runs_a_cuda_gemm_region_as_its_epilogue(plans) -> None:
    p = plans["linear_epilogue"].gemm
    sc = gemm_scaffold(plans["linear_epilogue"])
    assert precheck(p, "cuda", region(sc)).status.value == "pass"
    assert precheck(p, "cuda", region(sc, wrong=True)).status.value == "counterexample"
    assert precheck(plans["plain"], "cuda", "y = x;").status.value == "pass"
    assert precheck(plans["plain"], "cpp", "y = x;").status.value == "unsupported"  # no C++ plan for it


# ---- nvcc: every family in one translation unit (one compile of torch's headers for all) ---------

def _combined(scaffolds: dict) -> tuple[str, str, list[str]]:
    """(cpp source, cuda source, bound function names): each family's kernel template and host
    function, oracle region in, in a namespace of its own after the helpers they share."""
    head = writer_for("cuda", SegmentKind.GEMM).kernel_head
    prefix, chunks, decls, names = None, [], [], []
    for family, sc in scaffolds.items():
        source = re.search(r'KW_CUDA_SOURCE = r"""\n(.*?)"""', sc.program_with(region(sc)), re.S).group(1)
        start = source.index(head)
        assert prefix in (None, source[:start])  # the helpers are the same text in every program
        prefix = source[:start]
        chunks.append(f"namespace {family} {{\n{source[start:]}}}\n")
        decl = re.search(r"torch::Tensor kw_fused_impl\(([^)]*)\)", source)
        params = decl.group(1)
        call = ", ".join(p.split()[-1] for p in params.split(","))
        decls.append(f"namespace {family} {{ torch::Tensor kw_fused_impl({params}); }}\n"
                     f"torch::Tensor {family}_impl({params}) {{ return {family}::kw_fused_impl({call}); }}")
        names.append(f"{family}_impl")
    return "\n".join(decls), prefix + "\n".join(chunks), names


@pytest.fixture(scope="module")
def compiled(plans):
    """Every family's CUDA program compiled by nvcc against torch's headers, once (compile-only: the
    CPU build of torch cannot link CUDA); the error text where it failed."""
    from kernelwright.evaluate.compile_only import BuildFailed, objects_only_load_inline
    from kernelwright.scaffold.writers.cuda import CUDA_FLAGS

    scaffolds = {f: gemm_scaffold(p) for f, p in plans.items()}
    cpp, cuda, names = _combined(scaffolds)
    try:
        objects_only_load_inline(name="kw_cuda_gemm_families", cpp_sources=cpp, cuda_sources=cuda, functions=names,
                                 extra_cuda_cflags=CUDA_FLAGS)
    except BuildFailed as e:
        return cuda, e.log
    return cuda, ""


@pytest.mark.build
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_shape_family_compiles_with_nvcc(family, compiled) -> None:
    cuda, errors = compiled
    assert f"namespace {family} {{" in cuda
    assert not errors, errors[-3000:]


# ---- on a GPU: the evaluator's verdicts --------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_shape_family_is_judged_correct_on_a_gpu(family, plans, fast_cfg) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    from kernelwright.evaluate import evaluate

    task = load_task(FAMILIES[family])
    sc = gemm_scaffold(plans[family])
    good, wrong = shared_programs(sc, [region(sc), region(sc, wrong=True)])  # one build for both
    cfg = fast_cfg(device="cuda", iters=10, warmup=2, timeout=900.0)
    for side in (128, 64):  # both tiles, on the same build
        got = evaluate(task, with_launch(good, {"tile": side}), cfg)
        assert got.verdict == Verdict.CORRECT and got.custom_kernel, (side, got.verdict, got.error, got.mismatch)
    bad = evaluate(task, wrong, cfg)
    assert bad.verdict == Verdict.WRONG_OUTPUT, (bad.verdict, bad.error)


# ---- on the host: the kernel template run block by block (the pre-check's CUDA shim) -------------

HOST_SIZES = [(2, 70, 45, 37), (1, 132, 136, 64)]  # (batch, M, N, K): edges and scalar fetches; aligned
HOST_EXTRA = r'''
#define __align__(n) __attribute__((aligned(n)))
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline float __ldcg(const float* p) { return *p; }
static inline unsigned atomicAdd(unsigned* a, unsigned v) {
    pthread_mutex_lock(&kw_atomic); unsigned o = *a; *a += v; pthread_mutex_unlock(&kw_atomic); return o; }
struct kw_id3 { unsigned t; dim3 b; };
static void* kw_thread3(void* p) {
    const kw_id3* id = static_cast<const kw_id3*>(p);
    threadIdx.x = id->t; blockIdx = id->b;
    kw_body();
    return nullptr;
}
// a 3-D grid, one block at a time, its threads as host threads (the shim's launch is 1-D)
static void kw_launch3(dim3 grid, unsigned threads, void (*body)(void)) {
    static pthread_t ts[1024];
    static kw_id3 ids[1024];
    blockDim.x = threads; gridDim = grid; kw_body = body;
    pthread_attr_t attr; pthread_attr_init(&attr); pthread_attr_setstacksize(&attr, 1 << 20);
    for (unsigned z = 0; z < grid.z; ++z) for (unsigned y = 0; y < grid.y; ++y) for (unsigned x = 0; x < grid.x; ++x) {
        pthread_barrier_init(&kw_bar, nullptr, threads);
        for (unsigned t = 0; t < threads; ++t) { ids[t] = {t, {x, y, z}}; pthread_create(&ts[t], &attr, kw_thread3, &ids[t]); }
        for (unsigned t = 0; t < threads; ++t) pthread_join(ts[t], nullptr);
        pthread_barrier_destroy(&kw_bar);
    }
}
static float kw_rand(uint64_t& s) { s = s * 6364136223846793005ull + 1442695040888963407ull; return ((s >> 40) / 16777216.0f) * 2 - 1; }
'''


def _host_case(name: str, family: str, seg, batch: int, m: int, n: int, k: int, side: int, b_k: bool,
               splits: int) -> str:
    """C++ that runs one kernel instance on random operands (B K-contiguous or N-contiguous, K in
    `splits` shares), the region adding each extra input times a weight of its own, and returns its
    largest error against the product summed in double."""
    from kernelwright.scaffold.writers.cuda_gemm import TILES

    bk, t = TILES[side]
    size = {"same": batch * m * n, "broadcast": n, "scalar": 1}  # a broadcast extra: a vector along N
    ptrs = ["g_a.data()", "g_b.data()"] + (["g_bias.data()"] if seg.gemm.bias is not None else [])
    ksplit = max(bk, math.ceil(math.ceil(k / splits) / bk) * bk)  # the host's rounding: whole K steps
    splits, tiles = math.ceil(k / ksplit), batch * math.ceil(m / side) * math.ceil(n / side)
    decls = [f"std::vector<float> g_a({batch * m * k}), g_b({batch * k * n}), g_bias({n}), g_out({batch * m * n});",
             f"std::vector<float> g_part({splits * tiles * side * side if splits > 1 else 1});",
             f"std::vector<unsigned> g_count({tiles});"]
    ref = ["double s = 0; for (int64_t q = 0; q < K; ++q) s += (double)g_a[(bt * M + r) * K + q] * B(q);"]
    if seg.gemm.bias is not None:
        ref.append("s += g_bias[c];")
    for w, a in enumerate(seg.extras, start=2):
        decls.append(f"std::vector<float> g_{a.name}({size[a.pattern]});")
        ptrs += [f"g_{a.name}.data()"] + (["1", str(n)] if a.pattern == "broadcast" else [])
        at = {"same": "i", "broadcast": "c", "scalar": "0"}[a.pattern]
        ref.append(f"s += {w}.0 * g_{a.name}[{at}];")
    strides = f"{m * k}, {k}, {k * n}, " + (f"1, {k}" if b_k else f"{n}, 1")
    call = f"{family}::kw_fused_kernel<{side}, {side}, {bk}, {t}, {t}, {'true' if b_k else 'false'}>"
    b_at = "(bt * N + c) * K + q" if b_k else "(bt * K + q) * N + c"
    fill = "".join(f"    for (auto& v : {d.split('(')[0].split()[-1]}) v = kw_rand(seed);\n" for d in decls[3:])
    return (f"static double {name}() {{\n    const int64_t M = {m}, N = {n}, K = {k};\n"
            + "".join(f"    static {d}\n" for d in decls)
            + "    uint64_t seed = 7;\n    for (auto* v : {&g_a, &g_b, &g_bias}) for (auto& x : *v) x = kw_rand(seed);\n" + fill
            + f"    kw_launch3({{{(n + side - 1) // side}, {(m + side - 1) // side}, {batch * splits}}}, 256, [] {{\n"
            f"        {call}({', '.join(ptrs + ['g_out.data()'])}, {m}, {n}, {k}, {strides},\n"
            f"            {'g_part.data(), g_count.data()' if splits > 1 else 'nullptr, nullptr'}, {splits}, {ksplit}); }});\n"
            f"    double worst = 0;\n    for (int64_t bt = 0; bt < {batch}; ++bt) for (int64_t r = 0; r < M; ++r) for (int64_t c = 0; c < N; ++c) {{\n"
            f"        const int64_t i = (bt * M + r) * N + c;\n        auto B = [&](int64_t q) {{ return (double)g_b[{b_at}]; }};\n"
            + "".join(f"        {line}\n" for line in ref)
            + "        worst = std::max(worst, std::fabs(s - g_out[i]) / (1.0 + std::fabs(s)));\n    }\n    return worst;\n}\n")


def _host_unit(plans) -> tuple[str, list[str]]:
    """One C++ unit: the shim, the helpers, every family's kernel template (its region the extras'
    weighted sum) in a namespace of its own, and a case per size, tile and layout of B; the names of
    the cases."""
    from kernelwright.scaffold.precheck.native_shim import COMMON, CUDA_SHIM
    from kernelwright.scaffold.writers.base import PLACEHOLDER
    from kernelwright.scaffold.writers.cuda import CUDA_IO
    from kernelwright.scaffold.writers.cuda_gemm import GEMM_TILES, cuda_gemm_kernel

    parts, cases = [COMMON, CUDA_SHIM, HOST_EXTRA, CUDA_IO, GEMM_TILES], []
    for family, plan in plans.items():
        seg = gemm_scaffold(plan).segment
        kernel, indent = cuda_gemm_kernel(seg)
        body = "y = x" + "".join(f" + {w}.0f * {a.name}" for w, a in enumerate(seg.extras, start=2)) + ";"
        parts.append(f"namespace {family} {{\n{kernel.replace(indent + PLACEHOLDER, indent + body)}}}\n")
        for n, size in enumerate(HOST_SIZES):
            for side, b_k, splits in itertools.product((64, 128), (True, False), (1, 3) if n == 0 else (1,)):
                cases.append(f"{family}_{n}_{side}_{int(b_k)}_{splits}")
                parts.append(_host_case(cases[-1], family, seg, *size, side, b_k, splits))
    checks = "".join(f'    std::printf("%s %g\\n", "{c}", {c}());\n' for c in cases)
    return "\n".join(parts) + f"\nint main() {{\n{checks}    return 0;\n}}\n", cases


@pytest.mark.build  # the system's C++ compiler, no torch headers: seconds
def test_the_kernel_template_computes_the_gemm_on_the_host_shim(plans, tmp_path) -> None:
    """Every family's kernel, both tiles and both layouts of B, sizes off the tiles and aligned, K
    whole and in three shares (split K), run block by block with its threads as host threads (the pre-check's CUDA shim): the product,
    bias and extra inputs as a sum in double gives them, to fp32's rounding."""
    import subprocess

    from kernelwright.scaffold.precheck.native import COMPILER

    source, cases = _host_unit(plans)
    (tmp_path / "gemm.cpp").write_text(source)
    subprocess.run([COMPILER, "-std=gnu++20", "-O1", "-pthread", "-w", "gemm.cpp", "-o", "gemm"], cwd=tmp_path,
                   check=True, capture_output=True, text=True)
    out = subprocess.run(["./gemm"], cwd=tmp_path, check=True, capture_output=True, text=True, timeout=300).stdout
    errors = {name: float(err) for name, err in (line.split() for line in out.splitlines())}
    assert sorted(errors) == sorted(cases) and len(cases) == 12 * len(FAMILIES)
    assert max(errors.values()) < 1e-5, {c: e for c, e in errors.items() if e >= 1e-5}
