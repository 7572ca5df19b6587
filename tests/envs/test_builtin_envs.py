"""Every registered env passes Gymnasium's checker; toy-text and 24-points behave as documented."""
from __future__ import annotations

import warnings
from fractions import Fraction

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo.envs
from gigpo.envs.alfworld import SAMPLE_TASKS_DIR
from gigpo.envs.episode_end import EpisodeOverError
from gigpo.envs.toy_text import DiscreteTextEnv, lake_expert
from gigpo.envs.twenty_four import ExpressionError, evaluate


@pytest.mark.parametrize("env_id", sorted(set(gigpo.envs.BUILTIN_ENVS) - {"gigpo/ALFWorld-v0"}))
def test_check_env_passes_without_warnings(env_id):
    # ALFWorld needs task files; tests/alfworld/test_env.py runs check_env on it with the shipped samples
    env = gym.make(env_id, max_episode_steps=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checker warning is a failure too
        check_env(env.unwrapped)
    observation, info = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    assert {"anchor", "admissible_actions", "action_valid", "invalid_reason", "won"} <= set(info)


SMALL_KWARGS = {"gigpo/WebShop-v0": {"num_products": 300},
                "gigpo/ALFWorld-v0": {"expert": True, "data_path": str(SAMPLE_TASKS_DIR)}}


def _first_move_to_an_end(env: DiscreteTextEnv) -> str:
    """The first action of a shortest path to a terminating transition, by BFS over the toy-text table P."""
    first, frontier = {env.state: None}, [env.state]
    for state in frontier:
        for action, outcomes in env.inner.P[state].items():
            _, nxt, _, done = outcomes[0]
            move = action if first[state] is None else first[state]
            if done:
                return env.action_names[move]
            if nxt not in first:
                first[nxt] = move
                frontier.append(nxt)
    raise AssertionError("no terminating transition is reachable")
NOT_TEXT = [None, 3, 2.5, b"<action>up</action>", ["<action>up</action>"]]


@pytest.mark.parametrize("env_id", sorted(gigpo.envs.BUILTIN_ENVS))
def test_non_text_actions_are_invalid_and_ended_episodes_refuse_steps(env_id):
    """A non-string action is an invalid action with a reason (not a TypeError); after truncation (here by
    those invalid steps) and after termination (the expert's last step) a step raises EpisodeOverError."""
    env = gym.make(env_id, max_episode_steps=len(NOT_TEXT), **SMALL_KWARGS.get(env_id, {}))
    observation, _ = env.reset(seed=0)
    for k, action in enumerate(NOT_TEXT, start=1):
        after, reward, terminated, truncated, info = env.step(action)
        assert after == observation and not terminated and truncated == (k == len(NOT_TEXT))
        assert not info["action_valid"] and reward == -env.unwrapped.invalid_action_penalty
        assert info["invalid_reason"] == f"the action must be text (str), not {type(action).__name__}"
    with pytest.raises(EpisodeOverError, match=f"truncated after {len(NOT_TEXT)} step"):
        env.step(f"<action>{env.unwrapped.expert_action()}</action>")
    env = gym.make(env_id, max_episode_steps=100, **SMALL_KWARGS.get(env_id, {}))
    env.reset(seed=0)
    terminated = truncated = False
    while not (terminated or truncated):
        action = env.unwrapped.expert_action() or _first_move_to_an_end(env.unwrapped)  # Taxi, CliffWalking
        _, _, terminated, truncated, _ = env.step(f"<action>{action}</action>")
    assert terminated
    with pytest.raises(EpisodeOverError, match="terminated"):
        env.step(f"<action>{env.unwrapped.expert_action()}</action>")


def _play(env_id: str, actions: list[str], **kwargs) -> list[tuple]:
    env = gym.make(env_id, max_episode_steps=50, **kwargs)
    env.reset(seed=0)
    return [env.step(f"<action>{a}</action>") for a in actions]


def test_frozen_lake_reaches_the_goal_and_holes_end_the_episode():
    steps = _play("gigpo/FrozenLake-v0", ["down", "down", "right", "right", "down", "right"])
    observation, reward, terminated, _, info = steps[-1]
    assert observation == "SFFF\nFHFH\nFFFH\nHFFP" and reward == 1.0 and terminated and info["won"]
    observation, reward, terminated, _, info = _play("gigpo/FrozenLake-v0", ["right", "down"])[-1]
    assert observation == "SFFF\nFPFH\nFFFH\nHFFG" and terminated and not info["won"]


def test_random_lake_maps_follow_the_seed():
    env = gym.make("gigpo/FrozenLake-v0", map_size=6)
    maps = [env.reset(seed=s)[0] for s in (0, 0, 1)]
    assert maps[0] == maps[1] != maps[2] and len(maps[0].splitlines()) == 6


def test_lake_expert_walks_a_shortest_safe_path():
    env = gym.make("gigpo/FrozenLake-v0", map_size=5, max_episode_steps=50)
    for seed in range(30):
        env.reset(seed=seed)
        moves, terminated, info = 0, False, {}
        while not terminated and moves < 50:
            action = env.unwrapped.expert_action()
            assert action is not None, f"seed {seed}: no expert move on a solvable map"
            _, _, terminated, _, info = env.step(f"<action>{action}</action>")
            moves += 1
        assert info["won"], f"seed {seed}: the expert fell into a hole or wandered"
        assert moves >= 8  # at least the Manhattan distance from the top-left start to the bottom-right goal
    lake = gym.make("gigpo/FrozenLake-v0")  # the fixed 4x4 map, whose shortest safe path is 6 moves
    lake.reset(seed=0)
    path = []
    while not lake.unwrapped.won():
        path.append(lake.unwrapped.expert_action())
        lake.step(f"<action>{path[-1]}</action>")
    assert len(path) == 6 and path[0] == "down"
    walled = DiscreteTextEnv(gym.make("FrozenLake-v1", desc=["SH", "HG"], is_slippery=False), ["left", "down", "right", "up"],
                             lambda e, s: str(s), "task", expert=lake_expert)
    walled.reset(seed=0)
    assert walled.expert_action() is None


def test_cliff_walking_and_taxi_render_and_score():
    observation, reward, terminated, _, _ = _play("gigpo/CliffWalking-v0", ["right"])[0]
    assert reward == -100.0 and not terminated and observation.splitlines()[-1] == "PCCCCCCCCCCG"
    path = ["up"] + ["right"] * 11 + ["down"]
    observation, reward, terminated, _, info = _play("gigpo/CliffWalking-v0", path)[-1]
    assert terminated and info["won"] and observation.endswith("SCCCCCCCCCCP")
    observation, reward, terminated, _, info = _play("gigpo/Taxi-v0", ["pickup"])[0]
    assert reward == -10.0 and not info["won"] and observation.count("@") == 1 and "destination" in observation


def test_wrapper_rejects_wrong_action_names_and_non_discrete_envs():
    with pytest.raises(ValueError, match="must be 4 distinct names"):
        DiscreteTextEnv(gym.make("FrozenLake-v1"), ["a", "b"], lambda e, s: "", "task")
    with pytest.raises(TypeError, match="Box observation space"):
        DiscreteTextEnv(gym.make("CartPole-v1"), ["left", "right"], lambda e, s: "", "task")


def test_twenty_four_arithmetic_is_exact_and_checked():
    numbers = [Fraction(n) for n in (3, 3, 8, 8)]
    assert evaluate("8 / (3 - 8 / 3)", numbers) == (Fraction(24), [8, 3, 8, 3])
    for expression, reason in [("8 * 8 * 8", "not among the remaining numbers: 8"), ("3 / (8 - 8)", "division"),
                               ("3", "at least two"), ("-3 + 8", "unary"), ("3 ** 3", "only integers"),
                               ("__import__('os').system('x')", "only integers"), ("3 +", "not an arithmetic")]:
        with pytest.raises(ExpressionError, match=reason):
            evaluate(expression, numbers)


def test_twenty_four_step_by_step_with_fractions_and_in_one_answer():
    env = gym.make("gigpo/TwentyFour-v0")
    env.reset(seed=0)
    env.unwrapped.numbers = [Fraction(n) for n in (3, 3, 8, 8)]
    observation, reward, terminated, _, _ = env.step("<action>8 / 3</action>")
    assert observation == "Numbers: (8/3) 3 8" and reward == 0.0 and not terminated
    observation, *_ = env.step("<action>3 - (8/3)</action>")
    assert observation == "Numbers: (1/3) 8"
    observation, reward, terminated, _, info = env.step("<action>8 / (1/3)</action>")
    assert observation == "Numbers: 24" and reward == 10.0 and terminated and info["won"]
    env.reset(seed=0)
    env.unwrapped.numbers = [Fraction(n) for n in (1, 2, 3, 4)]
    _, reward, terminated, _, info = env.step("<action>1 + 2 + 3 + 4</action>")
    assert terminated and reward == 0.0 and not info["won"]
    env.reset(seed=0)
    _, reward, _, _, info = env.step("<action>1 + 1 + 1 + 1 + 1</action>")
    assert reward == -0.1 and not info["action_valid"] and "remaining numbers" in info["invalid_reason"]


def test_twenty_four_expert_wins_every_hand():
    env = gym.make("gigpo/TwentyFour-v0")
    for seed in range(60):
        env.reset(seed=seed)
        for _ in range(3):
            observation, reward, terminated, _, info = env.step(f"<action>{env.unwrapped.expert_action()}</action>")
        assert terminated and info["won"] and observation == "Numbers: 24", seed
