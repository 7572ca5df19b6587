"""The advantage definitions written as plain per-row loops: the executable spec the tests and the
benchmark compare gigpo.advantage against. Deliberately shares no code with it (no numpy, no rapidfuzz).
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

EPS = 1e-6


def lcs_length(a: str, b: str) -> int:
    """Longest common subsequence of two strings, by the textbook dynamic programme."""
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def lcs_similarity(a: str, b: str) -> float:
    total = len(a) + len(b)
    return 1.0 if total == 0 else 2 * lcs_length(a, b) / total


def _normalise(values: list[float], norm: str) -> list[float]:
    n = len(values)
    if n < 2:
        return [0.0] * n
    mean = sum(values) / n
    if norm == "mean":
        return [v - mean for v in values]
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return [(v - mean) / (std + EPS) for v in values]


def naive_advantages(
    estimator: str, group: Sequence, traj: Sequence, step: Sequence[int], reward: Sequence[float],
    anchor: Sequence, value: Optional[Sequence[float]] = None, *, gamma: float, lam: float,
    step_weight: float, norm: str, episode_stats: str, similarity: Optional[float] = None,
    similar: Callable[[str, str], float] = lcs_similarity,
) -> dict[str, list]:
    """Per-row advantage, episode part, step part and step-group size, row by row in input order.

    `anchor` holds keys (exact grouping) or texts (similarity grouping, scored by `similar`; the
    benchmark passes rapidfuzz there because a Python LCS of two 2,000-character texts takes seconds).
    """
    n = len(reward)
    trajectories: dict[tuple, list[int]] = {}
    for i in range(n):
        trajectories.setdefault((group[i], traj[i]), []).append(i)
    for rows in trajectories.values():
        rows.sort(key=lambda i: step[i])

    ret = [0.0] * n  # discounted step return R_t
    for rows in trajectories.values():
        running = 0.0
        for i in reversed(rows):
            running = reward[i] + gamma * running
            ret[i] = running

    traj_return = {key: sum(reward[i] for i in rows) for key, rows in trajectories.items()}
    groups: dict = {}
    for key in trajectories:  # trajectories of each group
        groups.setdefault(key[0], []).append(key)

    advantage = [0.0] * n
    episode = [0.0] * n
    step_part = [0.0] * n
    size = [1] * n

    if estimator == "ppo":
        for rows in trajectories.values():
            running = 0.0
            for pos in range(len(rows) - 1, -1, -1):
                i = rows[pos]
                next_value = value[rows[pos + 1]] if pos + 1 < len(rows) else 0.0
                delta = reward[i] + gamma * next_value - value[i]
                running = delta + gamma * lam * running
                advantage[i] = running
        return {"advantage": advantage, "episode_advantage": episode, "step_advantage": step_part,
                "step_group_size": size, "returns": [advantage[i] + value[i] for i in range(n)]}

    for g, keys in groups.items():
        if estimator == "rloo":
            for key in keys:
                others = [traj_return[k] for k in keys if k != key]
                a = traj_return[key] - sum(others) / len(others) if others else 0.0
                for i in trajectories[key]:
                    episode[i] = a
            continue
        if len(keys) < 2:
            continue  # a group with one trajectory gets 0
        if episode_stats == "trajectory":
            normed = _normalise([traj_return[k] for k in keys], norm)
            for key, a in zip(keys, normed):
                for i in trajectories[key]:
                    episode[i] = a
        else:
            rows = [i for key in keys for i in trajectories[key]]
            normed = _normalise([traj_return[(group[i], traj[i])] for i in rows], norm)
            for i, a in zip(rows, normed):
                episode[i] = a

    if estimator == "gigpo":
        rows_of_group: dict = {}
        for i in range(n):  # input order
            rows_of_group.setdefault(group[i], []).append(i)
        step_groups: list[list[int]] = []
        for rows in rows_of_group.values():
            if similarity is None:
                by_anchor: dict = {}
                for i in rows:
                    by_anchor.setdefault(anchor[i], []).append(i)
                step_groups.extend(by_anchor.values())
                continue
            mine: list[list[int]] = []
            for i in rows:
                for members in mine:  # creation order; compare with each group's first member
                    if similar(anchor[i], anchor[members[0]]) >= similarity:
                        members.append(i)
                        break
                else:
                    mine.append([i])
            step_groups.extend(mine)
        for members in step_groups:
            for i, a in zip(members, _normalise([ret[i] for i in members], norm)):
                step_part[i] = a
                size[i] = len(members)

    for i in range(n):
        advantage[i] = episode[i] + (step_weight * step_part[i] if estimator == "gigpo" else 0.0)
    return {"advantage": advantage, "episode_advantage": episode, "step_advantage": step_part,
            "step_group_size": size, "returns": ret}


def naive_informative_groups(group: Sequence, traj: Sequence, reward: Sequence[float]) -> list[bool]:
    """Per row: does its group hold at least two different trajectory returns?"""
    totals: dict = {}
    for g, t, r in zip(group, traj, reward):
        totals.setdefault(g, {}).setdefault(t, 0.0)
        totals[g][t] += r
    return [len(set(totals[g].values())) > 1 for g in group]
