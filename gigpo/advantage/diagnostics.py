"""Step-group statistics for logging: how often states recur, and how the group sizes are spread.

The paper's training diagnostic: early on, agents loop and step groups are skewed (many singletons,
a few huge groups); as training goes on sizes move towards the group size N.

Two views are logged. `adv/` describes the step groups the estimator actually used (GiGPO's; every
row is its own group for GRPO, RLOO and PPO). `revisit/` groups rows by exact anchor inside each task
group whatever the estimator, so runs of different algorithms can be compared on how much their
policies revisit states, and it counts revisits of a trajectory's own earlier states (loops).
"""
from __future__ import annotations

import numpy as np

from gigpo.advantage.rows import StepRows
from gigpo.advantage.segments import dense_pair_ids

HISTOGRAM_MAX = 16  # sizes above this share one bin, "gt16"
QUANTILES = (0.5, 0.9)


def size_summary(size: np.ndarray, prefix: str) -> dict[str, float]:
    """Row-weighted summary of per-row group sizes: share of rows in groups larger than one, quantiles.

    Quantiles are over rows (what share of the trained rows sit in groups of at most that size), the
    view that matters for the loss; `step_group_size_mean` below is over groups.
    """
    if len(size) == 0:
        return {}
    stats = {f"{prefix}multi_row_share": float(np.mean(size > 1))}
    for q in QUANTILES:
        stats[f"{prefix}size_p{round(q * 100)}"] = float(np.quantile(size, q, method="inverted_cdf"))
    return stats


def step_group_diagnostics(result: StepRows, prefix: str = "adv/") -> dict[str, float]:
    """Of rows an estimator scored, a flat dict of floats: step-group count, singleton share, mean size, size histogram, advantage stats.

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
    stats.update(size_summary(size, f"{prefix}step_group_"))
    for s in range(1, HISTOGRAM_MAX + 1):
        share = groups_per_size[sizes == s].sum() / n_groups
        stats[f"{prefix}step_group_size/{s}"] = float(share)
    stats[f"{prefix}step_group_size/gt{HISTOGRAM_MAX}"] = float(groups_per_size[sizes > HISTOGRAM_MAX].sum() / n_groups)
    for name in ("advantage", "episode_advantage", "step_advantage"):
        values = getattr(result, name)
        stats[f"{prefix}{name}_mean"] = float(values.mean())
        stats[f"{prefix}{name}_std"] = float(values.std())
    stats[f"{prefix}zero_advantage_share"] = float(np.mean(result.advantage == 0.0))
    # rows whose step part is non-zero: the ones step-level credit reaches (a singleton group, or a group whose
    # returns are all equal, gives 0), the same measure for every estimator that has a step part (0 for GRPO)
    stats[f"{prefix}step_signal_share"] = float(np.mean(result.step_advantage != 0.0))
    return stats


def revisit_diagnostics(rows: StepRows, prefix: str = "revisit/") -> dict[str, float]:
    """How often states recur in a batch, whatever the estimator: exact-anchor groups inside each task group.

    `multi_row_share` and `size_p50/p90` describe the groups GiGPO would form (exact anchors);
    `group_size_mean` is over groups, as `adv/step_group_size_mean`; `self_revisit_share` is the share
    of rows whose state their own trajectory had already visited (a loop: such rows share a step group
    with their own earlier visits).
    """
    n_rows = len(rows)
    if n_rows == 0:
        return {}
    layout = rows.layout
    group_of_step, n_step_groups = dense_pair_ids(layout.group_id, layout.n_groups, rows.anchor)
    size = np.bincount(group_of_step, minlength=n_step_groups)[group_of_step]
    _, n_traj_states = dense_pair_ids(layout.traj_id, layout.n_trajs, rows.anchor)
    stats = size_summary(size, prefix)
    stats[f"{prefix}group_size_mean"] = n_rows / n_step_groups
    stats[f"{prefix}self_revisit_share"] = 1.0 - n_traj_states / n_rows
    return stats
