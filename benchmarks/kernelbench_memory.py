"""The judge's device memory at KernelBench's sizes, against KernelBench's own evaluator.

    python benchmarks/kernelbench_memory.py [--data ../shared/kernelbench] [--out docs/results/kernelbench-memory.md]

For every problem of levels 1-3 present (21 and up), one call's input and output bytes and the
module's parameter bytes come from its shapes alone: the module is built and run on the meta device
(nothing is allocated; a forward that needs values, `.item()`, has no output size and says so). Then
kernelwright.measure.footprint gives the evaluation's peak (the larger of correctness and timing),
beside KernelBench's (one context, both modules' parameters, the inputs, both outputs) and beside
the peak the judge had before footprint.py's rules (arenas of two calls at any size, every earlier
trial's outputs kept, the reference's outputs held for the shapes, the inputs copied again for the
in-place check, the previous call's set alive while the next was drawn, the comparison in float64
over the whole output).
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from kernelwright.measure import footprint as fp  # noqa: E402

CARD_BYTES = 81559 * fp.MIB  # an H100 80GB as its driver counts it (nvidia-smi memory.total)


class PeakLive(TorchDispatchMode):
    """The most bytes of storage the ops run under it held alive at once (meta tensors: the sizes a
    real run would allocate; storages made before it, the inputs and parameters, not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.total = 0  # the live storages' bytes, freed ones included until the next purge
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                if ref.cdata not in self.live:
                    self.live[ref.cdata] = (ref, storage.nbytes())
                    self.total += storage.nbytes()
        if self.total > self.peak:
            # only a total above the peak can raise it: the freed storages are counted off then, not
            # after every op (a recurrent network runs tens of thousands of them)
            for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
                self.total -= self.live.pop(key)[1]
            self.peak = max(self.peak, self.total)
        return out


@dataclass
class Row:
    level: int
    number: int
    name: str
    call: Optional[fp.Call] = None
    note: str = ""


def sizes(path: Path) -> tuple[Optional[fp.Call], str]:
    """(the call's bytes, "") or (None or a call without outputs, why) from the problem's shapes."""
    module = types.ModuleType(path.stem)
    try:
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)  # noqa: S102 - the benchmark's own data
    except Exception as e:  # noqa: BLE001 - a problem that does not import here is a row saying so
        return None, f"does not import here: {type(e).__name__}: {e}"
    with torch.device("meta"), torch.no_grad():
        torch.manual_seed(0)
        inputs = module.get_inputs()
        try:
            model = module.Model(*module.get_init_inputs())
        except Exception as e:  # noqa: BLE001 - a constructor that needs values (`.item()`)
            return fp.Call(fp.tensor_bytes(inputs), 0), f"does not build on meta ({type(e).__name__})"
        params = fp.tensor_bytes(list(model.parameters()) + list(model.buffers()))
        try:
            with PeakLive() as live:
                out = fp.tensor_bytes(model(*inputs))
        except Exception as e:  # noqa: BLE001
            return fp.Call(fp.tensor_bytes(inputs), 0, params), f"output size unknown on meta ({type(e).__name__})"
    return fp.Call(fp.tensor_bytes(inputs), out, params, work_bytes=max(0, live.peak - out)), ""


def before(call: fp.Call) -> int:
    """The judge's peak before footprint.py (module docstring), the same parts counted."""
    i, o, p, c, w = call.in_bytes, call.out_bytes, call.param_bytes, fp.CONTEXT_BYTES, call.work_bytes
    whole_compare = 12 * o
    correctness = (3 * c + 3 * p + 2 * call.call_bytes + 2 * i + (4 + 2 * (call.trials - 1)) * o + whole_compare
                   + 2 * w)
    timing = 3 * c + 3 * p + 4 * call.call_bytes + 4 * i + 7 * o + whole_compare + 3 * w + fp.FLUSH_BYTES
    return max(correctness, timing)


def gib(n: int) -> str:
    return f"{n / fp.GIB:.2f}"


def table(rows: list[Row]) -> str:
    lines = ["| problem | inputs GiB | outputs GiB | params GiB | intermediates GiB | KernelBench GiB | ours GiB | stage "
             "| ours before GiB | note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| L{r.level}/{r.number} {r.name} "
        if r.call is None or r.note:
            known = f"| {gib(r.call.in_bytes)} | | {gib(r.call.param_bytes)} " if r.call else "| | | "
            lines.append(head + known + "| | | | | | " + r.note + " |")
            continue
        c, peak = r.call, fp.peak(r.call)
        stage = "timing" if peak == fp.timing(c) else "correctness"
        lines.append(head + f"| {gib(c.in_bytes)} | {gib(c.out_bytes)} | {gib(c.param_bytes)} | {gib(c.work_bytes)} "
                     f"| {gib(fp.kernelbench(c))} "
                     f"| {gib(peak.total)} | {stage} | {gib(before(c))} | {r.note} |")
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    known = [r for r in rows if r.call is not None and not r.note]
    kb_fits = [r for r in known if fp.kernelbench(r.call) <= CARD_BYTES]
    ours = [r for r in kb_fits if fp.peak(r.call).total <= CARD_BYTES]
    old = [r for r in kb_fits if before(r.call) <= CARD_BYTES]
    worst = max(known, key=lambda r: fp.peak(r.call).total / fp.kernelbench(r.call))
    over = [f"L{r.level}/{r.number}" for r in kb_fits if fp.peak(r.call).total > CARD_BYTES]
    return "\n".join([
        f"- problems with every size known: {len(known)} of {len(rows)}",
        f"- KernelBench's evaluator fits an 80 GB card ({CARD_BYTES / fp.GIB:.1f} GiB): {len(kb_fits)}",
        f"- of those, ours fits now: **{len(ours)}**; before footprint.py's rules: {len(old)}"
        + (f"; over the card now: {', '.join(over)}" if over else ""),
        f"- largest ratio ours / KernelBench's: {fp.peak(worst.call).total / fp.kernelbench(worst.call):.2f} "
        f"(L{worst.level}/{worst.number})",
    ])


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "kernelbench")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "kernelbench-memory.md")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"error: no KernelBench folder at {args.data}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    started = time.monotonic()
    for level in (1, 2, 3):
        files = sorted((args.data / f"level{level}").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
        for path in files:
            number, _, name = path.stem.partition("_")
            call, note = sizes(path)
            rows.append(Row(level, int(number), name, call, note))
            print(f"L{level}/{number}: {note or 'ok'}", file=sys.stderr)
    text = "\n".join([
        "# The judge's device memory at KernelBench's sizes",
        "",
        "Written by `python benchmarks/kernelbench_memory.py` (no GPU: sizes from the meta device, "
        f"{time.monotonic() - started:.0f} s). Peaks are kernelwright.measure.footprint's accounting "
        f"(contexts counted at {fp.CONTEXT_BYTES >> 20} MiB each, an estimate; the forward's intermediates "
        "measured on the meta device: the most storage its ops held alive at once, beyond its output). KernelBench: one context, both modules' parameters, "
        "the inputs, the reference's and the new module's outputs, one forward's intermediates. `ours before`: the same count for the "
        "judge before footprint.py's rules (arenas of two calls at any size, every trial's outputs kept, "
        "inputs copied again for the in-place check, whole-output float64 comparison).",
        "",
        summary(rows),
        "",
        table(rows),
        "",
    ])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
