"""Reference policies on WebShop: the expert and a random admissible policy, and a loop to score them.

The random policy clicks uniformly among the page's admissible buttons; on the search page, where
the only admissible action is the `search[<your query>]` template, it searches with 1-5 words drawn
at random from the instruction (a literal "<your query>" would find nothing).

    python -m gigpo.envs.webshop.baselines --num-products 300 --split test --max-steps 10 --episodes-per-goal 20
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import gymnasium as gym
import numpy as np

import gigpo.envs  # noqa: F401  (registers gigpo/WebShop-v0)
from gigpo.envs.webshop.env import WebShopEnv

Policy = Callable[[WebShopEnv], Optional[str]]


@dataclass(frozen=True)
class Outcome:
    goal_index: int
    reward: float
    won: bool
    steps: int


def expert_policy(env: WebShopEnv) -> Optional[str]:
    return env.expert_action()


def random_policy(seed: int = 0) -> Policy:
    rng = np.random.default_rng(seed)

    def act(env: WebShopEnv) -> str:
        if env.state.kind == "search":
            words = env.task.replace(",", " ").split()
            picked = rng.choice(len(words), size=int(rng.integers(1, min(5, len(words)) + 1)), replace=False)
            return "search[" + " ".join(words[i] for i in sorted(picked)) + "]"
        actions = env.admissible_actions()
        return actions[int(rng.integers(len(actions)))]

    return act


def make_env(max_steps: int, **kwargs) -> gym.Env:
    """gigpo/WebShop-v0 as training makes it: truncated after `max_steps` steps by Gymnasium's TimeLimit."""
    return gym.make("gigpo/WebShop-v0", max_episode_steps=max_steps, **kwargs)


def play(env: gym.Env, goal_index: int, policy: Policy) -> Outcome:
    """One episode on goal `goal_index` of `env` (from `make_env`: the time limit ends a policy that never
    buys); the last step's reward is the purchase's (0 when nothing was bought)."""
    env.reset(options={"goal_index": goal_index})
    shop: WebShopEnv = env.unwrapped
    reward, steps, done, info = 0.0, 0, False, {}
    while not done:
        action = policy(shop)
        if action is None:
            raise RuntimeError(f"goal {goal_index}: the policy has no action on page {shop.state.kind!r}")
        _, reward, terminated, truncated, info = env.step(f"<action>{action}</action>")
        steps, done = steps + 1, terminated or truncated
    purchase = info.get("purchase")
    return Outcome(goal_index, purchase["reward"] if purchase else 0.0, bool(info["won"]), steps)


def evaluate(env: gym.Env, goal_indices: Sequence[int], policy: Policy) -> list[Outcome]:
    return [play(env, i, policy) for i in goal_indices]


def summary(outcomes: Sequence[Outcome]) -> str:
    rewards = np.array([o.reward for o in outcomes])
    wins = np.array([o.won for o in outcomes])
    steps = np.array([o.steps for o in outcomes])
    return (f"{len(outcomes)} goals: score {100 * rewards.mean():.1f} (mean reward x 100), "
            f"success {100 * wins.mean():.1f}%, {steps.mean():.1f} steps per episode")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-products", type=int, default=1000)
    parser.add_argument("--catalogue-seed", type=int, default=0)
    parser.add_argument("--split", default="test", choices=("train", "eval", "test"))
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--episodes-per-goal", type=int, default=1, help="random policy episodes per goal")
    parser.add_argument("--seed", type=int, default=0, help="random policy seed")
    args = parser.parse_args(argv)
    env = make_env(args.max_steps, num_products=args.num_products, catalogue_seed=args.catalogue_seed, split=args.split)
    shop: WebShopEnv = env.unwrapped
    goals = list(shop.goal_indices)
    print(f"catalogue: {len(shop.catalogue.products)} products, {len(shop.catalogue.goals)} goals; "
          f"split {args.split}: {len(goals)} goals")
    print("expert: " + summary(evaluate(env, goals, expert_policy)))
    policy = random_policy(args.seed)
    print("random: " + summary(evaluate(env, goals * args.episodes_per_goal, policy)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
