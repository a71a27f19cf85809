"""Triton's fp32 `tl.dot` with and without input_precision="ieee", against torch's matmul, on a GPU:
the check behind the gemm skeleton's numerics policy (docs/scaffold.md, "GEMM layout"). Standalone
(no kernelwright import), the same K loop, autotune-with-pruning and `tl.dot(a, b, acc, ...)` call as
the skeleton, so it also shows that the installed Triton accepts them.

    python3 benchmarks/tf32_dot_check.py
"""

import torch
import triton
import triton.language as tl


def prune(configs, named_args, **kw):
    return [c for c in configs if c.kwargs["BM"] <= max(32, triton.next_power_of_2(named_args["M"]))] or configs[:1]


@triton.autotune(configs=[triton.Config({"BM": 128, "BN": 128, "BK": 32}, num_stages=3, num_warps=8),
                          triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_stages=4, num_warps=4)],
                 key=["M", "N", "K"], prune_configs_by={"early_config_prune": prune})
@triton.jit
def k(a, b, o, M, N, K, IEEE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (rk[None, :] + k0), mask=(rm[:, None] < M) & (rk[None, :] + k0 < K), other=0.0)
        y = tl.load(b + (rk[:, None] + k0) * N + rn[None, :], mask=(rk[:, None] + k0 < K) & (rn[None, :] < N), other=0.0)
        if IEEE:
            acc = tl.dot(x, y, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, y, acc)
    tl.store(o + rm[:, None] * N + rn[None, :], acc.to(o.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def main() -> None:
    torch.manual_seed(0)
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0))
    for dt in (torch.float32, torch.float16):
        a = torch.randn(4096, 8192, device="cuda", dtype=dt)
        b = torch.randn(8192, 4096, device="cuda", dtype=dt)
        ref = a @ b
        for ieee in (True, False):
            o = torch.empty(4096, 4096, device="cuda", dtype=dt)
            k[lambda m: (triton.cdiv(4096, m["BM"]), triton.cdiv(4096, m["BN"]))](a, b, o, 4096, 4096, 8192, ieee)
            tol = 1e-4 if dt == torch.float32 else 1e-2
            print(dt, "ieee" if ieee else "default", "allclose:", torch.allclose(o.float(), ref.float(), atol=tol, rtol=tol),
                  "max diff", (o.float() - ref.float()).abs().max().item(), k.best_config)


if __name__ == "__main__":
    main()
