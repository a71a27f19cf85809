"""Triton skeleton variants that were tried, in device time: each oracle program rewritten one way
and timed beside the skeleton as it is, eager and torch.compile (device_time.measure: CUDA events,
L2 flushed, the median, in one process). What each variant is and why it was tried:

rows (a Triton row kernel, the skeleton's one program a row):
  runtime_cols  the row length a runtime argument (the skeleton before 2026-12-04b: `cols`, not
                `cols: tl.constexpr`)
  evict         the row's loads `evict_first`, the broadcast vectors' `evict_last` (Inductor's hints)
  reload        the rows re-read after the region's reductions (first read `evict_last`, second
                `evict_first`): Inductor's two-pass reduction, which re-reads the row from L2
  persist       a persistent grid (132 x 4 programs, each looping over rows with tl.range,
                num_stages 2): the next row's loads pipelined behind this row's work
  int32         the row's offsets in 32-bit arithmetic (Inductor indexes in int32 where the
                tensor's elements fit; the skeleton's `row` is int64)
  inductor      int32 + reload: Inductor's two-pass kernel on our one block, but for the broadcast
                vectors' loads (moved after the reductions too, as Inductor's second loop has
                them, 2026-12-04b: LayerNorm and RMSNorm 1-2% slower than without the move)
elementwise (the Triton elementwise skeleton):
  int32         the flat offsets in 32-bit arithmetic (the skeleton's are int64: a broadcast
                input's `(offs // inner) % span` is then a 64-bit division an element)
  const_bcast   each broadcast input's inner and span compile-time constants (one build per
                shape, as Inductor compiles one): the division and modulo become shifts or a
                multiply
  int32_const   both
gemm (the Triton GEMM skeleton; its grouped tile order, once the `group` variant, is its own since
2026-12-04d):
  bk16          BLOCK_K 16 configs (narrower K tiles, larger M x N: measured for the fp32 FMA
                products, 2026-12-04b)

    python benchmarks/kernel_variants.py --tasks builtin:1:8-9 --variant runtime_cols --variant reload

Each variant is timed at warps 4, 8 and 16 (rows; the best is what speed search would keep), at
blocks 1024 and 2048 by warps 4 and 8 (elementwise) or through its autotune list (GEMM). Results:
docs/results/sessions/h200-2026-12-04b.md and h200-2026-12-04c.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # device_time, beside this file

from kernelwright.scaffold import plan_tasks, with_launch, write  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.scaffold.types import SegmentKind  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402


def _kernel_lines(program: str) -> tuple[list[str], int, int]:
    """The program's lines and the span [start, end) of `kw_fused_kernel`'s definition."""
    lines = program.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("def kw_fused_kernel("))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    return lines, start, end


def _policy(line: str, policy: str) -> str:
    return line.replace("other=0.0)", f'other=0.0, eviction_policy="{policy}")', 1)


def runtime_cols(p: str) -> str:
    return p.replace(", cols: tl.constexpr, BLOCK", ", cols, BLOCK", 1)


def evict(p: str) -> str:
    lines, start, end = _kernel_lines(p)
    for i in range(start, end):
        if " = tl.load(" in lines[i] and "mask=mask" in lines[i]:
            lines[i] = _policy(lines[i], "evict_last" if "kw_row_at(" in lines[i] else "evict_first")
    return "\n".join(lines)


def reload(p: str) -> str:
    lines, start, end = _kernel_lines(p)
    last = next(i for i in range(start, end) if "# REGION END" in lines[i]) - 1  # the region's last line
    rows = [i for i in range(start, end) if " = tl.load(" in lines[i] and "row * cols + offs" in lines[i]]
    again = [_policy(lines[i], "evict_first") for i in rows]
    for i in rows:
        lines[i] = _policy(lines[i], "evict_last")
    return "\n".join(lines[:last] + again + lines[last:])


def int32(p: str) -> str:
    p = p.replace("    row = tl.program_id(0).to(tl.int64)\n", "    row = tl.program_id(0)\n", 1)
    return p.replace("    pid = tl.program_id(0).to(tl.int64)\n", "    pid = tl.program_id(0)\n", 1)


def inductor(p: str) -> str:
    return reload(int32(p))


def const_bcast(p: str) -> str:
    lines, start, _ = _kernel_lines(p)
    lines[start] = re.sub(r"(\w+_(?:inner|span))(?=[,)])", r"\1: tl.constexpr", lines[start])
    return "\n".join(lines)


def int32_const(p: str) -> str:
    return const_bcast(int32(p))


def persist(p: str, programs: int = 132 * 4, stages: int = 2) -> str:
    lines, start, end = _kernel_lines(p)
    lines[start] = lines[start].replace("out_ptr, cols", "out_ptr, kw_rows, cols", 1)
    r = next(i for i in range(start, end) if lines[i].strip() == "row = tl.program_id(0).to(tl.int64)")
    head = [f"    for row in tl.range(tl.program_id(0), kw_rows, tl.num_programs(0), num_stages={stages}):",
            "        row = tl.cast(row, tl.int64)"]  # measured as row.to(tl.int64), the same cast; this one interprets
    text = "\n".join(lines[:r] + head + ["    " + line if line else line for line in lines[r + 1:end]] + lines[end:])
    text = text.replace("kw_fused_kernel[(rows,)](", f"kw_fused_kernel[(min(rows, {programs}),)](", 1)
    return text.replace(", out, cols, BLOCK=block", ", out, rows, cols, BLOCK=block", 1)


BK16_CONFIGS = [(128, 128, 16, 3, 8), (128, 128, 16, 5, 8), (256, 128, 16, 3, 8), (128, 256, 16, 3, 8),
               (64, 128, 16, 4, 4), (128, 64, 16, 4, 4), (128, 128, 32, 3, 8), (64, 256, 16, 3, 8),
               (256, 64, 16, 3, 8), (64, 64, 16, 4, 4), (128, 128, 16, 2, 4), (128, 128, 16, 4, 8)]


def bk16(p: str) -> str:
    rows = ",\n".join(f'    triton.Config({{"BLOCK_M": {bm}, "BLOCK_N": {bn}, "BLOCK_K": {bk}}}, num_stages={s}, '
                      f"num_warps={w})" for bm, bn, bk, s, w in BK16_CONFIGS)
    return re.sub(r"KW_GEMM_CONFIGS = \[\n.*?\n\]\n", lambda _: f"KW_GEMM_CONFIGS = [\n{rows},\n]\n", p, count=1,
                  flags=re.S)


ROW_VARIANTS = {"runtime_cols": runtime_cols, "evict": evict, "reload": reload, "persist": persist,
                "int32": int32, "inductor": inductor}
ELEMENTWISE_VARIANTS = {"int32": int32, "const_bcast": const_bcast, "int32_const": int32_const}
GEMM_VARIANTS = {"bk16": bk16}


def programs_for(program: str, kind: SegmentKind, names: list[str]) -> dict[str, str]:
    """label -> program: the skeleton as it is and each variant of its kind that changes it."""
    table = {SegmentKind.GEMM: GEMM_VARIANTS, SegmentKind.ROW: ROW_VARIANTS,
             SegmentKind.ELEMENTWISE: ELEMENTWISE_VARIANTS}[kind]
    chosen = {"as is": program}
    for name in (n for n in names if n in table):
        chosen[name] = table[name](program)
        if chosen[name] == program:  # the skeleton's text moved on: the variant no longer applies
            raise ValueError(f"variant {name} does not change this {kind.value} skeleton")
    if kind == SegmentKind.ELEMENTWISE:
        return {f"{label} b{b} w{w}": with_launch(text, {"block": b, "warps": w}) for label, text in chosen.items()
                for b in (1024, 2048) for w in (4, 8)}
    if kind != SegmentKind.ROW:
        return chosen
    return {f"{label} w{w}": with_launch(text, {"warps": w}) for label, text in chosen.items() for w in (4, 8, 16)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="builtin:1:8-9")
    ap.add_argument("--variant", action="append", choices=sorted(ROW_VARIANTS | GEMM_VARIANTS | ELEMENTWISE_VARIANTS))
    args = ap.parse_args()
    from device_time import measure

    os.environ["KERNELWRIGHT_SIZE"] = "full"
    tasks = load_tasks(args.tasks)
    names = args.variant or sorted(ROW_VARIANTS | GEMM_VARIANTS | ELEMENTWISE_VARIANTS)
    print("| task | variant | ms | x torch.compile | max abs err |\n|---|---|---|---|---|", flush=True)
    for t, p in zip(tasks, plan_tasks(tasks, "full", device="cuda")):
        tp = p.for_target("triton")
        if not tp.available or tp.segment is None:
            continue
        sc = write(p, "triton")
        progs = programs_for(sc.program_with(region(sc)), tp.segment.kind, names)
        times, got = measure(t, progs, "full")
        print(f"| {t.id} | eager | {times.eager_ms:.4f} | | |\n| {t.id} | torch.compile | {times.compile_ms:.4f} | 1 | |",
              flush=True)
        for label, side in got.items():
            x = f"{times.compile_ms / side.program_ms:.3f}" if side.program_ms and times.compile_ms else "-"
            print(f"| {t.id} | {label} | {side.program_ms or 0:.4f} | {x} | "
                  f"{side.errors.get('program', float('nan')):.2g} {side.error} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
