"""Vectorised building blocks: dense ids, per-group normalisation, and per-trajectory backward sums.

Everything here works on flat arrays with numpy sorts and `bincount`; no Python loop runs per row.
The one loop left, in `reverse_discounted_sum`, runs once per step *position* (at most the longest
trajectory, e.g. 50 in ALFWorld) and processes all trajectories at that position together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

STD_EPS = 1e-6  # added to the std before dividing, as in GRPO and the paper
COMBINED_KEY_LIMIT = 2**62  # above this, (group, traj, step) codes do not fit one int64 sort key


def dense_ids(key: np.ndarray) -> tuple[np.ndarray, int]:
    """(N,) ids in [0, n) numbering the distinct values of `key` in sorted order, and n."""
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64), 0
    order = np.argsort(key)                    # introsort: ~10x faster than a stable sort on int64
    sorted_key = key[order]
    starts = np.empty(len(key), dtype=bool)
    starts[0] = True
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=starts[1:])
    ids = np.empty(len(key), dtype=np.int64)
    ids[order] = np.cumsum(starts) - 1
    return ids, int(starts.sum())


def dense_pair_ids(a: np.ndarray, n_a: int, b: np.ndarray) -> tuple[np.ndarray, int]:
    """(N,) ids numbering the distinct (a, b) pairs, for a in [0, n_a) and any int64 b, and their count."""
    b_ids, n_b = dense_ids(b)
    return dense_ids(a * n_b + b_ids)          # < n_a * n_b <= N^2: no overflow


def _codes(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Small non-negative codes preserving the order of x, and their range (dense ids if x is spread out)."""
    if len(x) == 0:
        return x, 1
    low, high = int(x.min()), int(x.max())
    if high - low < 4 * len(x) + 64:           # typical ids and step indices: no sort needed
        return x - low, high - low + 1
    return dense_ids(x)


def normalise_in_groups(x: np.ndarray, ids: np.ndarray, n_ids: int, norm: str, ddof: int = 1) -> np.ndarray:
    """x minus its group mean, divided by (group std + 1e-6) if norm == "std"; 0 in groups of one.

    The std is unbiased (ddof=1, like torch.std) unless `ddof=0` asks for the population std (HGPO's)."""
    count = np.bincount(ids, minlength=n_ids)                       # (n_ids,)
    mean = np.bincount(ids, weights=x, minlength=n_ids) / np.maximum(count, 1)
    out = x - mean[ids]                                             # (N,)
    if norm == "std":
        var = np.bincount(ids, weights=out * out, minlength=n_ids) / np.maximum(count - ddof, 1)
        out /= np.sqrt(var)[ids] + STD_EPS
    # equal values carry no signal: exactly 0, not the mean's rounding error divided by 1e-6 (about 1e-11)
    uniform = group_spread(x, ids, n_ids) == 0.0
    out[(count[ids] < 2) | uniform[ids]] = 0.0
    return out


def group_spread(x: np.ndarray, ids: np.ndarray, n_ids: int) -> np.ndarray:
    """(n_ids,) max - min of x within each group (0 for empty groups)."""
    high = np.full(n_ids, -np.inf)
    low = np.full(n_ids, np.inf)
    np.maximum.at(high, ids, x)
    np.minimum.at(low, ids, x)
    return np.where(np.isfinite(high), high - low, 0.0)


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

    first_duplicate: Optional[tuple[int, int]]
    """Two input rows with the same (group, traj, step), if any (StepRows rejects them)."""

    @classmethod
    def build(cls, group: np.ndarray, traj: np.ndarray, step: np.ndarray) -> "TrajectoryLayout":
        """One sort of the rows by (group, traj, step); everything else follows from it."""
        n_rows = len(group)
        g_code, n_g = _codes(group)
        t_code, n_t = _codes(traj)
        s_code, n_s = _codes(step)
        traj_key = g_code * n_t + t_code
        if n_g * n_t * n_s < COMBINED_KEY_LIMIT:
            order = np.argsort(traj_key * n_s + s_code)
        else:  # huge id ranges: sort by the three keys instead of one combined key
            order = np.lexsort((step, traj, group))
        g_s, t_s, s_s = g_code[order], traj_key[order], s_code[order]
        new_group = np.ones(n_rows, dtype=bool)
        new_group[1:] = g_s[1:] != g_s[:-1]
        new_traj = np.ones(n_rows, dtype=bool)
        new_traj[1:] = t_s[1:] != t_s[:-1]
        repeated = np.flatnonzero(~new_traj[1:] & (s_s[1:] == s_s[:-1]))
        duplicate = None
        if repeated.size:
            i = int(repeated[0])
            duplicate = tuple(sorted((int(order[i]), int(order[i + 1]))))
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
            steps_left=traj_end - np.arange(n_rows) - 1, first_duplicate=duplicate,
        )

    def reverse_discounted_sum(self, x: np.ndarray, discount: float) -> np.ndarray:
        """y_t = x_t + discount * y_{t+1} along each trajectory in step order (y after the last step = 0).

        x and the result are in input row order. Rows are swept by how many steps follow them, so
        each pass updates every trajectory at once; the arithmetic equals the plain backward loop.
        """
        xs = x[self.order]
        ys = xs.copy()
        by_left = np.argsort(self.steps_left)                       # rows with 0 steps left first
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
