"""The operator taxonomy: canonical names, kinds and per-element work, in one table.

Three front ends name the same computation differently: torch.fx (``F.gelu``, ``"mean"`` as a
method, ``nn.Linear`` as a module), the ATen dispatcher (``aten.addmm.default``,
``aten._softmax.default``) and the profiler (``aten::addmm``). Everything downstream (the
classifier, the chain finder, the roofline) speaks only the canonical names defined here, so a
graph built by fx and one recorded at the ATen level classify the same way.
"""

from __future__ import annotations

import re

from kernelwright.analysis.types import OpKind

# Spelling variants -> canonical name. ATen-internal names map to the user-facing op they implement.
ALIASES: dict[str, str] = {
    "truediv": "div", "true_divide": "div", "floordiv": "floor_divide", "rsub": "sub",
    "multiply": "mul", "subtract": "sub", "divide": "div", "neg": "neg", "negative": "neg",
    "addmm": "linear", "mm": "matmul", "baddbmm": "bmm", "einsum": "matmul",
    "_softmax": "softmax", "_log_softmax": "log_softmax", "_safe_softmax": "softmax",
    "native_layer_norm": "layer_norm", "native_group_norm": "group_norm",
    "native_batch_norm": "batch_norm", "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm", "_native_batch_norm_legit_functional": "batch_norm",
    "_fused_rms_norm": "rms_norm",
    "_unsafe_view": "view", "t": "transpose", "swapaxes": "transpose", "movedim": "permute",
    "_to_copy": "to", "float": "to", "half": "to", "bfloat16": "to", "double": "to", "type_as": "to", "type": "to",
    "concat": "cat", "concatenate": "cat", "split_with_sizes": "split", "tensor_split": "split",
    "max_pool1d_with_indices": "max_pool1d", "max_pool2d_with_indices": "max_pool2d",
    "max_pool3d_with_indices": "max_pool3d", "_adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "clamp_min": "clamp", "clamp_max": "clamp", "clip": "clamp",
    "_scaled_dot_product_flash_attention": "attention", "_scaled_dot_product_efficient_attention": "attention",
    "_scaled_dot_product_cudnn_attention": "attention", "scaled_dot_product_attention": "attention",
    "_scaled_dot_product_flash_attention_for_cpu": "attention", "multi_head_attention_forward": "attention",
    "embedding_bag": "embedding", "_embedding_bag": "embedding",
    "square": "pow", "alias": "view", "detach": "view",
    # backend kernels the profiler shows under their own names
    "_convolution": "convolution", "mkldnn_convolution": "convolution", "cudnn_convolution": "convolution",
    "_slow_conv2d_forward": "convolution", "slow_conv3d_forward": "convolution",
    "_nnpack_spatial_convolution": "convolution", "cudnn_convolution_transpose": "conv_transpose",
    "slow_conv_transpose2d": "conv_transpose", "slow_conv_transpose3d": "conv_transpose",
    "mkldnn_linear": "linear", "_addmm_activation": "linear",
}

# nn.Module class name -> canonical name (the rest fall back to snake_case of the class name).
MODULES: dict[str, str] = {
    "Linear": "linear", "LazyLinear": "linear", "Bilinear": "bilinear", "Embedding": "embedding",
    "EmbeddingBag": "embedding", "MultiheadAttention": "attention",
    "LayerNorm": "layer_norm", "GroupNorm": "group_norm", "RMSNorm": "rms_norm",
    "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm", "BatchNorm3d": "batch_norm",
    "InstanceNorm1d": "instance_norm", "InstanceNorm2d": "instance_norm", "InstanceNorm3d": "instance_norm",
    "LocalResponseNorm": "local_response_norm", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "GELU": "gelu", "ReLU": "relu", "ReLU6": "relu6", "SiLU": "silu", "Mish": "mish", "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid", "Hardtanh": "hardtanh", "Softplus": "softplus", "Tanh": "tanh",
    "Sigmoid": "sigmoid", "LeakyReLU": "leaky_relu", "ELU": "elu", "SELU": "selu", "CELU": "celu",
    "PReLU": "prelu", "GLU": "glu", "LogSigmoid": "logsigmoid", "Softsign": "softsign",
    "Identity": "identity", "Dropout": "dropout", "Dropout1d": "dropout", "Dropout2d": "dropout",
    "Flatten": "flatten", "Unflatten": "unflatten", "LSTM": "lstm", "GRU": "gru", "RNN": "rnn",
}

LIBRARY_HEAVY = frozenset({
    "linear", "matmul", "bmm", "bilinear", "embedding", "attention", "lstm", "gru", "rnn",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "conv_transpose",  # rank unknown (profiler names)
})
NORMALIZATION = frozenset({
    "softmax", "log_softmax", "softmin", "layer_norm", "group_norm", "batch_norm", "instance_norm",
    "rms_norm", "local_response_norm", "normalize",
})
REDUCTION = frozenset({
    "sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "cumsum", "cumprod",
    "cummax", "cummin", "logsumexp", "logcumsumexp", "norm", "var", "std", "var_mean", "std_mean",
    "all", "any", "median", "topk", "sort",
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
})
# Views never move data; the rest of DATA_MOVEMENT materialises a copy.
VIEWS = frozenset({
    "view", "reshape", "permute", "transpose", "flatten", "unflatten", "squeeze", "unsqueeze",
    "expand", "expand_as", "getitem", "narrow", "select", "slice", "split", "chunk", "unbind",
    "as_strided", "view_as", "unfold", "diagonal", "real", "imag",
})
DATA_MOVEMENT = VIEWS | frozenset({
    "contiguous", "clone", "cat", "stack", "pad", "constant_pad_nd", "repeat", "tile",
    "repeat_interleave", "roll", "flip", "gather", "index_select", "index", "scatter", "copy",
    "masked_select", "pixel_shuffle", "pixel_unshuffle", "upsample_nearest2d", "interpolate",
})
ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "neg", "pow", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1",
    "sqrt", "rsqrt", "abs", "sign", "reciprocal", "floor", "ceil", "round", "trunc", "frac",
    "floor_divide", "remainder", "fmod", "maximum", "minimum", "fmax", "fmin", "lerp", "addcmul",
    "addcdiv", "where", "masked_fill", "clamp", "hardtanh", "relu", "relu6", "gelu", "silu", "mish",
    "hardswish", "hardsigmoid", "softplus", "tanh", "sigmoid", "leaky_relu", "elu", "selu", "celu",
    "prelu", "glu", "logsigmoid", "softsign", "tanhshrink", "threshold", "erf", "erfc", "sin", "cos",
    "tan", "atan", "sinh", "cosh", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
    "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_not", "isnan", "isinf",
    "nan_to_num", "triu", "tril", "to", "dropout", "identity", "square", "mod",
})
# Ops that only create tensors from sizes/dtypes or read metadata: never data-dependent work.
FACTORIES = frozenset({
    "ones", "zeros", "empty", "full", "arange", "linspace", "eye", "tensor", "scalar_tensor",
    "new_ones", "new_zeros", "new_empty", "new_full", "new_tensor", "ones_like", "zeros_like",
    "empty_like", "full_like", "empty_strided", "lift_fresh", "lift_fresh_copy", "rand", "randn",
    "randint",
})
META = frozenset({"getattr", "size", "dim", "numel", "shape", "stride", "is_contiguous", "data_ptr",
                  "element_size", "storage_offset", "_assert", "sym_size", "sym_stride", "sym_numel"})
GATHERS = frozenset({"embedding", "index_select", "gather", "index"})

# Work per element for the roofline's non-library FLOPs (library FLOPs come from FlopCounterMode).
# Elementwise: per output element; reductions: per input element; normalisations: the handful of
# passes a textbook implementation makes (max/sub/exp/sum/div for softmax; mean, centre, square,
# sum, scale, affine for the norms). Data movement and casts do no arithmetic.
NORM_FLOPS_PER_ELEMENT: dict[str, int] = {
    "softmax": 5, "log_softmax": 5, "softmin": 5, "layer_norm": 7, "group_norm": 7, "batch_norm": 7,
    "instance_norm": 7, "rms_norm": 4, "local_response_norm": 7, "normalize": 4,
}
ZERO_FLOP_ELEMENTWISE = frozenset({"to", "dropout", "identity", "triu", "tril"})

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def canonical(name: str) -> str:
    """Canonical op name from any spelling: ``aten::addmm``, ``aten.addmm.default``, ``relu_``."""
    base = name.split("::")[-1]
    if name.startswith(("aten.", "prims.")):
        base = name.split(".")[1]
    if base.startswith("__") and base.endswith("__"):
        base = base[2:-2]  # operator dunders: __add__, __matmul__
    elif base.endswith("_") and len(base) > 1:
        base = base[:-1]  # in-place spelling of the same op: relu_, add_
    return ALIASES.get(base, base)


def module_canonical(class_name: str) -> str:
    if class_name in MODULES:
        return MODULES[class_name]
    if class_name.startswith("ConvTranspose"):
        return "conv_transpose" + class_name[len("ConvTranspose"):].lower()
    if class_name.startswith("Conv"):
        return "conv" + class_name[len("Conv"):].lower()
    return _CAMEL.sub("_", class_name).lower()


def kind_of(name: str) -> OpKind:
    if name in LIBRARY_HEAVY:
        return OpKind.LIBRARY_HEAVY
    if name in NORMALIZATION:
        return OpKind.NORMALIZATION
    if name in REDUCTION:
        return OpKind.REDUCTION
    if name in DATA_MOVEMENT:
        return OpKind.DATA_MOVEMENT
    if name in ELEMENTWISE:
        return OpKind.ELEMENTWISE
    return OpKind.OTHER


FUSIBLE_KINDS = frozenset({OpKind.ELEMENTWISE, OpKind.REDUCTION, OpKind.NORMALIZATION})
