"""HGPO (Hierarchy-of-Groups Policy Optimization, ICLR 2026, arXiv 2602.22817) as an estimator.

GiGPO's step group mixes every visit of a state, whatever came before it. HGPO puts a step into nested
groups instead: for k = 1..K+1, the steps of its task group whose last k states (the current one and
the k-1 before it, in its own trajectory) equal its own. A step with fewer than k-1 earlier steps is in
no group of that k. Definitions (matching verl-agent's recipe/hgpo/core_hgpo.py):

- R_t = sum_{j>=t} gamma^(j-t) r_j along the trajectory (the same returns as GiGPO's step part).
- In each group of two or more rows: A_k = (R_t - mean) / (std + 1e-6) with the *population* std
  (norm="std"), or R_t - mean (norm="mean"). A group of one gives no value.
  A row at its group's mean (to rounding: at_group_mean) has value exactly 0.
- A row's advantage is the weighted mean of its groups' values, weight L**alpha with L = k + 1 (a
  group keyed by k states), over the groups whose value is not exactly 0; sum(w A) / (sum(w) + 1e-6).
  With `hgpo_episode_group`, the episode-level advantage (episode_part, as GiGPO's) joins as one
  more group with L = 1. A row with no such group gets 0.

The history key of length k is built from the anchor keys already in the rows: the length-(k-1) key's
dense id paired with the anchor k-1 steps back, one numpy sort per k. Outputs: `advantage` (the mean),
`step_advantage` (the same mean over the history groups alone), `episode_advantage` (the episode group's
value when it takes part, else 0), `step_group_size` (the k = 1 group: GiGPO's), `returns` (R_t).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from gigpo.advantage.estimators import AdvantageOptions, episode_part, register_estimator, scored
from gigpo.advantage.rows import StepRows
from gigpo.advantage.segments import STD_EPS, dense_ids, dense_pair_ids, normalise_in_groups


def trajectory_positions(traj_sorted: np.ndarray) -> np.ndarray:
    """(N,) each row's index inside its trajectory, for rows sorted by (group, traj, step)."""
    n = len(traj_sorted)
    starts = np.flatnonzero(np.r_[True, traj_sorted[1:] != traj_sorted[:-1]]) if n else np.zeros(0, np.int64)
    lengths = np.diff(np.append(starts, n))
    return np.arange(n) - np.repeat(starts, lengths)


def history_group_advantages(returns: np.ndarray, group: np.ndarray, anchor: np.ndarray,
                             position: np.ndarray, depth: int,
                             norm: str) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Yield (k, rows, values, sizes) for k = 1..depth+1: the sorted rows that have k states of history,
    their group-normalised returns in the groups keyed by those k states, and the groups' sizes.

    All arrays are in (group, traj, step) order, so the anchor k-1 steps back is `anchor[rows - (k-1)]`.
    """
    rows = np.arange(len(returns))
    state, n_states = dense_ids(anchor)                    # once: each depth then costs one sort
    key, n_keys = dense_ids(group * n_states + state)      # < N^2: no overflow
    for k in range(1, depth + 2):
        if k > 1:
            keep = position[rows] >= k - 1
            rows, key = rows[keep], key[keep]
            if len(rows) == 0:
                return
            key, n_keys = dense_ids(key * n_states + state[rows - (k - 1)])
        x = returns[rows]
        values = normalise_in_groups(x, key, n_keys, norm, ddof=0)
        values[at_group_mean(x, key, n_keys)] = 0.0
        yield k, rows, values, np.bincount(key, minlength=n_keys)[key]


def at_group_mean(x: np.ndarray, ids: np.ndarray, n_ids: int) -> np.ndarray:
    """(N,) rows whose x equals its group's mean up to rounding (a few ulps of the group's largest |x|).

    HGPO leaves a group out of a row's mean where the row's value there is exactly 0. Whether x - mean
    rounds to 0 or to 1e-16 depends on summation order; that must not decide the weighting."""
    count = np.bincount(ids, minlength=n_ids)
    mean = np.bincount(ids, weights=x, minlength=n_ids) / np.maximum(count, 1)
    scale = np.zeros(n_ids)
    np.maximum.at(scale, ids, np.abs(x))
    return np.abs(x - mean[ids]) <= 8 * np.finfo(np.float64).eps * scale[ids]


@register_estimator("hgpo")
def hgpo(rows: StepRows, options: AdvantageOptions) -> StepRows:
    """Weighted mean of the advantages of a step's nested history groups (Sec. 3 of the HGPO paper)."""
    options.require("hgpo", "hgpo_history", "hgpo_alpha", "hgpo_episode_group")
    layout = rows.layout
    order = layout.order
    returns = layout.reverse_discounted_sum(rows.reward, options.gamma)
    group_id, n_groups = layout.group_id, layout.n_groups
    if options.split_versions and rows.policy_version is not None:
        group_id, n_groups = dense_pair_ids(group_id, n_groups, rows.policy_version)
    n = len(rows)
    weighted = np.zeros(n)        # sum of w * A over the groups with A != 0 (sorted order)
    weights = np.zeros(n)         # sum of those w
    size_sorted = np.ones(n, dtype=np.int64)
    groups = history_group_advantages(returns[order], group_id[order], rows.anchor[order],
                                      trajectory_positions(layout.traj_id[order]), options.hgpo_history, options.norm)
    for k, members, values, sizes in groups:
        w = float(k + 1) ** options.hgpo_alpha
        counted = values != 0.0
        weighted[members[counted]] += w * values[counted]
        weights[members[counted]] += w
        if k == 1:
            size_sorted = sizes
    step_sorted = weighted / (weights + STD_EPS)
    episode = np.zeros(n)
    if options.hgpo_episode_group:
        episode = episode_part(rows, layout, options.norm, options.episode_stats)
        ep_sorted = episode[order]
        counted = ep_sorted != 0.0
        weighted[counted] += ep_sorted[counted]          # L = 1: weight 1 for any alpha
        weights[counted] += 1.0
    advantage, step, size = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)
    advantage[order] = weighted / (weights + STD_EPS)
    step[order] = step_sorted
    size[order] = size_sorted
    return scored(rows, advantage, episode, step, size, returns)
