"""The tier watch's reading of a command line (tests/_tiers.py): what costs a tier and what does not."""

from __future__ import annotations

from tests._tiers import _tier_of


def test_a_build_is_a_build_and_a_preprocessor_query_is_not():
    assert _tier_of("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus\0-quiet\0-I/x\0main.cpp\0-o\0/tmp/cc.s") == "build"
    assert _tier_of("/usr/local/cuda/bin/nvcc\0-E\0k.cu") == "build"  # nvcc runs a whole toolchain
    assert _tier_of("/usr/local/cuda/bin/nvcc\0--version") is None  # doctor's version query builds nothing
    # grounding asks the compiler for its include search list once per process: milliseconds
    assert _tier_of("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus\0-E\0-quiet\0-v\0-") is None
    assert _tier_of("/usr/bin/python3\0-m\0llama_cpp.server\0--model\0m.gguf") == "slow"
    assert _tier_of("/usr/bin/python3\0-c\0print(1)") is None
