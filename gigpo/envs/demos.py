"""Expert demonstrations for supervised warm-up, collected through the env pool.

A warm start from clean expert labels is far more sample-efficient than RL on small models (see
/work/shared/LEARNING.md), but states visited only by the expert are too easy: with probability
`explore` the behaviour policy takes a random admissible action instead, while the label stays the
expert's action for the state actually seen.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gigpo.envs.pool import EnvPool, EpisodeView


@dataclass(frozen=True)
class Demonstration:
    view: EpisodeView
    """The state as the model will see it (build the prompt from it with PromptBuilder)."""
    action: str
    """The expert's action in that state."""

    def response(self) -> str:
        """The answer text to train on, in the default action format."""
        return f"<action>{self.action}</action>"


class NoExpertError(ValueError):
    """The env gives no expert action in the first demonstration state: a setting to fix, not bad luck."""


def check_expert(pool: EnvPool, task_seed: int, fix: str = "") -> None:
    """Reset one episode of `task_seed` and ask for its expert action; raise NoExpertError naming `fix` if none.

    An env without an expert (ALFWorld without `expert: true`) otherwise plays every demonstration episode
    at random, minutes to hours, before the warm-up finds it has nothing to learn from.
    """
    view = pool.reset([task_seed], group_size=1)[0]
    if view.error is None and pool.expert_actions([0])[0] is None:
        raise NoExpertError(f"{pool.env_id} gave no expert action in the first state of the first demonstration "
                            f"episode (task seed {task_seed}): "
                            f"{fix or 'demonstrations need an env whose expert_action() answers'}")


def collect_demonstrations(pool: EnvPool, seeds: list[int], explore: float = 0.3,
                           seed: int = 0, fix: str = "") -> list[Demonstration]:
    """Play one episode per seed to the end; label every state where the env's expert has an answer.

    The first task's first state is checked for an expert action before any episode is played
    (`check_expert`; `fix` says how to turn the expert on). Envs are deterministic given the seed, so
    that extra reset changes no demonstration.
    """
    if not 0.0 <= explore <= 1.0:
        raise ValueError(f"explore={explore} must be a probability in [0, 1]")
    if seeds:
        check_expert(pool, seeds[0], fix)
    rng = np.random.default_rng(seed)
    pool.reset(seeds, group_size=1)
    demos: list[Demonstration] = []
    while pool.live_episodes():
        actions = {}
        for idx, expert in pool.expert_actions().items():
            view = pool.episode(idx)
            choices = view.admissible_actions or []
            if expert is None and not choices:
                raise ValueError(f"{pool.env_id} gave no expert action and no admissible actions in episode "
                                 f"{idx}; demonstrations need an env that implements expert_action()")
            if expert is not None:
                demos.append(Demonstration(view, expert))
            explore_now = expert is None or (choices and rng.random() < explore)
            action = choices[int(rng.integers(len(choices)))] if explore_now else expert
            actions[idx] = f"<action>{action}</action>"
        pool.step(actions)
    return demos
