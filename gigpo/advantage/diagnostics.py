"""Step-group statistics for logging: how often states recur, and how the group sizes are spread.

The paper's training diagnostic: early on, agents loop and step groups are skewed (many singletons,
a few huge groups); as training goes on sizes move towards the group size N.
"""
from __future__ import annotations

import numpy as np

from gigpo.advantage.estimators import AdvantageResult

HISTOGRAM_MAX = 16  # sizes above this share one bin, "gt16"


def step_group_diagnostics(result: AdvantageResult, prefix: str = "adv/") -> dict[str, float]:
    """A flat dict of floats: step-group count, singleton share, mean size, size histogram, advantage stats.

    Computed from `step_group_size` alone: a group of size s contributes s rows of size s.
    Histogram keys `adv/step_group_size/{s}` hold the share of step groups of size s (1..16, "gt16").
    """
    size = result.step_group_size
    n_rows = len(size)
    stats: dict[str, float] = {f"{prefix}rows": float(n_rows)}
    if n_rows == 0:
        return stats
    rows_per_size = np.bincount(size)                     # rows whose group has size s
    sizes = np.flatnonzero(rows_per_size)
    groups_per_size = rows_per_size[sizes] // sizes       # exact: s rows per group of size s
    n_groups = int(groups_per_size.sum())
    stats[f"{prefix}step_groups"] = float(n_groups)
    stats[f"{prefix}singleton_row_share"] = float(rows_per_size[1] / n_rows) if len(rows_per_size) > 1 else 0.0
    stats[f"{prefix}step_group_size_mean"] = n_rows / n_groups
    stats[f"{prefix}step_group_size_max"] = float(sizes.max())
    for s in range(1, HISTOGRAM_MAX + 1):
        share = groups_per_size[sizes == s].sum() / n_groups
        stats[f"{prefix}step_group_size/{s}"] = float(share)
    stats[f"{prefix}step_group_size/gt{HISTOGRAM_MAX}"] = float(groups_per_size[sizes > HISTOGRAM_MAX].sum() / n_groups)
    for name in ("advantage", "episode_advantage", "step_advantage"):
        values = getattr(result, name)
        stats[f"{prefix}{name}_mean"] = float(values.mean())
        stats[f"{prefix}{name}_std"] = float(values.std())
    stats[f"{prefix}zero_advantage_share"] = float(np.mean(result.advantage == 0.0))
    return stats
