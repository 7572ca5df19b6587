"""Env steps per second through the EnvPool (W=1, W=2) against the same envs stepped in-process.

    PYTHONPATH=. python benchmarks/bench_envs.py                      # Sokoban, 128 episodes
    PYTHONPATH=. python benchmarks/bench_envs.py --env gigpo/TwentyFour-v0 --groups 16 --group-size 8

Every run plays the same episodes with the same model-style action texts (seeded random moves,
`<think>...</think><action>move</action>`), resets included, until every episode is done or the
step limit truncates it. "direct" steps one `gymnasium.make` env per episode in this process; the
pool's overhead per env step is (pool time - direct time) / steps. Results go to docs/benchmarks.md
by hand. The cores may be shared, so each figure is the fastest of `--repeats` runs.
"""
from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import gigpo.envs  # noqa: F401  (registers the built-in envs)
import gigpo.envs.alfworld  # noqa: F401  (registers gigpo/ALFWorld-v0)
from gigpo.envs.pool import EnvPool


def action_text(rng: np.random.Generator, actions: list[str]) -> str:
    return f"<think>try a move</think><action>{actions[int(rng.integers(len(actions)))]}</action>"


class Timer:
    """Seconds spent in resets and in steps, and the number of env steps."""

    def __init__(self) -> None:
        self.reset_s = self.step_s = 0.0
        self.steps = 0

    def report(self, name: str, baseline: "Timer | None" = None) -> str:
        line = (f"{name:<10} steps {self.steps / self.step_s:8.0f}/s ({self.step_s / self.steps * 1e6:6.1f} us/step)"
                f"  resets {self.reset_s * 1e3:7.1f} ms")
        if baseline is not None:
            overhead = (self.step_s - baseline.step_s) / self.steps * 1e6
            line += f"  step speed {baseline.step_s / self.step_s:.2f}x direct, overhead {overhead:+.1f} us/step"
        return line


def run_direct(env_id: str, kwargs: dict, seeds: list[int], group_size: int, max_steps: int, rounds: int) -> Timer:
    envs = [gym.make(env_id, max_episode_steps=max_steps, disable_env_checker=True, **kwargs)
            for _ in range(len(seeds) * group_size)]
    timer = Timer()
    for round_idx in range(rounds):
        rng = np.random.default_rng(round_idx)
        start = time.perf_counter()
        infos = [env.reset(seed=seeds[i // group_size] + round_idx * 100_000)[1] for i, env in enumerate(envs)]
        timer.reset_s += time.perf_counter() - start
        live = set(range(len(envs)))
        start = time.perf_counter()
        while live:
            for i in sorted(live):
                _, _, terminated, truncated, infos[i] = envs[i].step(action_text(rng, infos[i]["admissible_actions"]))
                timer.steps += 1
                if terminated or truncated:
                    live.discard(i)
        timer.step_s += time.perf_counter() - start
    return timer


def run_pool(env_id: str, kwargs: dict, seeds: list[int], group_size: int, max_steps: int, rounds: int,
             workers: int) -> Timer:
    timer = Timer()
    with EnvPool(env_id, kwargs, max_steps=max_steps, workers=workers) as pool:
        pool.reset(seeds, group_size)  # warm-up: worker start-up is not part of the steady state
        for round_idx in range(rounds):
            rng = np.random.default_rng(round_idx)
            start = time.perf_counter()
            pool.reset([s + round_idx * 100_000 for s in seeds], group_size)
            timer.reset_s += time.perf_counter() - start
            while pool.live_episodes():
                # Same order of draws as run_direct: ascending episode index over the live ones.
                actions = {v.episode_idx: action_text(rng, v.admissible_actions) for v in pool.episodes if not v.done}
                start = time.perf_counter()
                pool.step(actions)
                timer.step_s += time.perf_counter() - start
                timer.steps += len(actions)
        assert pool.stats().env_errors == 0 and pool.stats().step_timeouts == 0
    return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="gigpo/Sokoban-v0")
    parser.add_argument("--kwargs", default="{}", help="env kwargs as JSON")
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3, help="keep the fastest of this many runs (shared cores)")
    args = parser.parse_args()
    kwargs = json.loads(args.kwargs)
    seeds = list(range(args.groups))
    episodes = args.groups * args.group_size

    def best(run, *extra) -> Timer:
        timers = [run(args.env, kwargs, seeds, args.group_size, args.max_steps, args.rounds, *extra)
                  for _ in range(args.repeats)]
        fastest = min(timers, key=lambda t: t.step_s)
        fastest.reset_s = min(t.reset_s for t in timers)
        return fastest

    direct = best(run_direct)
    print(f"{args.env} {kwargs}: {episodes} episodes x {args.rounds} rounds, at most {args.max_steps} steps each, "
          f"best of {args.repeats}")
    print(direct.report("direct"))
    for workers in args.workers:
        pooled = best(run_pool, workers)
        assert pooled.steps == direct.steps, "pool and direct runs must play the same episodes"
        print(pooled.report(f"pool W={workers}", direct))


if __name__ == "__main__":
    main()
