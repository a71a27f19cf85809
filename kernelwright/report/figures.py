"""The report's figures as PNG files (matplotlib, Agg: no display needed)."""

from __future__ import annotations

from pathlib import Path

from kernelwright.report import metrics
from kernelwright.report.metrics import Scored

# One colour per outcome, green for the goal, greys for "nothing to judge", reds for failures.
COLORS = {
    "correct": "#1a9850", "no_custom_kernel": "#a6d96a", "compiled": "#d9ef8b",
    "wrong_output": "#fdae61", "shape_mismatch": "#fee08b", "runtime_error": "#f46d43",
    "compile_error": "#d73027", "hallucinated_api": "#a50026", "syntax_error": "#762a83",
    "no_code": "#bababa", "not_built": "#e0e0e0", "timeout": "#4575b4", "crash": "#313695", "cheat": "#000000",
    "out_of_memory": "#74add1",
    "static_violation": "#8c510a", "cell_failed": "#ff00ff", "none": "#ffffff",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def best_of_n(scored: list[Scored], path: Path) -> bool:
    curves = metrics.best_of_n(scored)
    if not curves:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    for ax, name, title in ((axes[0], "correct", "correct with a custom kernel"), (axes[1], "compile", "compiles")):
        for group, c in curves.items():
            pts = c[name]
            ax.plot([k for k, _ in pts], [100 * r for _, r in pts], marker="o", label=group)
        ax.set_title(f"best-of-n: {title}")
        ax.set_xlabel("n (samples of the first turn)")
        ax.set_ylabel("% of cells (pass@n estimate)")
        ax.set_ylim(-3, 103)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def matrix(scored: list[Scored], path: Path) -> bool:
    if not scored:
        return False
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    multi_seed = len({s.cell.seed for s in scored}) > 1
    col_of = lambda s: s.group + (f" s{s.cell.seed}" if multi_seed else "")
    cols = list(dict.fromkeys(col_of(s) for s in scored))
    tasks = sorted({(s.cell.level if s.cell.level is not None else 99, s.cell.task_id) for s in scored})
    rows = [t for _, t in tasks]
    labels = list(COLORS)
    grid = [[labels.index("none")] * len(cols) for _ in rows]
    for s in scored:
        grid[rows.index(s.cell.task_id)][cols.index(col_of(s))] = labels.index(s.verdict_label)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(cols) + 4), max(2.5, 0.42 * len(rows) + 1.6)), dpi=110)
    ax.imshow(grid, cmap=ListedColormap([COLORS[k] for k in labels]), vmin=0, vmax=len(labels) - 1, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=20, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xticks([x - 0.5 for x in range(1, len(cols))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(rows))], minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="minor", length=0)
    used = [k for k in labels if k != "none" and any(s.verdict_label == k for s in scored)]
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in used], bbox_to_anchor=(1.02, 1), loc="upper left",
              fontsize=8, title="kept candidate")
    ax.set_title("task x regime: verdict of the kept candidate")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True

