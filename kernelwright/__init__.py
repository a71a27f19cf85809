"""kernelwright: a local code model rewrites PyTorch modules into custom kernels; a sandboxed
evaluator proves every result (custom code ran, outputs match on fresh inputs, timed by us)."""

__version__ = "0.1.0"
