"""GraphGPO (ICML 2026, arXiv 2605.26684) as an estimator: step credit from a group's transition graph.

A return that only counts rewards cannot tell a step of a failed trajectory that got closer to the goal
from one that wandered. GraphGPO pools the transitions of all trajectories of a task group into one
directed graph and scores each step by how far its next state is from the goal. Definitions (matching
verl-agent's recipe/GraphGPO/core_graph.py):

- Nodes: the group's states, by anchor key (or merged by text similarity, `similarity`, through
  similarity.py's grouping), plus one goal node. Edges: state of a step -> state of the next step of its
  trajectory. A trajectory's last step leads to the goal when R(tau) > `graph_goal_return` (the
  reference: episode reward > 0), else to an end node of its own (the rows do not hold the final
  observation; the reference uses it, so a final observation seen elsewhere in the group is the one
  case where the two differ).
- d(s): fewest edges from s to the goal (reverse breadth-first search from the goal: Dijkstra with unit
  weights). A state that cannot reach the goal gets d = (largest finite d in its group) + 1.
- Step return: 10 * graph_gamma**d(next state) (`graph_distance="absolute"`), or
  10 * graph_gamma**(d(next) - d(state) + 1) (`"delta"`).
- Step part: those returns normalised (`norm`, unbiased std as GiGPO's) inside exact-anchor step groups,
  as in the reference even when `similarity` merges graph nodes; a group of one gets 0.
- advantage = step_weight * step part + graph_episode_weight * episode part (GiGPO's episode part).

A group with no success: every state is equally unreachable, every return is 10 * graph_gamma, and the
step part is 0; the advantage is the episode part alone (0 when the returns R(tau) are all equal).
"""
from __future__ import annotations

import numpy as np

from gigpo.advantage.estimators import AdvantageOptions, episode_part, register_estimator, scored, step_groups
from gigpo.advantage.rows import StepRows
from gigpo.advantage.segments import TrajectoryLayout, normalise_in_groups

GOAL_RETURN = 10.0
"""The return of a step that reaches the goal (the reference's constant; it cancels under norm="std")."""


def goal_distances(rows: StepRows, layout: TrajectoryLayout, node: np.ndarray, n_nodes: int,
                   goal_return: float) -> tuple[np.ndarray, np.ndarray]:
    """(N,) d(state) and d(next state) of each row, in input order, unreachable states already at far + 1.

    Node ids: the rows' states are 0..n_nodes-1 (unique per group), goal of group g is n_nodes + g, end
    node of trajectory t is n_nodes + n_groups + t. One sparse graph holds every group (they share no
    node), and one multi-source search from all goals gives each node its distance to its group's goal.
    """
    # imported here: scipy.sparse costs every `gigpo` process ~0.5 s at start, and only this estimator needs it
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    traj_return = np.bincount(layout.traj_id, weights=rows.reward, minlength=layout.n_trajs)
    reached = traj_return > goal_return
    order = layout.order
    node_s = node[order]
    has_next = layout.steps_left > 0
    next_s = np.empty_like(node_s)
    next_s[has_next] = node_s[np.flatnonzero(has_next) + 1]
    last_traj = layout.traj_id[order][~has_next]
    next_s[~has_next] = np.where(reached[last_traj], n_nodes + layout.traj_group[last_traj],
                                 n_nodes + layout.n_groups + last_traj)
    size = n_nodes + layout.n_groups + layout.n_trajs
    reverse = csr_matrix((np.ones(len(node_s)), (next_s, node_s)), shape=(size, size))
    goals = n_nodes + np.arange(layout.n_groups)
    dist = dijkstra(reverse, directed=True, indices=goals, unweighted=True, min_only=True)
    group_s = layout.group_id[order]
    far = np.zeros(layout.n_groups)                      # the goal itself is at 0
    for ends in (node_s, next_s):
        finite = np.isfinite(dist[ends])
        np.maximum.at(far, group_s[finite], dist[ends][finite])
    d_state = np.where(np.isfinite(dist[node_s]), dist[node_s], far[group_s] + 1.0)
    d_next = np.where(np.isfinite(dist[next_s]), dist[next_s], far[group_s] + 1.0)
    out_state, out_next = np.empty_like(d_state), np.empty_like(d_next)
    out_state[order], out_next[order] = d_state, d_next
    return out_state, out_next


def graph_returns(rows: StepRows, options: AdvantageOptions, node: np.ndarray, n_nodes: int) -> np.ndarray:
    """(N,) each step's distance-decayed return (see the module doc), `node` the graph node of each row."""
    d_state, d_next = goal_distances(rows, rows.layout, node, n_nodes, options.graph_goal_return)
    exponent = d_next if options.graph_distance == "absolute" else d_next - d_state + 1.0
    return GOAL_RETURN * np.power(options.graph_gamma, exponent)


@register_estimator("graphgpo")
def graphgpo(rows: StepRows, options: AdvantageOptions) -> StepRows:
    """step_weight * graph step part + graph_episode_weight * episode part (GraphGPO, eq. 8 of GiGPO's form)."""
    options.require("graphgpo", "graph_gamma", "graph_episode_weight", "graph_distance", "graph_goal_return")
    layout = rows.layout
    group_of_step, n_step_groups = step_groups(rows, layout, None, options.split_versions)
    if options.similarity is None and not options.split_versions:
        node, n_nodes = group_of_step, n_step_groups          # exact anchors: the nodes are the step groups
    else:
        node, n_nodes = step_groups(rows, layout, options.similarity)
    returns = graph_returns(rows, options, node, n_nodes)
    step = normalise_in_groups(returns, group_of_step, n_step_groups, options.norm)
    episode = np.zeros(len(rows))
    if options.graph_episode_weight != 0.0:
        episode = episode_part(rows, layout, options.norm, options.episode_stats)
    size = np.bincount(group_of_step, minlength=n_step_groups)[group_of_step]
    return scored(rows, options.step_weight * step + options.graph_episode_weight * episode, episode, step, size,
                  returns)
