"""Advantage estimators (GiGPO, GRPO, RLOO, PPO-GAE) and the registry the trainer picks them from; GiGPO's
successors HGPO and GraphGPO live in hgpo.py and graphgpo.py, which the package's __init__ imports so that
they are registered wherever an estimator is looked up.

Definitions, relied upon by the tests and by users (R(tau) = sum of a trajectory's rewards;
R_t = sum_{k>=t} gamma^(k-t) r_k along the trajectory's rows in step order):

- episode part, per group: (R - mean) / (std + 1e-6) with `norm="std"` (unbiased std, like
  torch.std), or R - mean with `norm="mean"`. `episode_stats="trajectory"` takes the statistics over
  the group's trajectories (the paper); "steps" over its step rows (each row carrying its
  trajectory's R; the reference code). A group with one trajectory gets 0.
- gigpo: episode part + step_weight * step part, where the step part normalises R_t (same `norm`)
  inside step groups: rows of a group with equal anchor key (or similar anchor text, see
  similarity.py), repeat visits of one trajectory included. A step group of one gets 0.
- grpo: the episode part alone (with norm="std", the default, the original GRPO).
- rloo: R_i minus the mean return of the group's other trajectories (0 in a group of one).
- hgpo, graphgpo: GiGPO's successors, defined in hgpo.py and graphgpo.py.
- ppo: GAE along each trajectory across turns, delta_t = r_t + gamma V_{t+1} - V_t (V = 0 after the
  last step), A_t = delta_t + gamma * lam * A_{t+1}; `returns` = A + V are the critic's targets.

An estimator reads the rows' arrays and returns the same rows with the five estimate columns set
(advantage, episode_advantage, step_advantage, step_group_size, returns: see rows.StepRows). Add one in
a few lines:

    @register_estimator("my_estimator")
    def my_estimator(rows: StepRows, options: AdvantageOptions) -> StepRows:
        ...
        return scored(rows, advantage, episode_part, step_part, step_group_size, returns)
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Optional

import numpy as np

from gigpo.advantage.rows import AdvantageInputError, StepRows
from gigpo.advantage.segments import TrajectoryLayout, dense_pair_ids, group_spread, normalise_in_groups
from gigpo.advantage.similarity import check_threshold, similarity_step_groups

NORMS = ("std", "mean")
EPISODE_STATS = ("trajectory", "steps")
GRAPH_DISTANCES = ("absolute", "delta")


@dataclass(frozen=True)
class AdvantageOptions:
    """Every knob an estimator may read; each estimator uses the ones its definition names.

    No defaults here (they live once, in gigpo.config.AlgorithmConfig), except the "off" value of
    opt-in remedies such as `step_min_spread`.
    """

    gamma: float
    lam: float
    step_weight: float
    norm: str
    episode_stats: str
    similarity: Optional[float]
    """None groups steps by exact anchor key; a threshold in (0, 1] groups by anchor-text similarity."""
    step_min_spread: float = 0.0
    """GiGPO: a step group whose discounted returns span no more than this gets step advantage 0 (e.g.
    groups where every action failed and returns differ only by step penalties); 0 keeps every group."""
    split_versions: bool = False
    """GiGPO: rows acted on by different policy versions never share a step group (the trainer passes
    rollout.group_versions=separate); needs the rows' policy_version, and changes nothing where a batch
    holds one version (every sync-mode batch). False: the off value."""
    # HGPO and GraphGPO (hgpo.py, graphgpo.py). None: not given. Their defaults live once, in
    # gigpo.config.AlgorithmConfig (successor_options(config) collects them); the estimator that reads an option
    # refuses a None, naming it (AdvantageOptions.require).
    hgpo_history: Optional[int] = None
    """HGPO: K, how many earlier steps' states the longest history key holds (groups of 1..K+1 states)."""
    hgpo_alpha: Optional[float] = None
    """HGPO: a group keyed by L - 1 states weighs L**alpha (the episode group: L = 1); 0 weighs all alike."""
    hgpo_episode_group: Optional[bool] = None
    """HGPO: average the episode-level advantage in as one more group (weight 1)."""
    graph_gamma: Optional[float] = None
    """GraphGPO: a step's return is 10 * graph_gamma**d, d the graph distance of its next state to the goal."""
    graph_episode_weight: Optional[float] = None
    """GraphGPO: advantage = step_weight * step part + graph_episode_weight * episode part."""
    graph_distance: Optional[str] = None
    """GraphGPO: "absolute" uses d(next state); "delta" uses d(next) - d(state) + 1 (the progress of the step)."""
    graph_goal_return: Optional[float] = None
    """GraphGPO: a trajectory reached the goal when its return R(tau) exceeds this (the reference: > 0)."""

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise AdvantageInputError(f"{name}={value!r} must be in [0, 1]")
        if not np.isfinite(self.step_weight):
            raise AdvantageInputError(f"step_weight={self.step_weight!r} must be a finite number")
        if self.norm not in NORMS:
            raise AdvantageInputError(f"norm={self.norm!r} is unknown; use one of {', '.join(NORMS)}")
        if self.episode_stats not in EPISODE_STATS:
            raise AdvantageInputError(
                f"episode_stats={self.episode_stats!r} is unknown; use one of {', '.join(EPISODE_STATS)}"
            )
        if self.similarity is not None:
            check_threshold(self.similarity)
        if not (np.isfinite(self.step_min_spread) and self.step_min_spread >= 0.0):
            raise AdvantageInputError(f"step_min_spread={self.step_min_spread!r} must be a finite number >= 0")
        if self.hgpo_history is not None and (isinstance(self.hgpo_history, bool)
                                              or not isinstance(self.hgpo_history, (int, np.integer))
                                              or self.hgpo_history < 0):
            raise AdvantageInputError(f"hgpo_history={self.hgpo_history!r} must be an integer >= 0 "
                                      "(0: current state only; the reference uses 2 or 4)")
        if self.graph_gamma is not None and not 0.0 <= self.graph_gamma <= 1.0:
            raise AdvantageInputError(f"graph_gamma={self.graph_gamma!r} must be in [0, 1] (the reference: 0.1-0.2)")
        for name in ("hgpo_alpha", "graph_episode_weight", "graph_goal_return"):
            if getattr(self, name) is not None and not np.isfinite(getattr(self, name)):
                raise AdvantageInputError(f"{name}={getattr(self, name)!r} must be a finite number")
        if self.graph_distance is not None and self.graph_distance not in GRAPH_DISTANCES:
            raise AdvantageInputError(f"graph_distance={self.graph_distance!r} is unknown; use one of "
                                      f"{', '.join(GRAPH_DISTANCES)}")


    def require(self, estimator: str, *names: str) -> None:
        """Refuse options `estimator` reads that were not given (they have no default here)."""
        missing = [name for name in names if getattr(self, name) is None]
        if missing:
            raise AdvantageInputError(f"estimator {estimator} needs {', '.join(missing)}: pass the recipe's "
                                      f"algorithm.{missing[0]} (gigpo.config.AlgorithmConfig holds the defaults; "
                                      "successor_options(config) collects them)")


SUCCESSOR_OPTIONS = frozenset(f.name for f in fields(AdvantageOptions) if f.name.startswith(("hgpo_", "graph_")))


def successor_options(source: object) -> dict[str, Any]:
    """The hgpo_* and graph_* options of an object carrying them as attributes (AlgorithmConfig, parsed CLI
    arguments), for compute_advantages."""
    return {name: getattr(source, name) for name in sorted(SUCCESSOR_OPTIONS)}


def advantage_options(source: object, split_versions: bool) -> dict[str, Any]:
    """Every field of AdvantageOptions, read as attributes of `source` (AlgorithmConfig, parsed CLI arguments), and
    split_versions as given (training takes it from rollout.group_versions). One list for the three that must agree:
    the update's call of compute_advantages, a rollout record's header, and `gigpo advantage` repeating the update."""
    return {f.name: split_versions if f.name == "split_versions" else getattr(source, f.name)
            for f in fields(AdvantageOptions)}


Estimator = Callable[[StepRows, AdvantageOptions], StepRows]
ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Decorator adding an estimator to the registry under `name` (names are unique)."""

    def add(fn: Estimator) -> Estimator:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered ({ESTIMATORS[name].__module__})")
        ESTIMATORS[name] = fn
        return fn

    return add


def get_estimator(name: str) -> Estimator:
    """The estimator registered as `name`; an unknown name lists the valid ones."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise AdvantageInputError(
            f"unknown estimator {name!r}; valid: {', '.join(sorted(ESTIMATORS))}"
        ) from None


def compute_advantages(
    name: str, rows: StepRows, *, gamma: float, lam: float, step_weight: float, norm: str,
    episode_stats: str, similarity: Optional[float], step_min_spread: float = 0.0, split_versions: bool = False,
    **successors: Any,
) -> StepRows:
    """`rows` with the estimator `name`'s advantages and returns (the trainer's one call; pass AlgorithmConfig's
    values). `successors`: HGPO's and GraphGPO's fields of AdvantageOptions (hgpo_*, graph_*)."""
    unknown = sorted(set(successors) - SUCCESSOR_OPTIONS)
    if unknown:
        raise AdvantageInputError(f"unknown advantage option(s) {', '.join(unknown)}; valid: "
                                  f"{', '.join(sorted(SUCCESSOR_OPTIONS))}")
    options = AdvantageOptions(
        gamma=gamma, lam=lam, step_weight=step_weight, norm=norm, episode_stats=episode_stats, similarity=similarity,
        step_min_spread=step_min_spread, split_versions=split_versions, **successors,
    )
    return get_estimator(name)(rows, options)


# --------------------------------------------------------------------------- shared parts

def _layout(rows: StepRows) -> TrajectoryLayout:
    return rows.layout


def _trajectory_returns(rows: StepRows, layout: TrajectoryLayout) -> np.ndarray:
    """(n_trajs,) R(tau): the sum of each trajectory's rewards."""
    return np.bincount(layout.traj_id, weights=rows.reward, minlength=layout.n_trajs)


def episode_part(rows: StepRows, layout: TrajectoryLayout, norm: str, episode_stats: str) -> np.ndarray:
    """(N,) the episode-level advantage of each row's trajectory (see the module doc)."""
    traj_return = _trajectory_returns(rows, layout)
    if episode_stats == "trajectory":
        per_traj = normalise_in_groups(traj_return, layout.traj_group, layout.n_groups, norm)
        return per_traj[layout.traj_id]
    per_row = normalise_in_groups(traj_return[layout.traj_id], layout.group_id, layout.n_groups, norm)
    trajs_in_group = np.bincount(layout.traj_group, minlength=layout.n_groups)
    per_row[trajs_in_group[layout.group_id] < 2] = 0.0   # equal values, but their mean may round
    return per_row


def step_groups(rows: StepRows, layout: TrajectoryLayout, similarity: Optional[float],
                split_versions: bool = False) -> tuple[np.ndarray, int]:
    """(N,) dense step-group id of each row: same group and same anchor (or similar anchor text), and with
    `split_versions` the same policy version."""
    group_id, n_groups = layout.group_id, layout.n_groups
    if split_versions and rows.policy_version is not None:
        group_id, n_groups = dense_pair_ids(group_id, n_groups, rows.policy_version)
    if similarity is None:
        return dense_pair_ids(group_id, n_groups, rows.anchor)
    if rows.anchor_text is None:
        raise AdvantageInputError(
            f"similarity={similarity} groups by anchor text, but the rows carry only hashed anchors; "
            "pass anchor_text (or use exact grouping: similarity=None)"
        )
    return similarity_step_groups(group_id, rows.anchor_text, similarity)


def scored(rows: StepRows, advantage: np.ndarray, episode: np.ndarray, step: np.ndarray, size: np.ndarray,
           returns: np.ndarray) -> StepRows:
    """`rows` with an estimator's five output columns (in the rows' order)."""
    return rows.with_columns(advantage=advantage, episode_advantage=episode, step_advantage=step,
                             step_group_size=size, returns=returns)


# --------------------------------------------------------------------------- estimators

@register_estimator("gigpo")
def gigpo(rows: StepRows, options: AdvantageOptions) -> StepRows:
    """Episode part + step_weight * step part (Feng et al. 2025, eq. 7)."""
    layout = _layout(rows)
    episode = episode_part(rows, layout, options.norm, options.episode_stats)
    returns = layout.reverse_discounted_sum(rows.reward, options.gamma)
    group_of_step, n_step_groups = step_groups(rows, layout, options.similarity, options.split_versions)
    step = normalise_in_groups(returns, group_of_step, n_step_groups, options.norm)
    if options.step_min_spread > 0.0:
        step[group_spread(returns, group_of_step, n_step_groups)[group_of_step] <= options.step_min_spread] = 0.0
    size = np.bincount(group_of_step, minlength=n_step_groups)[group_of_step]
    return scored(rows, episode + options.step_weight * step, episode, step, size, returns)


@register_estimator("grpo")
def grpo(rows: StepRows, options: AdvantageOptions) -> StepRows:
    """The episode part alone: every step carries its trajectory's group-normalised return."""
    layout = _layout(rows)
    episode = episode_part(rows, layout, options.norm, options.episode_stats)
    returns = layout.reverse_discounted_sum(rows.reward, options.gamma)
    return scored(rows, episode, episode, np.zeros(len(rows)), np.ones(len(rows), dtype=np.int64), returns)


@register_estimator("rloo")
def rloo(rows: StepRows, options: AdvantageOptions) -> StepRows:
    """R_i minus the mean return of the other trajectories of its group (Ahmadian et al. 2024)."""
    layout = _layout(rows)
    traj_return = _trajectory_returns(rows, layout)                                  # (n_trajs,)
    count = np.bincount(layout.traj_group, minlength=layout.n_groups)[layout.traj_group]
    total = np.bincount(layout.traj_group, weights=traj_return, minlength=layout.n_groups)[layout.traj_group]
    per_traj = np.where(count > 1, traj_return - (total - traj_return) / np.maximum(count - 1, 1), 0.0)
    advantage = per_traj[layout.traj_id]
    returns = layout.reverse_discounted_sum(rows.reward, options.gamma)
    return scored(rows, advantage, advantage.copy(), np.zeros(len(rows)), np.ones(len(rows), dtype=np.int64), returns)


@register_estimator("ppo")
def ppo(rows: StepRows, options: AdvantageOptions) -> StepRows:
    """GAE across the turns of each trajectory, bootstrapping from the next step's value."""
    if rows.value is None:
        raise AdvantageInputError("estimator 'ppo' needs a value for every row (field 'value'); none was given")
    layout = _layout(rows)
    delta = rows.reward + options.gamma * layout.next_in_trajectory(rows.value) - rows.value
    advantage = layout.reverse_discounted_sum(delta, options.gamma * options.lam)
    n = len(rows)
    return scored(rows, advantage, np.zeros(n), np.zeros(n), np.ones(n, dtype=np.int64), advantage + rows.value)
