"""Dynamic sampling (DAPO's filter): keep only groups whose trajectories did not all score the same.

A group whose trajectory returns are all equal has episode advantage 0 everywhere under GRPO (and
only step-level signal under GiGPO); DAPO drops such groups and the rollout re-draws tasks to refill
the batch (the re-draw loop belongs to the trainer). A group of one trajectory counts as all equal.
"""
from __future__ import annotations

import numpy as np

from gigpo.advantage.rows import StepRows


def informative_groups(rows: StepRows) -> np.ndarray:
    """(N,) bool: True for rows whose group has at least two different trajectory returns.

    Use `rows.select(mask)` to keep them and `np.unique(rows.group[~mask])` for the groups to re-draw.
    """
    layout = rows.layout
    traj_return = np.bincount(layout.traj_id, weights=rows.reward, minlength=layout.n_trajs)  # (n_trajs,)
    high = np.full(layout.n_groups, -np.inf)
    low = np.full(layout.n_groups, np.inf)
    np.maximum.at(high, layout.traj_group, traj_return)
    np.minimum.at(low, layout.traj_group, traj_return)
    return (high > low)[layout.group_id]
