"""The CPU recipe's shop: the reference scores quoted in recipes/webshop_tiny.yaml and docs/envs.md hold."""
from __future__ import annotations

from gigpo.config import load_config
from gigpo.envs.webshop.baselines import evaluate, expert_policy, make_env, random_policy


def test_webshop_tiny_test_split_expert_perfect_random_policy_far_below():
    config = load_config("recipes/webshop_tiny.yaml", [])
    env = make_env(config.env.max_steps, **{**config.env.kwargs, **config.env.eval_kwargs})
    goals = list(env.unwrapped.goal_indices)
    assert len(goals) == config.env.eval_episodes == 12  # evaluation visits each test goal once
    expert = evaluate(env, goals, expert_policy)
    assert all(o.reward == 1.0 for o in expert)
    randoms = evaluate(env, goals * 20, random_policy(seed=0))
    score = 100 * sum(o.reward for o in randoms) / len(randoms)
    assert 3.0 < score < 20.0, score  # docs/envs.md: 7.2 with seed 0
