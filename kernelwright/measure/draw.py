"""A task's inputs for one seed, drawn where they are used.

One place for it, because the evaluator's worker, optimize's baseline probe, the analysis runner
and the scaffold planner must all draw the same inputs for the same seed (optimize pairs its
torch.compile timing with the evaluator's input sets: seeds seed+1000+i).

On a GPU the task's `get_inputs()` runs with the GPU as the default device, so its tensors are
drawn there (torch.manual_seed seeds the GPU generator too): at benchmark sizes `get_inputs()`
draws ~1 GiB tensors, ~2 s each on a CPU, and one candidate's checks, timing and recheck draw 14
sets — on the H200 that was ~30 of the ~35 s the evaluator spent per candidate. A `get_inputs()`
that cannot run there (it goes through NumPy, say) is drawn on the CPU and copied, as before.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

# The seed a task's parameters and inputs are drawn from unless a run says otherwise: the
# evaluator's (EvalConfig.seed), and so also the analysis, the scaffold planner and optimize's
# probe, which must see the very same module and inputs.
SEED = 42


def seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


def draw_inputs(get_inputs: Callable[[], Any], seed: int, device: Any) -> list[Any]:
    """`get_inputs()` under `seed`, every tensor on `device` (a torch.device)."""
    import torch

    seed_all(seed)
    if device.type == "cuda":
        try:
            with device:
                raw = get_inputs()
        except Exception:  # noqa: BLE001 -- the CPU draw below raises whatever is really wrong
            seed_all(seed)
            raw = get_inputs()
    else:
        raw = get_inputs()
    if not isinstance(raw, (list, tuple)):
        raise TypeError(f"get_inputs() returned a {type(raw).__name__}, not a list of inputs")
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in raw]
