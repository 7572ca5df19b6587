"""Sokoban: rooms solvable by construction, an optimal expert, the reward shaping, kwargs checked."""
from __future__ import annotations

import gymnasium as gym
import pytest

import gigpo.envs  # noqa: F401
from gigpo.envs.sokoban import Room, SokobanEnv


def _play_expert(env: gym.Env, seed: int) -> tuple[int, float, dict]:
    _, info = env.reset(seed=seed)
    optimal, total, steps = info["optimal_steps"], 0.0, 0
    while True:
        action = env.unwrapped.expert_action()
        _, reward, terminated, truncated, info = env.step(f"<action>{action}</action>")
        total, steps = total + reward, steps + 1
        if terminated or truncated:
            return steps, total, {**info, "optimal": optimal, "terminated": terminated}


@pytest.mark.parametrize("kwargs", [{}, {"size": 6, "num_boxes": 2, "solution_length": (4, 14)}])
def test_the_expert_solves_every_generated_room_optimally_within_the_limit(kwargs):
    env = gym.make("gigpo/Sokoban-v0", max_episode_steps=15, **kwargs)
    low, high = env.unwrapped.solution_length
    for seed in range(150 if not kwargs else 25):
        steps, total, info = _play_expert(env, seed)
        assert info["terminated"] and info["won"], f"seed {seed} not solved"
        assert steps == info["optimal"] and low <= steps <= high
        # -0.1 a step, +1 per box on target from the start state onwards, +10 once solved.
        assert total == pytest.approx(-0.1 * steps + 10 + env.unwrapped.num_boxes
                                      - _boxes_on_target_at_start(env.unwrapped, seed))


def _boxes_on_target_at_start(env: SokobanEnv, seed: int) -> int:
    env.reset(seed=seed)
    return len(env.state[1] & env.room.targets)


def test_moves_push_boxes_and_walls_block():
    room = Room(3, 4, walls=frozenset({(0, 3)}), targets=frozenset({(1, 3)}))
    start = ((1, 1), frozenset({(1, 2)}))
    assert room.render(start) == "___#\n_PXO\n____"
    pushed = room.move(start, "right")
    assert room.render(pushed) == "___#\n__PV\n____"
    assert room.move(pushed, "right") == pushed  # box against the outer wall: no move
    assert room.move(((0, 2), frozenset()), "right") == ((0, 2), frozenset())  # inner wall
    assert room.solve(start) == ["right"]
    assert room.solve(((1, 0), frozenset({(0, 0)}))) is None  # box stuck in a corner


def test_pushing_a_box_off_a_target_costs_one():
    env = SokobanEnv(size=5)
    env.reset(seed=0)
    env.room = Room(3, 5, frozenset(), frozenset({(1, 2)}))
    env.state = ((1, 1), frozenset({(1, 2)}))
    assert env._step("right")[1:3] == (pytest.approx(-1.1), False)
    assert env._step("left")[1:3] == (pytest.approx(-0.1), False)


def test_bad_kwargs_name_the_argument():
    with pytest.raises(ValueError, match="size=2"):
        SokobanEnv(size=2)
    with pytest.raises(ValueError, match="solution_length"):
        SokobanEnv(solution_length=(5, 3))
    with pytest.raises(RuntimeError, match="solution_length=\\(40, 50\\)"):
        SokobanEnv(size=3, solution_length=(40, 50)).reset(seed=0)
