"""Expert demonstrations through the pool: labels are the expert's, exploration visits off-path states."""
from __future__ import annotations

import gymnasium as gym
import pytest

import gigpo.envs  # noqa: F401
from gigpo.envs.demos import collect_demonstrations
from gigpo.envs.pool import EnvPool


def test_pure_expert_solves_every_room_and_labels_every_step():
    with EnvPool("gigpo/Sokoban-v0", max_steps=15, workers=2) as pool:
        demos = collect_demonstrations(pool, seeds=list(range(12)), explore=0.0)
        assert all(v.won for v in pool.episodes)
        assert len(demos) == sum(v.step for v in pool.episodes)
        assert sum(d.view.step == 0 for d in demos) == 12
        assert demos[0].response() == f"<action>{demos[0].action}</action>"


def test_exploration_keeps_expert_labels_on_the_states_it_reaches():
    with EnvPool("gigpo/Sokoban-v0", max_steps=15, workers=1) as pool:
        demos = collect_demonstrations(pool, seeds=list(range(100, 110)), explore=0.5, seed=1)
    env = gym.make("gigpo/Sokoban-v0").unwrapped
    for demo in demos:
        env.reset(seed=demo.view.seed)
        for _, action in demo.view.history:  # replay to the labelled state: the label is its expert action
            env.step(f"<action>{action}</action>")
        assert env._observation == demo.view.observation
        assert env.expert_action() == demo.action
    labels = {(d.view.seed, d.view.step): d.action for d in demos}
    explored = [d for d in demos if d.view.step and d.view.history[-1][1] != labels.get((d.view.seed, d.view.step - 1))]
    assert len(explored) > 5  # about half the moves were random, and their successors are still labelled
    with EnvPool("gigpo/CliffWalking-v0", max_steps=3, workers=1) as pool:
        with pytest.raises(ValueError, match="explore=2"):
            collect_demonstrations(pool, [0], explore=2)


def test_demonstrations_do_not_depend_on_the_number_of_workers():
    # the exploring policy draws from one rng per call: if its draws followed the order in which workers
    # answer, the same seeds would give different demonstrations (and warm-ups) from run to run
    def collect(workers: int) -> list[tuple[int, int, str, str]]:
        with EnvPool("gigpo/Sokoban-v0", max_steps=15, workers=workers) as pool:
            demos = collect_demonstrations(pool, seeds=list(range(200, 216)), explore=0.5, seed=3)
        return [(d.view.seed, d.view.step, d.view.observation, d.action) for d in demos]

    assert collect(2) == collect(1)
