"""The CPU recipe's shop: the reference scores quoted in recipes/webshop_tiny.yaml and docs/envs.md hold."""
from __future__ import annotations

from gigpo.config import load_config
from gigpo.envs.webshop.baselines import evaluate, expert_policy, make_env, random_policy


def test_webshop_tiny_test_split_expert_perfect_random_policy_far_below():
    config = load_config("recipes/webshop_tiny.yaml", [])
    env = make_env(config.env.max_steps, **{**config.env.kwargs, **config.env.eval_kwargs})
    goals = list(env.unwrapped.goal_indices)
    assert len(goals) == config.env.eval_episodes == 39  # evaluation visits each test goal once
    expert = evaluate(env, goals, expert_policy)
    assert all(o.reward == 1.0 for o in expert)
    randoms = evaluate(env, goals * 20, random_policy(seed=0))
    score = 100 * sum(o.reward for o in randoms) / len(randoms)
    assert 3.0 < score < 20.0, score  # 8.8 with seed 0 on the 1000-product shop


def test_warmup_refuses_expert_answers_longer_than_the_rollout_may_write(tmp_path):
    """WebShop's expert searches with the goal's words: 12-31 tokens with the shop's tokenizer. A recipe whose
    rollout.max_new_tokens is shorter would warm up on answers generation always cuts (every search refused),
    so `gigpo train` stops after collecting the demonstrations, before any warm-up step, and names the fix."""
    from support.run import REPO, clean_env
    from support.zygote import run_cli

    args = ["train", "recipes/webshop_tiny.yaml", "rollout.max_new_tokens=10",
           "trainer.sft_rooms=4", "env.kwargs.num_products=100", "env.workers=1", "logging.progress=false",
           "logging.wandb_mode=disabled", f"trainer.run_dir={tmp_path / 'run'}"]
    proc = run_cli(args, cwd=REPO, env=clean_env(), timeout=600)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "longer than rollout.max_new_tokens=10" in proc.stderr and "set rollout.max_new_tokens: " in proc.stderr
    assert "warm-up: step" not in proc.stdout + proc.stderr
