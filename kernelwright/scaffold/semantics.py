"""What each operator computes, written out as math a kernel can implement directly.

Small models know the PyTorch name of an activation far better than its formula, and the formula
is what device code needs (there is no `gelu()` in CUDA). One line per canonical op name (the
names of analysis/ops.py); the region prompt lists the lines for the ops its segment uses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

DEFINITIONS: dict[str, str] = {
    "relu": "relu(v) = max(v, 0)",
    "relu6": "relu6(v) = min(max(v, 0), 6)",
    "gelu": "gelu(v) = 0.5 * v * (1 + erf(v / sqrt(2)))   (approximate='tanh': "
            "0.5 * v * (1 + tanh(sqrt(2/pi) * (v + 0.044715 * v^3))))",
    "silu": "silu(v) = v * sigmoid(v) = v / (1 + exp(-v))",
    "sigmoid": "sigmoid(v) = 1 / (1 + exp(-v))",
    # the function by name, not a formula: given (exp(2v) - 1) / (exp(2v) + 1), 4 of 4 answers for
    # `y = torch.tanh(x)` wrote it out, which is NaN where exp overflows (docs/results/line-yield.md)
    # (the math line names it in the target: tanhf, std::tanh, or Triton's rule)
    "tanh": "tanh is the hyperbolic tangent, from -1 to 1",
    "mish": "mish(v) = v * tanh(softplus(v))",
    "softplus": "softplus(v) = log(1 + exp(v)), or just v where v > 20 (the defaults; with arguments "
                "beta=b, threshold=t it is log(1 + exp(b * v)) / b, or v where b * v > t)",
    "hardswish": "hardswish(v) = v * min(max(v + 3, 0), 6) / 6",
    "hardsigmoid": "hardsigmoid(v) = min(max(v + 3, 0), 6) / 6",
    # parameters in braces: the values the segment's lines give, else the defaults (PARAMETERS)
    "hardtanh": "hardtanh(v) = min(max(v, {min_val}), {max_val})",
    "leaky_relu": "leaky_relu(v) = v if v > 0 else {negative_slope} * v",
    "elu": "elu(v) = v if v > 0 else {alpha} * (exp(v) - 1)",
    "selu": "selu(v) = 1.0507009873554805 * (v if v > 0 else 1.6732632423543772 * (exp(v) - 1))",
    "celu": "celu(v) = max(0, v) + min(0, {alpha} * (exp(v / {alpha}) - 1))",
    "softsign": "softsign(v) = v / (1 + |v|)",
    "logsigmoid": "logsigmoid(v) = -softplus(-v) = min(v, 0) - log(1 + exp(-|v|))",
    "clamp": "clamp(v, min, max) = min(max(v, min), max); a missing bound is not applied",
    "rsqrt": "rsqrt(v) = 1 / sqrt(v)",
    "pow": "pow(v, p) = v^p (v * v for p = 2)",
    "to": ".float() / .to(dtype) changes the storage type only; compute in float32",
    "softmax": "softmax over a row: m = max_j v_j; e_j = exp(v_j - m); out_j = e_j / sum_j e_j",
    "log_softmax": "log_softmax over a row: m = max_j v_j; out_j = v_j - m - log(sum_j exp(v_j - m))",
    "layer_norm": "layer_norm over a row of n values: mean = sum v / n; var = sum (v - mean)^2 / n (biased); "
                  "out = (v - mean) / sqrt(var + eps) * weight + bias",
    "rms_norm": "rms_norm over a row of n values: out = v / sqrt(sum v^2 / n + eps) * weight",
    "sum": "sum over the reduced dims",
    "mean": "mean over the reduced dims = sum / count",
    "amax": "amax = the largest value over the reduced dims",
    "max": "max over the reduced dims",
    "amin": "amin = the smallest value over the reduced dims",
    "min": "min over the reduced dims",
    "logsumexp": "logsumexp over a row: m = max_j v_j; out = m + log(sum_j exp(v_j - m))",
    "cumsum": "cumsum along a row: out_j = v_0 + v_1 + ... + v_j",
    "batch_norm": "batch_norm (eval): out = (v - running_mean[c]) / sqrt(running_var[c] + eps) * weight[c] + bias[c]",
    "erf": "erf is the error function (erff in C/CUDA)",
    "dropout": "dropout with p = 0 or in eval mode is the identity",
}


# The parameters of a definition and their defaults. A definition that wrote the default's value
# (`else 0.01 * v`) was copied over the line's own (`negative_slope = 0.1`), and one that named the
# parameter was copied as an undeclared name: 0 of about 60 answers passed for that line, mostly
# one or the other (an unseen module, docs/results/optimize-cpu.md). So the definition carries the line's value.
PARAMETERS: dict[str, dict[str, str]] = {
    "leaky_relu": {"negative_slope": "0.01"},
    "elu": {"alpha": "1.0"},
    "celu": {"alpha": "1.0"},
    "hardtanh": {"min_val": "-1.0", "max_val": "1.0"},
}
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


def _value(param: str, default: str, texts: Sequence[str]) -> str:
    """The value the lines give `param` (`negative_slope = 0.1`), the default where none does; where
    they give it several values, its name with the default (the model reads the lines)."""
    found = {m for text in texts for m in re.findall(rf"(?<![\w.]){param}\s*=\s*{_NUMBER}", text)}
    if len(found) > 1:
        return f"{param} (as its line gives it; {default} by default)"
    return next(iter(found)) if found else default


def notes_for(targets: list[str], texts: Sequence[str] = ()) -> list[str]:
    """Definitions for the ops in ``targets`` that need one, each once, in order; a definition with
    parameters gets the values ``texts`` (the segment's torch lines and module notes) give them."""
    seen: list[str] = []
    for t in targets:
        if t not in DEFINITIONS:
            continue
        note = DEFINITIONS[t].format(**{p: _value(p, d, texts) for p, d in PARAMETERS.get(t, {}).items()})
        if note not in seen:
            seen.append(note)
    return seen
