"""Graph building, classification and epilogue chains for every built-in task (small size)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernelwright.analysis import (
    GraphShape,
    Role,
    Source,
    build_graph,
    classify,
    epilogue_chains,
)
from kernelwright.analysis.structure import broadcast_pattern
from tests.analysis._helpers import TASKS, reference

S, E, F, N = GraphShape.SINGLE_OP, GraphShape.LIBRARY_EPILOGUE, GraphShape.FUSIBLE_CHAIN, GraphShape.NETWORK

# Written from reading each task file: (shape, the single op / the epilogue chain's ops / None).
EXPECTED = {
    "builtin/L1/01_gelu_tanh": (S, ["gelu"]),
    "builtin/L1/02_bias_add": (S, ["add"]),
    "builtin/L1/03_softmax": (S, ["softmax"]),
    "builtin/L1/04_log_softmax": (S, ["log_softmax"]),
    "builtin/L1/05_row_sum": (S, ["sum"]),
    "builtin/L1/06_row_mean": (S, ["mean"]),
    "builtin/L1/07_row_max_fp16": (S, ["amax"]),
    "builtin/L1/08_layer_norm": (S, ["layer_norm"]),
    "builtin/L1/09_rms_norm": (F, ["pow", "mean", "add", "rsqrt", "mul", "mul"]),
    "builtin/L1/10_matmul": (S, ["matmul"]),
    "builtin/L1/11_conv2d": (S, ["conv2d"]),
    "builtin/L1/12_cumsum": (S, ["cumsum"]),
    "builtin/L1/13_transpose_copy": (S, ["contiguous"]),  # the transpose is a view; the copy is the op
    "builtin/L1/14_embedding_lookup": (S, ["embedding"]),
    "builtin/L2/01_linear_gelu_scale": (E, ["gelu", "mul"]),
    "builtin/L2/02_conv2d_mish_clamp": (E, ["mish", "clamp"]),
    "builtin/L2/03_linear_layernorm_silu": (E, ["layer_norm", "silu"]),
    "builtin/L2/04_conv2d_batchnorm_relu_mean": (E, ["batch_norm", "relu", "mean"]),
    "builtin/L2/05_linear_softmax_scale": (E, ["softmax", "mul"]),
    "builtin/L2/06_channel_affine_hardswish_residual": (F, ["mul", "add", "hardswish", "add"]),
    "builtin/L2/07_residual_add_rmsnorm_bf16": (F, None),
    "builtin/L2/08_linear_silu_rowmax": (E, ["silu", "amax"]),
    "builtin/L2/09_conv2d_softplus_scale_bias": (E, ["softplus", "mul", "add"]),
    "builtin/L2/10_linear_bias_hardswish_clamp": (E, ["add", "hardswish", "clamp"]),
    "builtin/L2/11_conv2d_groupnorm_tanh_maxpool": (E, ["group_norm", "tanh", "max_pool2d"]),
    # the causal mask (ones -> triu) is a constant: it neither breaks the chain nor counts as work
    "builtin/L2/12_bmm_causal_softmax": (E, ["mul", "masked_fill", "softmax"]),
    "builtin/L3/01_mlp_block": (N, None),
    "builtin/L3/02_causal_self_attention": (N, None),
    "builtin/L3/03_small_convnet": (N, None),
    "builtin/L3/04_gated_recurrent_cell": (N, None),
    "builtin/L3/05_residual_block": (N, None),
    "builtin/L3/06_unet_down_up": (N, None),
    "builtin/L3/07_two_expert_mixture": (N, None),
    "builtin/L3/08_patch_embed_classifier": (N, None),
}
# fx cannot trace these (shape unpacking, torch.ones(t, t), a Python loop over x.shape[1]).
DISPATCH = {"builtin/L2/12_bmm_causal_softmax", "builtin/L3/02_causal_self_attention",
            "builtin/L3/04_gated_recurrent_cell"}


def test_expected_table_covers_the_suite():
    assert set(EXPECTED) == set(TASKS)


@pytest.mark.parametrize("task_id", sorted(EXPECTED))
def test_classification(task_id):
    model, inputs = reference(task_id)
    graph = build_graph(model, inputs)
    c = classify(graph)
    shape, ops = EXPECTED[task_id]
    assert c.shape == shape, c.reason
    assert graph.method == ("dispatch" if task_id in DISPATCH else "fx")
    assert (graph.fallback_reason is not None) == (task_id in DISPATCH)
    assert 0.0 <= c.difficulty <= 1.0 and c.reason and "\n" not in c.reason
    targets = [n.target for n in graph.substantive()]
    if shape == S:
        assert targets == ops
    elif shape == E:
        assert c.epilogue_targets == ops
        assert len(c.library_ops) == 1
    elif shape == F and ops is not None:
        assert targets == ops
    elif shape == N:
        assert len(c.library_ops) >= 2


def test_difficulty_orders_the_levels():
    scores = {tid: classify(build_graph(*reference(tid))).difficulty for tid in
              ("builtin/L1/01_gelu_tanh", "builtin/L2/01_linear_gelu_scale", "builtin/L3/01_mlp_block")}
    assert scores["builtin/L1/01_gelu_tanh"] < scores["builtin/L2/01_linear_gelu_scale"] \
        < scores["builtin/L3/01_mlp_block"]


def _chain(task_id, anchor_target=None):
    chains = epilogue_chains(build_graph(*reference(task_id)))
    return [c for c in chains if anchor_target is None or c.anchor_target == anchor_target]


def test_chain_linear_gelu_scale():
    (chain,) = _chain("builtin/L2/01_linear_gelu_scale")
    assert (chain.anchor_target, chain.targets, chain.inputs) == ("linear", ["gelu", "mul"], [])
    assert chain.main.shape == [32, 136] and chain.main.dtype == "float32"
    assert chain.output.shape == [32, 136] and not chain.has_reduction and not chain.anchor_leaves


def test_chain_per_channel_bias():
    (chain,) = _chain("builtin/L2/09_conv2d_softplus_scale_bias")
    (bias,) = chain.inputs
    assert (bias.name, bias.source, bias.shape, bias.consumer) == ("channel_bias", Source.PARAMETER, [6, 1, 1], "add")
    assert (bias.broadcast, bias.broadcast_dims, bias.against) == ("per_channel", [0, 2, 3], [2, 6, 15, 15])


def test_chain_row_vector_bias_and_norm_parameters():
    (chain,) = _chain("builtin/L2/10_linear_bias_hardswish_clamp")
    (bias,) = chain.inputs
    assert (bias.name, bias.broadcast, bias.broadcast_dims, bias.against) == ("bias", "row_vector", [0], [16, 100])
    (bn_chain,) = _chain("builtin/L2/04_conv2d_batchnorm_relu_mean")
    assert bn_chain.has_reduction and bn_chain.output.shape == [2, 8]
    params = {i.name: i for i in bn_chain.inputs}
    assert params["bn.weight"].broadcast == "per_channel" and params["bn.weight"].broadcast_dims == [0, 2, 3]


def test_chain_constant_mask_broadcasts_over_heads():
    (chain,) = _chain("builtin/L2/12_bmm_causal_softmax")
    (mask,) = chain.inputs
    assert (mask.source, mask.dtype, mask.shape, mask.consumer) == (Source.CONSTANT, "bool", [40, 40], "masked_fill")
    assert (mask.broadcast, mask.broadcast_dims) == ("leading", [0])
    assert chain.has_reduction


def test_chain_through_views_in_a_network():
    (chain,) = _chain("builtin/L3/08_patch_embed_classifier", "conv2d")
    assert chain.targets == ["add", "layer_norm", "mean"]
    assert chain.nodes[:2] == ["flatten", "transpose"]  # views are part of the chain's path
    position = next(i for i in chain.inputs if i.name == "position")
    assert (position.broadcast, position.against) == ("leading", [2, 16, 32])


def test_chain_ends_at_the_next_library_op():
    chains = _chain("builtin/L3/03_small_convnet")
    assert [c.targets for c in chains] == [["relu", "max_pool2d"], ["relu", "max_pool2d"], ["relu", "mean"]]


def test_roles_views_constants_and_noops():
    graph = build_graph(*reference("builtin/L2/12_bmm_causal_softmax"))
    roles = {n.target: n.role for n in graph.nodes}
    assert roles["transpose"] == Role.VIEW and roles["ones"] == Role.CONSTANT and roles["triu"] == Role.CONSTANT

    class Noop(nn.Module):
        def forward(self, x):
            return x.contiguous().float() * 2.0

    graph = build_graph(Noop(), [torch.randn(3, 4)])
    assert [n.role for n in graph.nodes] == [Role.NOOP, Role.NOOP, Role.COMPUTE]
    assert classify(graph).shape == S

    class Transposed(nn.Module):  # `.T` is the data transposed, `.shape` metadata
        def forward(self, a, b):
            return torch.matmul(a.T, b) * a.shape[0]

    graph = build_graph(Transposed(), [torch.randn(5, 3), torch.randn(5, 4)])
    assert [(n.target, n.role) for n in graph.nodes][:3] == [("transpose", Role.VIEW), ("matmul", Role.COMPUTE),
                                                             ("getattr", Role.META)]


def test_node_records_shapes_scalars_and_flops():
    graph = build_graph(*reference("builtin/L2/02_conv2d_mish_clamp"))
    conv = graph.node("conv")
    assert conv.target == "conv2d" and conv.kind.value == "library_heavy"
    assert conv.output.shape == [2, 8, 16, 16]
    assert conv.scalars["kernel_size"] == [3, 3] and conv.scalars["stride"] == [1, 1]
    # 2 * (out elements) * (in_channels * 3 * 3) multiply-adds, as FlopCounterMode counts them
    assert conv.flops == 2 * (2 * 8 * 16 * 16) * (4 * 3 * 3)
    clamp = graph.node("clamp")
    assert list(clamp.scalars.values()) == [-0.25, 1.5]
    sources = {i.name: i.source for i in conv.inputs}
    assert sources == {"x": Source.GRAPH_INPUT, "conv.weight": Source.PARAMETER, "conv.bias": Source.PARAMETER}


def test_dispatch_fallback_unrolls_the_loop():
    graph = build_graph(*reference("builtin/L3/04_gated_recurrent_cell"))
    assert graph.method == "dispatch" and "fx" in graph.fallback_reason
    steps = 6
    assert sum(n.target == "sigmoid" for n in graph.substantive()) == steps
    assert graph.outputs and graph.output_meta[0].shape == [2, steps, 16]


def test_broadcast_patterns():
    assert broadcast_pattern([], [4, 5]) == ("scalar", [0, 1])
    assert broadcast_pattern([4, 5], [4, 5]) == ("same", [])
    assert broadcast_pattern([5], [4, 5]) == ("row_vector", [0])
    assert broadcast_pattern([4, 1], [4, 5]) == ("per_row", [1])
    assert broadcast_pattern([3, 1, 1], [2, 3, 7, 7]) == ("per_channel", [0, 2, 3])
    assert broadcast_pattern([1, 7, 7], [2, 3, 7, 7]) == ("leading", [0, 1])
    assert broadcast_pattern([2, 1, 7, 1], [2, 3, 7, 5]) == ("partial", [1, 3])
    assert broadcast_pattern([3], [2, 3, 7, 7], channel_aligned=True) == ("per_channel", [0, 2, 3])


def test_prologue_before_the_library_op():
    class NormThenLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.proj = nn.LayerNorm(8), nn.Linear(8, 4)

        def forward(self, x):
            return self.proj(self.norm(x))

    c = classify(build_graph(NormThenLinear(), [torch.randn(5, 8)]))
    assert c.shape == E and c.epilogue == [] and c.prologue == ["norm"]
    assert c.reason == "linear with a 1-op prologue: layer_norm"
