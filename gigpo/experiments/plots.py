"""Learning curves as PNG files, from metrics.jsonl records (matplotlib, no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

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
    ("revisit/multi_row_share", "rows in step groups > 1 (any algorithm)"),
    ("revisit/self_revisit_share", "rows revisiting own earlier state"),
)


def save_figure(fig: "plt.Figure", out_path: str | Path) -> Path:
    """Lay out, write and close a figure (closed so that many plots in one process do not pile up)."""
    fig.tight_layout()
    out = Path(out_path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


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
    return save_figure(fig, out_path)


def common_grid(curves: Sequence[tuple[Sequence[float], Sequence[float]]], points: int = 60):
    """Points from 0 to the shortest curve's last x, where every curve is defined (None if none has data)."""
    import numpy as np

    ends = [max(xs) for xs, _ in curves if len(xs)]
    if not ends or len(ends) < len(curves):
        return None
    return np.linspace(0, min(ends), points)


def plot_comparison(curves: dict[str, list[tuple[list[float], list[float]]]], out_path: str | Path,
                    x_label: str = "environment steps", y_label: str = "eval success",
                    paired: Optional[tuple[str, str]] = None) -> Path:
    """Mean curve per algorithm with its 95% t-interval across seeds as a band, each seed faint behind it.

    x values may differ between seeds: curves are interpolated onto a grid up to the shortest run.
    `paired=(a, b)` adds a second panel: the difference a - b between the runs at the same position of
    the two lists (the same seed), with its band.
    """
    from gigpo.experiments.paired import mean_band

    panels = 2 if paired else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    ax = axes[0, 0]
    for idx, (algo, runs) in enumerate(sorted(curves.items())):
        color = f"C{idx}"
        for xs, ys in runs:
            ax.plot(xs, ys, color=color, alpha=0.2, lw=0.8)
        runs = [r for r in runs if r[0]]
        grid = common_grid(runs)
        if grid is not None:
            mean, low, high = mean_band(runs, grid)
            ax.plot(grid, mean, color=color, lw=2.2, label=f"{algo} (n={len(runs)})")
            ax.fill_between(grid, low, high, color=color, alpha=0.18, lw=0)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title("mean and 95% CI across seeds", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    if paired:
        a, b = paired
        ax = axes[0, 1]
        pairs = [(ca, cb) for ca, cb in zip(curves.get(a, []), curves.get(b, [])) if ca[0] and cb[0]]
        grid = common_grid([c for pair in pairs for c in pair])
        if grid is not None:
            import numpy as np

            diffs = [(grid, np.interp(grid, *ca) - np.interp(grid, *cb)) for ca, cb in pairs]
            for xs, ys in diffs:
                ax.plot(xs, ys, color="C3", alpha=0.25, lw=0.8)
            mean, low, high = mean_band(diffs, grid)
            ax.plot(grid, mean, color="C3", lw=2.2, label=f"{a} - {b}, paired (n={len(pairs)})")
            ax.fill_between(grid, low, high, color="C3", alpha=0.18, lw=0)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xlabel(x_label)
        ax.set_ylabel(f"difference in {y_label}")
        ax.set_title("paired difference, mean and 95% CI", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, out_path)


def plot_size_histograms(histograms: dict[str, list[float]], labels: Sequence[str], out_path: str | Path,
                         title: str = "step-group sizes") -> Path:
    """Share of step groups of each size (one line per phase of training), as logged in adv/step_group_size/<k>."""
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for idx, (phase, shares) in enumerate(histograms.items()):
        ax.plot(range(1, len(shares) + 1), shares, marker="o", ms=3, color=f"C{idx}", label=phase)
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.set_xlabel("step-group size")
    ax.set_ylabel("share of step groups")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, out_path)
