"""Vectorised building blocks: dense ids, per-group normalisation, and per-trajectory backward sums.

Everything here works on flat arrays with numpy sorts and `bincount`; no Python loop runs per row.
The one loop left, in `reverse_discounted_sum`, runs once per step *position* (at most the longest
trajectory, e.g. 50 in ALFWorld) and processes all trajectories at that position together.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STD_EPS = 1e-6  # added to the std before dividing, as in GRPO and the paper


def dense_pair_ids(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """(N,) ids in [0, n) numbering the distinct (a, b) pairs in sorted (a, b) order, and n."""
    n_rows = len(a)
    if n_rows == 0:
        return np.zeros(0, dtype=np.int64), 0
    order = np.lexsort((b, a))
    a_s, b_s = a[order], b[order]
    starts = np.empty(n_rows, dtype=bool)
    starts[0] = True
    np.not_equal(a_s[1:], a_s[:-1], out=starts[1:])
    starts[1:] |= b_s[1:] != b_s[:-1]
    ids = np.empty(n_rows, dtype=np.int64)
    ids[order] = np.cumsum(starts) - 1
    return ids, int(starts.sum())


def normalise_in_groups(x: np.ndarray, ids: np.ndarray, n_ids: int, norm: str) -> np.ndarray:
    """x minus its group mean, divided by (unbiased group std + 1e-6) if norm == "std"; 0 in groups of one."""
    count = np.bincount(ids, minlength=n_ids)                       # (n_ids,)
    mean = np.bincount(ids, weights=x, minlength=n_ids) / np.maximum(count, 1)
    out = x - mean[ids]                                             # (N,)
    if norm == "std":
        var = np.bincount(ids, weights=out * out, minlength=n_ids) / np.maximum(count - 1, 1)
        out /= np.sqrt(var)[ids] + STD_EPS
    out[count[ids] < 2] = 0.0
    return out


@dataclass(frozen=True)
class TrajectoryLayout:
    """Where each row sits in its trajectory; computed once per batch from (group, traj, step)."""

    group_id: np.ndarray    # (N,) int64 dense group index of each row
    n_groups: int
    traj_id: np.ndarray     # (N,) int64 dense trajectory index of each row
    n_trajs: int
    traj_group: np.ndarray  # (n_trajs,) int64 dense group index of each trajectory
    order: np.ndarray       # (N,) rows sorted by (group, traj, step)
    steps_left: np.ndarray  # (N,) int64 in sorted order: how many steps of its trajectory follow this row

    @classmethod
    def build(cls, group: np.ndarray, traj: np.ndarray, step: np.ndarray) -> "TrajectoryLayout":
        n_rows = len(group)
        order = np.lexsort((step, traj, group))
        g_s, t_s = group[order], traj[order]
        new_group = np.ones(n_rows, dtype=bool)
        new_group[1:] = g_s[1:] != g_s[:-1]
        new_traj = new_group.copy()
        new_traj[1:] |= t_s[1:] != t_s[:-1]
        group_sorted = np.cumsum(new_group) - 1
        traj_sorted = np.cumsum(new_traj) - 1
        group_id = np.empty(n_rows, dtype=np.int64)
        traj_id = np.empty(n_rows, dtype=np.int64)
        group_id[order] = group_sorted
        traj_id[order] = traj_sorted
        traj_starts = np.flatnonzero(new_traj)
        traj_len = np.diff(np.append(traj_starts, n_rows))
        traj_end = np.repeat(traj_starts + traj_len, traj_len)      # (N,) one past the trajectory's last row
        return cls(
            group_id=group_id, n_groups=int(new_group.sum()), traj_id=traj_id, n_trajs=len(traj_starts),
            traj_group=group_sorted[traj_starts], order=order,
            steps_left=traj_end - np.arange(n_rows) - 1,
        )

    def reverse_discounted_sum(self, x: np.ndarray, discount: float) -> np.ndarray:
        """y_t = x_t + discount * y_{t+1} along each trajectory in step order (y after the last step = 0).

        x and the result are in input row order. Rows are swept by how many steps follow them, so
        each pass updates every trajectory at once; the arithmetic equals the plain backward loop.
        """
        xs = x[self.order]
        ys = xs.copy()
        by_left = np.argsort(self.steps_left, kind="stable")        # rows with 0 steps left first
        bounds = np.cumsum(np.bincount(self.steps_left))
        for left in range(1, len(bounds)):
            idx = by_left[bounds[left - 1]:bounds[left]]
            ys[idx] = xs[idx] + discount * ys[idx + 1]
        y = np.empty_like(ys)
        y[self.order] = ys
        return y

    def next_in_trajectory(self, x: np.ndarray) -> np.ndarray:
        """x of the row's next step in its trajectory, 0 after the last step (input row order)."""
        xs = x[self.order]
        nxt = np.zeros_like(xs)
        has_next = self.steps_left > 0
        nxt[has_next] = xs[np.flatnonzero(has_next) + 1]
        out = np.empty_like(nxt)
        out[self.order] = nxt
        return out
