"""The ALFWorld agent env on the real engine, alone and through the EnvPool, with the expert as oracle."""
from __future__ import annotations

import random
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from transformers import AutoTokenizer

from gigpo.envs.alfworld import ENV_ID
from gigpo.envs.alfworld.evaluate import evaluate, expert_policy
from gigpo.envs.alfworld.game import TASK_TYPES
from gigpo.envs.episode_end import EpisodeOverError
from gigpo.envs.pool import EnvPool
from gigpo.envs.prompt import PromptBuilder


def test_expert_wins_every_task_type_through_the_pool(sample_data: Path) -> None:
    result = evaluate(expert_policy, str(sample_data), split="train", workers=2, env_kwargs={"expert": True})
    assert result.episodes == len(TASK_TYPES)
    assert result.by_type == {t: (1, 1) for t in TASK_TYPES}, result.summary()
    assert result.success == 1.0 and 0 < result.mean_steps <= 50
    assert "NOT comparable with published ALFWorld numbers" in result.summary()
    assert result.metrics()["eval/alfworld/success/pick_two_obj_and_place"] == 1.0


def test_group_shares_a_task_and_the_prompt_lists_admissible_commands(sample_data: Path, tiny_model_dir: Path) -> None:
    builder = PromptBuilder(AutoTokenizer.from_pretrained(tiny_model_dir), max_steps=50)
    with EnvPool(ENV_ID, {"data_path": str(sample_data)}, workers=1) as pool:
        first, second = pool.reset([3], group_size=2)
        assert (first.task, first.observation, first.task_type) == (second.task, second.observation, second.task_type)
        assert first.task_type in TASK_TYPES and first.task and "Your task is to" not in first.observation
        view = pool.step({0: f"<action>{first.admissible_actions[0]}</action>"})[0]
        prompt = builder.messages(view)[-1]["content"]
        assert view.task in prompt and view.observation in prompt
        assert len(view.admissible_actions) > 3
        for command in view.admissible_actions:
            assert command in prompt


def test_inadmissible_action_is_penalised_and_does_not_advance(sample_data: Path) -> None:
    env = gym.make(ENV_ID, data_path=str(sample_data), anchor="state", invalid_action_penalty=0.5).unwrapped
    observation, info = env.reset(seed=0)
    before = (observation, info["anchor"], info["admissible_actions"])
    for text in ("<action>fly to the moon</action>", "go to the fridge without tags"):
        obs, reward, terminated, truncated, step_info = env.step(text)
        assert reward == -0.5 and not (terminated or truncated)
        assert not step_info["action_valid"] and step_info["invalid_reason"]
        assert (obs, step_info["anchor"], step_info["admissible_actions"]) == before
    # A valid move changes the true state, and the state anchor names where the agent now is.
    target = next(c for c in before[2] if c.startswith("go to "))
    obs, reward, _, _, step_info = env.step(f"<action>{target}</action>")
    assert step_info["action_valid"] and reward == 0.0
    assert step_info["anchor"].startswith(f"at: {target[len('go to '):]}") and step_info["anchor"] != before[1]


def test_state_anchor_tells_apart_equal_texts_and_episodes_truncate(sample_data: Path) -> None:
    env = gym.make(ENV_ID, data_path=str(sample_data), anchor="state", max_episode_steps=4)
    _, info = env.reset(seed=1)
    places = [c for c in info["admissible_actions"] if c.startswith("go to ")][:2]
    anchors, observations = [], []
    for place in places:
        env.step(f"<action>{place}</action>")
        obs, _, _, truncated, step_info = env.step("<action>inventory</action>")
        observations.append(obs)
        anchors.append(step_info["anchor"])
    assert observations[0] == observations[1]  # "You are not carrying anything." at both places
    assert anchors[0] != anchors[1]
    assert truncated  # the 4th step of a 4-step episode
    with pytest.raises(EpisodeOverError, match="truncated after 4 step"):
        env.step("<action>inventory</action>")
    assert gym.make(ENV_ID, data_path=str(sample_data)).spec.max_episode_steps == 50  # the paper's budget


def test_history_anchor_keys_equal_texts_by_the_recent_path(sample_data: Path) -> None:
    """`anchor="history"`: the same text reached along different recent paths is two keys, the same path one."""
    env = gym.make(ENV_ID, data_path=str(sample_data), anchor="history", anchor_history=1).unwrapped

    def play(place: str) -> list[str]:
        _, info = env.reset(seed=1)
        anchors = [info["anchor"]]
        for text in (f"<action>{place}</action>", "<action>fly to the moon</action>", "<action>inventory</action>"):
            anchors.append(env.step(text)[4]["anchor"])
        return anchors

    _, info = env.reset(seed=1)
    first_text = info["anchor"]
    places = [c for c in info["admissible_actions"] if c.startswith("go to ")][:2]
    a, b, a_again = play(places[0]), play(places[1]), play(places[0])
    assert a[0] == b[0] == first_text  # no path yet: the observation alone
    assert a == a_again  # same task, seed and actions: the members of a group meet in one key
    assert a[2] == a[1]  # an invalid action changes nothing, path included
    assert a[3].endswith("You are not carrying anything.") and b[3].endswith("You are not carrying anything.")
    assert a[3] != b[3]  # equal texts, different places before: two keys
    assert f"> {places[0]}" not in a[3]  # K=1: only the last pair (arrive, inventory) precedes the text
    assert a[3].startswith(a[1].split("\n")[-1])  # which starts with the observation the inventory came from


def test_bad_env_arguments_name_the_input(sample_data: Path) -> None:
    with pytest.raises(ValueError, match="anchor='facts'"):
        gym.make(ENV_ID, data_path=str(sample_data), anchor="facts")
    with pytest.raises(ValueError, match="anchor_history=0"):
        gym.make(ENV_ID, data_path=str(sample_data), anchor="history", anchor_history=0)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        gym.make(ENV_ID, data_path=str(sample_data / "nowhere"))


def test_episodes_keep_their_own_random_stream(sample_data: Path) -> None:
    """Same seed -> same episode, however other code (or another episode in the worker) uses `random`."""
    make = lambda: gym.make(ENV_ID, data_path=str(sample_data), expert=True).unwrapped  # noqa: E731
    a, b = make(), make()
    random.seed(123)
    expected_next = random.random()
    random.seed(123)
    trace_a = [a.reset(seed=4)[0]]
    assert random.random() == expected_next  # the env left the caller's stream alone
    trace_b = [b.reset(seed=4)[0]]
    for _ in range(4):
        random.random()  # someone else draws between the two episodes' steps
        trace_a.append(a.step(f"<action>{a.expert_action()}</action>")[0])
        trace_b.append(b.step(f"<action>{b.expert_action()}</action>")[0])
        random.seed(99)
    assert trace_a == trace_b


def test_check_env_passes_without_warnings(sample_data: Path) -> None:
    # One task, so Gymnasium's repeated seeded resets do not reload a game each time.
    env = gym.make(ENV_ID, data_path=str(sample_data), split="valid_unseen", task_types=["pick_two_obj_and_place"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
