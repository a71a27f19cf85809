"""Grounding: each rule on small hand-written snippets (it fires, and it leaves correct code alone), the
real answers of the small models, garbage, idempotence, and one repaired answer compiled for real."""

from __future__ import annotations

import ast
import random
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from kernelwright.extract import extract_code
from kernelwright.grounding.ground import PASSES, RULES, GroundingReport, ground

ANSWERS = Path("/work/shared/fixtures/small-model-answers")
ANSWER_FILES = sorted(ANSWERS.glob("*.txt")) if ANSWERS.exists() else []

HEADER = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
KERNEL = textwrap.dedent('''\
    __global__ void scale_kernel(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 2.0f * x[i];
    }
    torch::Tensor scale(torch::Tensor x) {
        auto y = torch::empty_like(x);
        int n = x.numel();
        scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        return y;
    }
    ''')
GOOD = HEADER + f'cuda_src = """\n{KERNEL}"""\ncpp_src = "torch::Tensor scale(torch::Tensor x);"\n' + \
    textwrap.dedent('''\
    ext = load_inline(name="scale_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["scale"])


    class ModelNew(nn.Module):
        def forward(self, x):
            return ext.scale(x)
    ''')


def g(code: str, target: str = "cuda") -> GroundingReport:
    return ground(textwrap.dedent(code) if not code.startswith(HEADER) else code, target)


def repaired(report: GroundingReport) -> set[str]:
    return {r.rule for r in report.repairs}


def errors(report: GroundingReport, rule: str | None = None) -> list[str]:
    return [f.message for f in report.errors if rule is None or f.rule == rule]


def module_with(cuda: str, cpp: str = "", call: str = "", tail: str = "") -> str:
    call = call or 'ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["f"])'
    return HEADER + f'cuda_src = """\n{cuda}"""\ncpp_src = """\n{cpp}"""\n{call}\n\n\nclass ModelNew(nn.Module):\n' \
        f'    def forward(self, x):\n        return ext.f(x)\n{tail}'


# --- the table ---------------------------------------------------------------------------------------


def test_every_pass_is_a_named_rule():
    assert all(label in RULES for label, _ in PASSES)
    assert all(rule.kind in ("repair", "check") for rule in RULES.values())


def test_correct_code_is_left_alone():
    report = ground(GOOD)
    assert not report.changed and not report.repairs
    assert not report.errors, report.feedback()
    assert report.feedback() == ""


# --- syntax and truncation (rule 10) ------------------------------------------------------------------------


def test_truncated_answer_is_one_finding_and_no_repair():
    loop = "".join(f"#include <torch/nn/functional/upsample_{i}d.h>\n" for i in range(12))
    code = HEADER + 'cuda_src = """\n__global__ void k() { relu(1.0f); }\n"""\ncpp_src = """\n' + loop
    report = ground(code)
    assert not report.changed and not report.repairs
    assert len(report.findings) == 1 and report.findings[0].rule == "syntax"
    assert report.findings[0].line == 8
    assert "cut off" in report.findings[0].message and "generation loop" in report.findings[0].message


def test_plain_syntax_error_names_the_line():
    report = ground("import torch\ndef f(:\n    pass\n")
    assert [f.line for f in report.findings] == [2] and "SyntaxError" in report.findings[0].message


# --- ModelNew twice, example usage (rules 9, 10) ---------------------------------------------------------------


def test_duplicate_modelnew_keeps_the_last():
    report = g('''\
        import torch.nn as nn
        class ModelNew(nn.Module):
            first = 1
        class ModelNew(nn.Module):
            second = 2
        ''')
    assert repaired(report) == {"duplicate_modelnew"}
    assert "first" not in report.code and "second" in report.code
    assert report.repairs[0].line == 2


def test_example_usage_is_removed():
    report = ground(GOOD + textwrap.dedent('''\

        # Example usage
        inputs = get_inputs()
        model = ModelNew()
        out = model(*inputs)
        print(out)

        if __name__ == "__main__":
            print("hi")
        '''))
    assert repaired(report) == {"example_usage"}
    assert report.code.rstrip() == GOOD.rstrip()
    assert len(report.repairs) == 5


def test_example_usage_keeps_what_the_model_needs():
    code = GOOD.replace("return ext.scale(x)", "return ext.scale(x) * factor") + "\nfactor = max(1, 2)\nsize = 16\n"
    report = ground(code)
    assert "factor = max(1, 2)" in report.code and "size = 16" in report.code
    assert "example_usage" not in repaired(report)


def test_defined_get_inputs_is_not_demo_code():
    code = GOOD + "\nbatch = 4\n\ndef get_inputs():\n    return [torch.randn(batch, 8)]\n\ninputs = get_inputs()\n"
    assert ground(code).code == code


def test_test_function_and_its_call_are_removed():
    code = GOOD + "\ndef test_it():\n    m = ModelNew()\n    print(m(*get_inputs()))\n\ntest_it()\n"
    report = ground(code)
    assert "test_it" not in report.code
    assert report.code.rstrip() == GOOD.rstrip()


# --- load_inline keywords (rule 1) ----------------------------------------------------------------------------


def test_sources_keyword_is_mapped_by_content():
    code = module_with(KERNEL, call='ext = load_inline(name="e", sources=cuda_src, functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "load_inline_keywords" in repaired(report)
    call = report.code[report.code.index("ext = load_inline"):]
    assert "sources=cuda_src" not in call.replace("cuda_sources=cuda_src", "")
    assert "cuda_sources=cuda_src" in call and "cpp_sources=" in call
    assert "torch::Tensor scale(torch::Tensor x);" in report.code  # prototype for the binding
    assert not report.errors, report.feedback()


def test_sources_keyword_with_plain_cpp_goes_to_cpp_sources():
    cpp = "torch::Tensor twice(torch::Tensor x) { return x * 2; }"
    code = HEADER + f'src = "{cpp}"\next = load_inline(name="e", sources=src, functions=["twice"])\n'
    report = ground(code, "cpp")
    assert 'ext = load_inline(name="e", cpp_sources=src, functions=["twice"])' in report.code


def test_cuda_src_alias_and_unknown_keyword():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_src=cuda_src, '
                            'functions=["scale"], optimize=True)')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "cuda_sources=cuda_src" in report.code and "optimize" not in report.code
    messages = " ".join(r.message for r in report.repairs)
    assert "`cuda_src=`" in messages and "`optimize=`" in messages


def test_misspelt_keywords_are_respelt():
    code = GOOD.replace("cpp_sources=cpp_src", "cp_sources=cpp_src").replace("functions=", "functons=")
    report = ground(code)
    assert report.code == GOOD
    assert {r.rule for r in report.repairs} == {"load_inline_keywords"} and len(report.repairs) == 2


def test_unknown_keyword_holding_code_is_not_dropped():
    code = module_with(KERNEL, call='ext = load_inline(name="e", cpp_sources="", kernels_text=cuda_src, '
                                    'functions=["scale"])')
    report = ground(code)
    assert "kernels_text=cuda_src" in report.code
    assert any("kernels_text" in m for m in errors(report, "load_inline_keywords"))


def test_missing_name_and_functions_string():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(cpp_sources=cpp_src, cuda_sources=cuda_src, functions="scale")')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "name='scale_ext'" in report.code and "functions=['scale']" in report.code
    assert not report.errors, report.feedback()


def test_file_name_as_extension_name_is_sanitised():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline("my.kernel", cpp_src, cuda_src, functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "load_inline('my_kernel', cpp_src, cuda_src" in report.code


def test_sources_passed_positionally():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(cuda_src, cpp_src, functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    call = report.code[report.code.index("ext = load_inline"):].split("\n")[0]
    assert "cpp_sources=cpp_src" in call and "cuda_sources=cuda_src" in call and "name='scale_ext'" in call


def test_load_inline_under_another_name():
    code = ("import torch\nimport torch.utils.cpp_extension as cx\nfrom torch.utils.cpp_extension import "
            "load_inline as build\n" + f'cuda_src = """\n{KERNEL}"""\n'
            'a = build(name="a", sources=cuda_src, functions=["scale"])\n'
            'b = cx.load_inline(name="b", source=cuda_src, functions=["scale"])\n')
    report = ground(code)
    assert report.code.count("cuda_sources=cuda_src") == 2


def test_decorator_use_and_file_names_are_reported():
    code = HEADER + "@load_inline(name='e', cpp_sources=['model.cpp'])\nclass ModelNew(nn.Module):\n    pass\n"
    report = ground(code)
    found = " ".join(errors(report, "load_inline_misuse"))
    assert "not a decorator" in found and "'model.cpp'" in found


# --- where the sources go (rule 2) -------------------------------------------------------------------------------


def test_swapped_sources_are_swapped_back():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cuda_src, cuda_sources=cpp_src, '
                            'functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "cpp_sources=cpp_src, cuda_sources=cuda_src" in report.code
    assert "source_placement" in repaired(report) and not report.errors


def test_kernels_only_in_cpp_sources_move_to_cuda_sources():
    code = HEADER + f'src = """\n{KERNEL}"""\next = load_inline(name="e", cpp_sources=src, functions=["scale"])\n'
    report = ground(code)
    assert 'cuda_sources=src' in report.code
    assert "torch::Tensor scale(torch::Tensor x);" in report.code
    assert ground(code, "cpp").code == code  # a CPU target is not moved to CUDA
    assert errors(ground(code, "cpp"), "source_placement")


def test_cuda_code_in_both_sources_is_reported_not_guessed():
    code = module_with(KERNEL, KERNEL.replace("scale", "other"),
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                            'functions=["scale"])')
    report = ground(code)
    assert errors(report, "source_placement")
    assert "cpp_sources=cpp_src, cuda_sources=cuda_src" in report.code


def test_duplicate_source_in_a_list():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=[cuda_src, cuda_src], '
                            'functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "cuda_sources=[cuda_src]" in report.code


# --- PYBIND11_MODULE (rule 4) --------------------------------------------------------------------------------


PYBIND = '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n    m.def("scale", &scale, "scale");\n}\n'


def test_pybind_block_removed_when_functions_given():
    code = module_with(KERNEL + PYBIND, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                            'functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "PYBIND11_MODULE" not in report.code and "pybind_module" in repaired(report)


def test_pybind_block_kept_without_functions():
    cpp = "torch::Tensor scale(torch::Tensor x) { return x * 2; }" + PYBIND
    code = HEADER + f'src = """\n{cpp}"""\next = load_inline(name="e", cpp_sources=src)\n'
    report = ground(code, "cpp")
    assert report.code == code
    assert not errors(report, "pybind_module") and not errors(report, "exported_functions")


# --- includes (rule 5) ------------------------------------------------------------------------------------


def test_local_and_nonexistent_includes_removed_existing_kept():
    cpp = ('#include "bias_relu.cu"\n#include <torch/nn/functional/relu.h>\n#include <torch/extension.h>\n'
           '#include <vector>\n#include <cuda_runtime.h>\n#include <ATen/native/made_up_header.cuh>\n')
    code = module_with(KERNEL, cpp + "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                            'functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert '"bias_relu.cu"' not in report.code and "functional/relu.h" not in report.code
    assert "made_up_header" not in report.code
    for kept in ("<torch/extension.h>", "<vector>", "<cuda_runtime.h>"):
        assert kept in report.code
    messages = " ".join(r.message for r in report.repairs if r.rule == "includes")
    assert "local file" in messages and "activation.h" in messages  # what torch/nn/functional/ does hold


def test_thc_headers_map_to_aten_and_repeats_go():
    cpp = "#include <THC/THC.h>\n#include <torch/extension.h>\n#include <torch/extension.h>\n"
    code = module_with(KERNEL, cpp + "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                            'functions=["scale"])')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "THC" not in report.code.replace("THC was removed", "")
    assert "#include <ATen/cuda/CUDAContext.h>" in report.code
    assert report.code.count("#include <torch/extension.h>") == 1


def test_includes_not_judged_with_unreadable_include_paths():
    cpp = "#include <mylib/thing.h>\ntorch::Tensor scale(torch::Tensor x);"
    code = module_with(KERNEL, cpp, call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                                         'functions=["scale"], extra_include_paths=[get_dir()])')
    assert "<mylib/thing.h>" in ground(code).code
    flagged = code.replace("extra_include_paths=[get_dir()]", 'extra_cflags=["-O3", "-I/opt/mylib/include"]')
    assert "<mylib/thing.h>" not in ground(flagged).code  # judged: /opt/mylib/include has no such header


# --- Python in C++, device functions (rule 6) ---------------------------------------------------------------


def test_python_api_called_from_cpp():
    cpp = ("torch::Tensor f(torch::Tensor x) {\n    auto y = torch.relu(x);\n"
           "    auto z = torch.zeros({x.shape[0]}, x.options().dtype(torch.float32));\n"
           "    return torch.made_up_op(y) + z;\n}\n")
    code = HEADER + f'src = """\n{cpp}"""\next = load_inline(name="e", cpp_sources=src, functions=["f"])\n'
    report = ground(code, "cpp")
    assert "torch::relu(x)" in report.code and "torch::kFloat32" in report.code and "x.size(0)" in report.code
    assert "torch::zeros" in report.code
    assert any("torch.made_up_op" in m for m in errors(report, "python_api_in_cxx"))


def test_relu_in_device_code_becomes_fmaxf():
    kernel = KERNEL.replace("2.0f * x[i]", "relu(x[i]) + torch::sigmoid(x[i])")
    report = ground(module_with(kernel, "torch::Tensor scale(torch::Tensor x);").replace('"f"', '"scale"')
                    .replace("ext.f(x)", "ext.scale(x)"))
    assert "fmaxf(x[i], 0.0f)" in report.code and "(1.0f / (1.0f + expf(-(x[i]))))" in report.code
    assert "device_functions" in repaired(report)


def test_nested_device_calls_are_rewritten_in_one_go():
    kernel = KERNEL.replace("2.0f * x[i]", "relu(sigmoid(x[i]) - 0.5f)")
    code = module_with(kernel, "torch::Tensor scale(torch::Tensor x);").replace('"f"', '"scale"') \
        .replace("ext.f(x)", "ext.scale(x)")
    report = ground(code)
    assert "fmaxf((1.0f / (1.0f + expf(-(x[i])))) - 0.5f, 0.0f)" in report.code
    assert ground(report.code).code == report.code


def test_user_defined_device_relu_is_kept():
    kernel = "__device__ float relu(float v) { return v > 0.0f ? v : 0.0f; }\n" + \
        KERNEL.replace("2.0f * x[i]", "relu(x[i])")
    code = module_with(kernel, "torch::Tensor scale(torch::Tensor x);").replace('"f"', '"scale"') \
        .replace("ext.f(x)", "ext.scale(x)")
    report = ground(code)
    assert report.code == code


def test_relu_in_a_double_kernel_is_reported_not_rewritten():
    kernel = KERNEL.replace("float", "double").replace("2.0f * x[i]", "relu(x[i])")
    code = module_with(kernel, "torch::Tensor scale(torch::Tensor x);").replace('"f"', '"scale"')
    report = ground(code)
    assert "relu(x[i])" in report.code
    assert any("not float-only" in m for m in errors(report, "device_functions"))


def test_max_min_and_std_exp_in_device_code_are_fine():
    kernel = KERNEL.replace("2.0f * x[i]", "max(x[i], 0.0f) + min(x[i], 1.0f) + std::exp(x[i])")
    code = module_with(kernel, "torch::Tensor scale(torch::Tensor x);").replace('"f"', '"scale"') \
        .replace("ext.f(x)", "ext.scale(x)")
    assert ground(code).code == code


# --- functions=, prototypes, launchers (rule 3) ------------------------------------------------------------------


def test_function_name_mismatch_is_renamed():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                            'functions=["scale_forward"])')
    report = ground(code)
    assert "functions=['scale']" in report.code and "ext.scale(x)" in report.code
    assert {"exported_functions", "extension_calls"} <= repaired(report)


def test_missing_prototype_is_generated():
    code = module_with(KERNEL, "", call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                                        'functions=["scale"])').replace("ext.f(x)", "ext.scale(x)")
    report = ground(code)
    assert 'cpp_src = """\ntorch::Tensor scale(torch::Tensor x);\n"""' in report.code


def test_missing_functions_with_one_host_function():
    code = module_with(KERNEL, "torch::Tensor scale(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src)')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    assert "functions=['scale']" in report.code


def test_kernel_in_functions_gets_a_launcher_when_1d_elementwise():
    kernel = KERNEL.split("torch::Tensor scale")[0]
    code = module_with(kernel, "", call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                                        'functions=["scale_kernel"])')
    report = ground(code.replace("ext.f(x)", "ext.scale_kernel(x, x, 4)"))
    assert "host_launcher" in repaired(report)
    assert "__global__ void scale_kernel_kernel(" in report.code
    assert "torch::Tensor scale_kernel(torch::Tensor x, torch::Tensor y, int64_t n) {" in report.code
    assert "torch::Tensor scale_kernel(torch::Tensor x, torch::Tensor y, int64_t n);" in report.code
    assert "return y;" in report.code and "const int64_t kw_count = n;" in report.code
    assert not report.errors, report.feedback()


def test_kernel_without_flat_index_gets_a_precise_finding():
    kernel = "__global__ void k(float* x) {\n    int i = threadIdx.x;\n    x[i] = 0.0f;\n}\n"
    code = module_with(kernel, "", call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                                        'functions=["k"])')
    report = ground(code)
    assert "k_kernel" not in report.code
    assert any("__global__ kernel" in m and "flat index" in m for m in errors(report, "host_launcher"))


# --- calls into the extension (rule 8) --------------------------------------------------------------------------


def test_two_exports_and_a_wrong_call_is_a_finding():
    cuda = KERNEL + "torch::Tensor other(torch::Tensor x) { return x; }\n"
    code = module_with(cuda, "torch::Tensor scale(torch::Tensor x);\ntorch::Tensor other(torch::Tensor x);",
                       call='ext = load_inline(name="e", cpp_sources=cpp_src, cuda_sources=cuda_src, '
                            'functions=["scale", "other"])').replace("ext.f(x)", "ext.forward_op(x)")
    report = ground(code)
    assert "ext.forward_op(x)" in report.code
    assert any("ext.forward_op" in m for m in errors(report, "extension_calls"))


def test_bare_call_to_an_exported_name():
    code = GOOD.replace("return ext.scale(x)", "return scale(x)")
    report = ground(code)
    assert "return ext.scale(x)" in report.code


def test_argument_count_against_the_cpp_signature():
    report = ground(GOOD.replace("ext.scale(x)", "ext.scale(x, 2.0)"))
    found = errors(report, "extension_calls")
    assert any("takes 1 argument(s) (torch::Tensor x); the call passes 2" in m for m in found)


def test_missing_cpp_sources_is_added_after_a_positional_name():
    code = HEADER + f'src = """\n{KERNEL}"""\next = load_inline("e", cuda_sources=src, functions=["scale"])\n'
    report = ground(code)
    assert 'ext = load_inline("e", cpp_sources="torch::Tensor scale(torch::Tensor x);\\n", cuda_sources=src' \
        in report.code


def test_data_ptr_passed_to_a_tensor_parameter():
    code = GOOD.replace("ext.scale(x)", "ext.scale(x.data_ptr())")
    assert any("data_ptr" in m for m in errors(ground(code), "extension_calls"))


# --- Python APIs (rule 7) ---------------------------------------------------------------------------------------


def test_hallucinated_torch_attribute():
    code = "import torch\n\n@torch.cuda.jit.script\ndef f(x):\n    return torch.relu(x)\n"
    report = ground(code)
    (message,) = errors(report, "python_api")
    assert "`torch.cuda.jit` does not exist" in message and "load_inline" in message
    assert report.errors[0].line == 3


def test_real_torch_attributes_are_fine():
    code = ("import torch\nimport torch.nn.functional as F\nfrom torch.utils.cpp_extension import load_inline\n"
            "y = F.gelu(torch.relu(torch.randn(3)))\ntorch.cuda.synchronize\n")
    assert not errors(ground(code), "python_api")


def test_triton_language_names():
    code = textwrap.dedent('''\
        import triton
        import triton.language as tl

        @triton.jit
        def k(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            tl.store(x_ptr + offs, tl.relu(tl.maximum(x, 0.0)), mask=offs < n)
        ''')
    found = errors(ground(code, "triton"), "python_api")
    assert len(found) == 1 and "triton.language.relu" in found[0] and "tl.maximum" in found[0]


def test_undefined_name_in_forward():
    code = GOOD.replace("return ext.scale(x)", "return fused_op(x)")
    assert any("`fused_op`" in m for m in errors(ground(code), "undefined_names"))


# --- sources that are not one plain literal --------------------------------------------------------------


def _value_of(code: str, name: str) -> str:
    tree = ast.parse(code)
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name)
    return ast.literal_eval(node.value)


def test_literal_with_escapes_keeps_its_meaning():
    kernel = KERNEL.replace("2.0f * x[i]", "relu(x[i])")
    kernel = kernel.replace("    return y;", '    printf("%d\\\\n", n);\n    return y;')
    code = module_with(kernel, "torch::Tensor scale(torch::Tensor x);").replace('"f"', '"scale"')
    report = ground(code.replace("ext.f(x)", "ext.scale(x)"))
    before, after = _value_of(code, "cuda_src"), _value_of(report.code, "cuda_src")
    assert after == before.replace("relu(x[i])", "fmaxf(x[i], 0.0f)")
    assert '"%d\\n"' in after


def test_raw_and_concatenated_sources():
    code = HEADER + 'head = r"""\n#include <torch/extension.h>\n#include "local.h"\n"""\n' \
        f'body = """\n{KERNEL.replace("2.0f * x[i]", "relu(x[i])")}"""\n' \
        'ext = load_inline(name="e", cpp_sources="torch::Tensor scale(torch::Tensor x);", ' \
        'cuda_sources=head + body, functions=["scale"])\n'
    report = ground(code)
    assert 'head = r"""\n#include <torch/extension.h>\n"""' in report.code
    assert "fmaxf(x[i], 0.0f)" in report.code


def test_fstring_source_is_reported_not_rewritten():
    code = HEADER + 'SCALE = "2.0f"\nsrc = f"""\n__global__ void k(float* x, int n) {{\n' \
        '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] = relu(x[i]) * {SCALE};\n}}\n"""\n' \
        'ext = load_inline(name="e", cpp_sources="", cuda_sources=src, functions=["k"])\n'
    report = ground(code)
    assert "relu(x[i])" in report.code
    assert any("not a plain string literal" in m for m in errors(report, "device_functions"))


SNIPPETS = {
    "sources_kw": module_with(KERNEL, call='ext = load_inline(name="e", sources=cuda_src, functions=["scale"])'),
    "positional": module_with(KERNEL, call='ext = load_inline(cuda_src, cpp_src, functions=["scale"])'),
    "launcher": module_with(KERNEL.split("torch::Tensor scale")[0].replace("2.0f * x[i]", "gelu(x[i])"),
                            "#include <THC/THC.h>",
                            call='ext = load_inline(cpp_sources=cpp_src, cuda_sources=[cuda_src, cuda_src], '
                                 'functions="scale_kernel", cuda_flags=["-O3"])'),
    "demo": GOOD + "\nm = ModelNew()\nprint(m(torch.randn(3)))\n",
}


@pytest.mark.parametrize("name", SNIPPETS)
def test_grounding_twice_changes_nothing_more(name):
    first = ground(SNIPPETS[name])
    assert first.repairs
    second = ground(first.code)
    assert second.code == first.code and not second.repairs, second.repairs


# --- robustness ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ANSWER_FILES, ids=[p.name for p in ANSWER_FILES])
def test_fixture_answers_never_raise_and_are_idempotent(path):
    raw = path.read_text()
    for code in (extract_code(raw), raw):
        report = ground(code)
        assert isinstance(report, GroundingReport) and report.original == code
        assert not any(f.rule == "grounding_internal" for f in report.findings), report.findings
        assert all(f.rule in RULES for f in report.findings) and all(r.rule in RULES for r in report.repairs)
        if report.changed:
            ast.parse(report.code)
        again = ground(report.code)
        assert again.code == report.code and not again.repairs, again.repairs


@pytest.mark.parametrize("garbage", [
    "", " ", "\x00\x01", "(" * 5000, "def", "```python\n", "class ModelNew:\n" + "  " * 300 + "x",
    'load_inline(name=1, cpp_sources=None, cuda_sources=[None, 3], functions={1: 2})',
    'import torch.utils.cpp_extension as c\nc.load_inline(*a, **k)\nc.load_inline()\n',
    'from torch.utils.cpp_extension import load_inline\nx = load_inline("n", f"{y}", "{", functions=[f"{z}"])\n',
    'from torch.utils.cpp_extension import load_inline\n'
    's = """\n__global__ void k(float* x) { relu(relu(x[0]); }\n"""\ne = load_inline("n", "", s, functions=["k"])\n',
    'import torch\ntorch.a.b.c.d.e\nimport triton.language as tl\ntl.x.y\n',
], ids=lambda g: repr(g)[:20])
def test_garbage_in_findings_out(garbage):
    report = ground(garbage)
    assert isinstance(report, GroundingReport)
    assert not any(f.rule == "grounding_internal" for f in report.findings), report.findings
    report.feedback()


def test_non_string_input_does_not_raise():
    assert ground(None).code == ""  # type: ignore[arg-type]
    assert ground(123).findings  # type: ignore[arg-type]
    assert any(f.rule == "grounding_internal" for f in ground(GOOD, "rocm").findings)


def test_random_mutations_of_a_real_answer_never_raise():
    code = extract_code(ANSWER_FILES[0].read_text()) if ANSWER_FILES else GOOD
    rng = random.Random(0)
    for _ in range(40):
        chars = list(code)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(chars))
            chars[i] = rng.choice('(){}[]"\'#;\n x_')
        report = ground("".join(chars))
        assert not any(f.rule == "grounding_internal" for f in report.findings), report.findings


def test_lines_refer_to_the_original():
    code = GOOD + "\nprint(get_inputs())\n"
    code = code.replace("class ModelNew", "class ModelNew(nn.Module):\n    pass\n\n\nclass ModelNew", 1)
    report = ground(code)
    lines = code.splitlines()
    for r in report.repairs:
        assert r.line is not None and 1 <= r.line <= len(lines)
    example = next(r for r in report.repairs if r.rule == "example_usage")
    assert lines[example.line - 1].startswith("print(")


def test_feedback_says_what_was_repaired_and_what_is_left():
    code = GOOD.replace('functions=["scale"]', 'sources=cuda_src, functions=["scale"]').replace(
        "cuda_sources=cuda_src, ", "") + "\n@torch.cuda.jit.script\ndef g(x):\n    return x\n"
    text = ground(code).feedback()
    assert text.startswith("Repaired automatically")
    assert "Still wrong; fix these:" in text and "torch.cuda.jit" in text


CANDIDATES = sorted((Path(__file__).parents[1] / "fixtures" / "candidates").rglob("*.py"))
# Candidate fixtures whose defect is one grounding repairs; every other one must come out unchanged.
REPAIRABLE = {"missing_header", "sources_keyword"}


@pytest.mark.parametrize("path", CANDIDATES, ids=[f"{p.parent.name}/{p.stem}" for p in CANDIDATES])
def test_evaluator_fixtures_are_changed_only_when_defective(path):
    report = ground(path.read_text())
    assert report.changed == (path.stem in REPAIRABLE), (
        f"grounding {'changed' if report.changed else 'did not change'} {path.name}: {report.repairs}")


# --- the real small-model answers ----------------------------------------------------------------------------


def answer(name: str) -> str:
    path = ANSWERS / name
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return extract_code(path.read_text()) or ""


def test_answer_with_sources_keyword_and_relu():
    report = ground(answer("llama_s1.txt"))
    assert "sources=cuda_sources" not in report.code.replace("cuda_sources=cuda_sources", "")
    assert not re.search(r"(?<![\w])relu\(", report.code.split('"""')[1])
    assert "get_inputs()" not in report.code
    assert {"load_inline_keywords", "device_functions", "host_launcher", "example_usage"} <= repaired(report)
    # its build's result is thrown away, so forward's bare call stays an error grounding cannot fix
    assert any("bias_add_relu" in m for m in errors(report, "undefined_names"))


def test_answer_with_local_include_and_unbound_call():
    report = ground(answer("llama_s2.txt"))
    assert '#include "bias_relu.cu"' not in report.code and "model_new.bias_relu(" in report.code
    assert errors(report, "host_launcher")  # threadIdx-only kernel: no launcher is guessed


def test_answer_with_swapped_sources_and_two_modelnews():
    report = ground(answer("llama_avx512_s1.txt"))
    assert errors(report, "source_placement")
    assert "test_model_new" not in report.code


def test_answer_with_torch_cuda_jit():
    report = ground(answer("server_n2.txt"))
    assert not report.changed and any("torch.cuda.jit" in m for m in errors(report, "python_api"))


# --- end to end: a repaired answer compiles ------------------------------------------------------------------


@pytest.mark.build
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_repaired_answer_compiles_in_compile_only_mode(fast_cfg):
    """llama_s1.txt: `sources=`, `relu()` in the kernel, a kernel in functions=, demo code. Measured by
    benchmarks/grounding_compile_rate.py: it compiles after grounding (nvcc, ~1-2 min on 2 cores)."""
    from kernelwright.evaluate import evaluate
    from kernelwright.records import Task, Verdict

    task_path = Path(__file__).parents[1] / "fixtures" / "tasks" / "bias_relu.py"
    task = Task(id="file/bias_relu", name="bias_relu", source=task_path.read_text())
    code = answer("llama_s1.txt")
    cfg = fast_cfg(compile_only=True, device="cuda", timeout=900.0)
    assert evaluate(task, code, cfg).verdict != Verdict.COMPILED
    result = evaluate(task, ground(code).code, cfg)
    assert result.verdict == Verdict.COMPILED, result.error


def test_a_taught_call_without_its_import_gets_the_import():
    # the fallback's answers copy `load_inline(...)` and `tl.load` without their import lines
    code = textwrap.dedent('''\
        """A docstring stays first."""
        import torch
        import torch.nn as nn

        ext = load_inline(name="k", cpp_sources="torch::Tensor f(torch::Tensor x);",
                          cuda_sources="torch::Tensor f(torch::Tensor x) { return x; }", functions=["f"])

        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.f(x) + math.pi
        ''')
    report = ground(code)
    assert "from torch.utils.cpp_extension import load_inline" in report.code
    assert "import math" in report.code
    assert report.code.startswith('"""A docstring stays first."""\n')
    assert any(r.rule == "missing_imports" for r in report.repairs)
    assert not errors(report, "undefined_names")
    ast.parse(report.code)


def test_an_unknown_name_is_still_reported_not_imported():
    code = GOOD.replace("return ext.scale(x)", "return fused_op(x)")
    report = ground(code)
    assert not any(r.rule == "missing_imports" for r in report.repairs)
    assert any("`fused_op`" in m for m in errors(report, "undefined_names"))
