"""HGPO and GraphGPO written as plain per-row loops from their papers' definitions: the executable spec
test_successors.py compares gigpo.advantage.hgpo / graphgpo against. Shares no code with them (no numpy).
"""
from __future__ import annotations

import math
from collections import deque
from typing import Optional, Sequence

from naive_advantage import EPS, lcs_similarity, naive_advantages


def _trajectories(group, traj, step) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = {}
    for i in range(len(group)):
        out.setdefault((group[i], traj[i]), []).append(i)
    for rows in out.values():
        rows.sort(key=lambda i: step[i])
    return out


def _returns(trajectories, reward, gamma) -> list[float]:
    ret = [0.0] * len(reward)
    for rows in trajectories.values():
        running = 0.0
        for i in reversed(rows):
            running = reward[i] + gamma * running
            ret[i] = running
    return ret


def _episode(group, traj, step, reward, anchor, *, norm, episode_stats) -> list[float]:
    return naive_advantages("grpo", group, traj, step, reward, anchor, gamma=1.0, lam=1.0, step_weight=0.0,
                            norm=norm, episode_stats=episode_stats)["episode_advantage"]


def naive_hgpo(group: Sequence, traj: Sequence, step: Sequence[int], reward: Sequence[float], anchor: Sequence, *,
               gamma: float, norm: str, episode_stats: str, history: int, alpha: float,
               episode_group: bool) -> dict[str, list]:
    """Per row: weighted mean over its nested history groups (k = 1..history+1 states) of the population-std
    normalised return, weight (k+1)**alpha, groups whose value is 0 left out; + the episode group at weight 1."""
    trajectories = _trajectories(group, traj, step)
    ret = _returns(trajectories, reward, gamma)
    members: dict[tuple, list[int]] = {}
    for (g, _), rows in trajectories.items():
        for pos, i in enumerate(rows):
            for k in range(1, min(history + 1, pos + 1) + 1):
                key = (g, k, tuple(anchor[rows[p]] for p in range(pos - k + 1, pos + 1)))
                members.setdefault(key, []).append(i)
    items: list[list[tuple[float, float]]] = [[] for _ in reward]
    size = [1] * len(reward)
    for (g, k, _), rows in members.items():
        if k == 1:
            for i in rows:
                size[i] = len(rows)
        if len(rows) < 2:
            continue
        values = [ret[i] for i in rows]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        for i, v in zip(rows, values):
            dev = v - mean
            if abs(dev) <= 8 * 2.0**-52 * max(abs(x) for x in values):
                continue                                   # at the group mean: no signal, no weight
            items[i].append(((k + 1.0) ** alpha, dev / (std + EPS) if norm == "std" else dev))
    step_part = [sum(w * a for w, a in it) / (sum(w for w, _ in it) + EPS) for it in items]
    episode = [0.0] * len(reward)
    if episode_group:
        episode = _episode(group, traj, step, reward, anchor, norm=norm, episode_stats=episode_stats)
        items = [it + [(1.0, e)] if e != 0.0 else it for it, e in zip(items, episode)]
    advantage = [sum(w * a for w, a in it) / (sum(w for w, _ in it) + EPS) for it in items]
    return {"advantage": advantage, "episode_advantage": episode, "step_advantage": step_part,
            "step_group_size": size, "returns": ret}


def _bfs_to_goal(edges: dict, goal) -> dict:
    """Fewest edges from each node to `goal` (breadth-first on the reversed edges)."""
    incoming: dict = {}
    for u, targets in edges.items():
        for v in targets:
            incoming.setdefault(v, set()).add(u)
    dist = {goal: 0}
    queue = deque([goal])
    while queue:
        v = queue.popleft()
        for u in incoming.get(v, ()):
            if u not in dist:
                dist[u] = dist[v] + 1
                queue.append(u)
    return dist


def naive_graphgpo(group: Sequence, traj: Sequence, step: Sequence[int], reward: Sequence[float], anchor: Sequence,
                   *, gamma: float, step_weight: float, norm: str, episode_stats: str, graph_gamma: float,
                   graph_episode_weight: float, graph_distance: str, graph_goal_return: float,
                   similarity: Optional[float] = None, text: Optional[Sequence[str]] = None) -> dict[str, list]:
    """Per group: a graph of state -> next state (last step -> goal on success, else a dead end of its own),
    BFS distances to the goal (unreachable: group's largest + 1), return 10 * graph_gamma**d, normalised in
    exact-anchor step groups (unbiased std) + the episode part."""
    del gamma                                               # GraphGPO's returns use graph_gamma
    trajectories = _trajectories(group, traj, step)
    n = len(reward)
    node = list(anchor)
    if similarity is not None:                              # first leader (in input order) similar enough
        leaders: dict = {}
        for i in range(n):
            mine = leaders.setdefault(group[i], [])
            for j in mine:
                if lcs_similarity(text[i], text[j]) >= similarity:
                    node[i] = ("merged", j)
                    break
            else:
                mine.append(i)
                node[i] = ("merged", i)
    ret = [0.0] * n
    for g in {group[i] for i in range(n)}:
        edges: dict = {}
        nxt: dict[int, object] = {}
        for (gg, t), rows in trajectories.items():
            if gg != g:
                continue
            success = sum(reward[i] for i in rows) > graph_goal_return
            for pos, i in enumerate(rows):
                nxt[i] = node[rows[pos + 1]] if pos + 1 < len(rows) else (("goal",) if success else ("end", t))
                edges.setdefault(node[i], set()).add(nxt[i])
        dist = _bfs_to_goal(edges, ("goal",))
        far = max(dist.values())
        d = lambda s: dist.get(s, far + 1)  # noqa: E731
        for i, s in nxt.items():
            exponent = d(s) if graph_distance == "absolute" else d(s) - d(node[i]) + 1
            ret[i] = 10.0 * graph_gamma ** exponent
    steps = naive_advantages("gigpo", group, traj, step, [0.0] * n, anchor, gamma=1.0, lam=1.0, step_weight=1.0,
                             norm=norm, episode_stats=episode_stats)
    size = steps["step_group_size"]
    by_group: dict = {}
    for i in range(n):
        by_group.setdefault((group[i], anchor[i]), []).append(i)
    step_part = [0.0] * n
    for rows in by_group.values():
        if len(rows) < 2:
            continue
        values = [ret[i] for i in rows]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        if max(values) == min(values):
            continue
        for i, v in zip(rows, values):
            step_part[i] = (v - mean) / (std + EPS) if norm == "std" else v - mean
    episode = [0.0] * n
    if graph_episode_weight != 0.0:
        episode = _episode(group, traj, step, reward, anchor, norm=norm, episode_stats=episode_stats)
    advantage = [step_weight * s + graph_episode_weight * e for s, e in zip(step_part, episode)]
    return {"advantage": advantage, "episode_advantage": episode, "step_advantage": step_part,
            "step_group_size": size, "returns": ret}
