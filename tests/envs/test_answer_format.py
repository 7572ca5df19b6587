"""What counts as an answer: a run-on after </action>, or an answer cut off by max_new_tokens, is invalid."""
from __future__ import annotations

import pytest

import gigpo.envs  # noqa: F401  (registers the built-in envs)
from gigpo.envs.base import UnfinishedResponse, parse_tagged_action
from gigpo.envs.pool import EnvPool
from gigpo.rollout.generator import Generator
from gigpo.rollout.types import Completion


@pytest.mark.parametrize("text, action", [
    ("<action>left</action>", "left"),
    ("<action>left</action>\n  ", "left"),
    ("<think>box is left</think> <action> left </action>", "left"),
])
def test_a_closed_action_with_nothing_after_it_is_valid(text, action):
    assert parse_tagged_action(text) == (action, "")


@pytest.mark.parametrize("text", ["<action>left</action> right right right", "<action>left</action><action>up</action>",
                                  "<action>left</action>."])
def test_text_after_the_closing_tag_makes_the_answer_invalid(text):
    action, reason = parse_tagged_action(text)
    assert action is None and reason == "text after </action>"


def test_an_unfinished_answer_is_an_invalid_action_in_the_env_worker_and_does_not_move():
    with EnvPool("gigpo/Sokoban-v0", max_steps=4, workers=1) as pool:
        start = pool.reset([0], group_size=2)
        expert = pool.expert_actions()
        moves = {i: f"<action>{expert[i]}</action>" for i in (0, 1)}
        after = pool.step({0: UnfinishedResponse(moves[0]), 1: moves[1]})  # same text, one marked cut off
        assert not after[0].info["action_valid"] and "max_new_tokens" in after[0].info["invalid_reason"]
        assert after[0].reward == -0.1 and after[0].observation == start[0].observation
        assert after[1].info["action_valid"] and after[1].observation != start[1].observation


class _CutOffEveryOtherAnswer(Generator):
    """Answers every prompt with a well-formed move and says the odd ones hit max_new_tokens: a real model
    cut off right after a valid tag is too rare to provoke on demand."""

    def generate(self, prompts, settings):
        return [Completion(i, [1, 2], "<action>up</action>", [-0.1, -0.1], "length" if i % 2 else "stop", 0)
                for i in range(len(prompts))]

    def update_weights(self, named_tensors, version):
        raise NotImplementedError


def test_the_rollout_marks_answers_cut_off_by_max_new_tokens_and_they_play_as_invalid():
    from gigpo.config import load_config
    from gigpo.infra.seeds import train_seeds
    from gigpo.rollout.collect import rollout
    from gigpo.trainer.setup import build_pool, sampling

    config = load_config("recipes/sokoban_tiny.yaml", ["env.num_groups=1", "env.group_size=4", "env.max_steps=2",
                                                       "env.workers=1"])
    with build_pool(config) as pool:
        played = rollout(pool, _CutOffEveryOtherAnswer(), lambda views: [[1, 2, 3] for _ in views], train_seeds(config, 1),
                         config.env.group_size, sampling(config, evaluation=False, seed=1), config.rollout.max_prompt_tokens)
    cut = [s for s in played.steps.as_dicts() if s["truncated_response"]]
    ended = [s for s in played.steps.as_dicts() if not s["truncated_response"]]
    assert cut and ended
    assert not any(s["action_valid"] for s in cut)
    assert all(s["reward"] == -config.env.invalid_action_penalty for s in cut)
    assert all(s["action_valid"] for s in ended)
