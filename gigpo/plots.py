"""Learning curves as PNG files, from metrics.jsonl records (matplotlib, no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RUN_CURVES = (
    ("rollout/success", "train success (sampled)"),
    ("eval/success", "eval success (greedy, held out)"),
    ("rollout/return", "train return"),
    ("loss/entropy", "policy entropy"),
    ("loss/kl", "KL to reference"),
    ("adv/step_group_size_mean", "mean step-group size"),
)


def _series(records: Sequence[dict[str, Any]], x_key: str, y_key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for rec in records:
        if y_key in rec and x_key in rec and isinstance(rec[y_key], (int, float)):
            xs.append(rec[x_key])
            ys.append(rec[y_key])
    return xs, ys


def plot_run(records: Sequence[dict[str, Any]], out_path: str | Path, x_key: str = "iteration") -> Path:
    """One figure with a panel per curve that the run logged."""
    present = [(k, t) for k, t in RUN_CURVES if any(k in r for r in records)]
    cols = 3
    rows = max(1, -(-len(present) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, (key, title) in zip(axes.flat, present):
        xs, ys = _series(records, x_key, key)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(x_key)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present):]:
        ax.axis("off")
    fig.tight_layout()
    out = Path(out_path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_comparison(curves: dict[str, list[tuple[list[float], list[float]]]], out_path: str | Path,
                    x_label: str = "environment steps", y_label: str = "eval success") -> Path:
    """Mean curve per algorithm with each seed faint behind it; x values may differ between seeds."""
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for idx, (algo, runs) in enumerate(sorted(curves.items())):
        color = f"C{idx}"
        for xs, ys in runs:
            ax.plot(xs, ys, color=color, alpha=0.25, lw=1)
        runs = [r for r in runs if r[0]]
        if runs:
            grid = np.linspace(0, min(max(xs) for xs, _ in runs), 50)
            mean = np.mean([np.interp(grid, xs, ys) for xs, ys in runs], axis=0)
            ax.plot(grid, mean, color=color, lw=2.2, label=f"{algo} (n={len(runs)})")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(out_path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
