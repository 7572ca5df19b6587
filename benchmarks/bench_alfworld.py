"""ALFWorld env steps per second through the EnvPool with W=1 and W=2 workers (real TextWorld engine).

    PYTHONPATH=. python benchmarks/bench_alfworld.py                       # the package's sample tasks
    PYTHONPATH=. python benchmarks/bench_alfworld.py --data DIR --groups 8 --group-size 4

Episodes take seeded random admissible actions, `<think>...</think><action>cmd</action>`, until done
or `--max-steps`. Resets (game load + initial state) are timed apart from steps. The engine computes
every applicable action at every step, so one step is tens of milliseconds of CPU. The cores may be
shared, so each figure is the fastest of `--repeats` runs. Results go to docs/benchmarks.md by hand.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from gigpo.envs.alfworld import ENV_ID, SAMPLE_TASKS_DIR
from gigpo.envs.pool import EnvPool


def run(data: str, split: str, seeds: list[int], group_size: int, max_steps: int, workers: int) -> tuple[float, float, int]:
    """(reset seconds, step seconds, steps) for one round of episodes in a fresh pool."""
    rng = np.random.default_rng(0)
    with EnvPool(ENV_ID, {"data_path": data, "split": split, "max_steps": max_steps}, workers=workers) as pool:
        pool.reset(seeds[:1], 1)  # warm-up: worker start-up and imports are not part of the steady state
        start = time.perf_counter()
        views = pool.reset(seeds, group_size)
        reset_s = time.perf_counter() - start
        step_s, steps = 0.0, 0
        while pool.live_episodes():
            actions = {}
            for view in pool.episodes:
                if not view.done:
                    choice = view.admissible_actions[int(rng.integers(len(view.admissible_actions)))]
                    actions[view.episode_idx] = f"<think>explore</think><action>{choice}</action>"
            start = time.perf_counter()
            pool.step(actions)
            step_s += time.perf_counter() - start
            steps += len(actions)
        assert pool.stats().env_errors == 0, pool.stats()
    return reset_s, step_s, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SAMPLE_TASKS_DIR))
    parser.add_argument("--split", default="train")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    seeds = list(range(args.groups))
    print(f"{ENV_ID} {args.data} ({args.split}): {args.groups}x{args.group_size} episodes, "
          f"<= {args.max_steps} random admissible steps, best of {args.repeats}")
    for workers in args.workers:
        runs = [run(args.data, args.split, seeds, args.group_size, args.max_steps, workers) for _ in range(args.repeats)]
        reset_s = min(r[0] for r in runs)
        step_s, steps = min((r[1], r[2]) for r in runs)
        episodes = args.groups * args.group_size
        print(f"pool W={workers}: steps {steps / step_s:6.1f}/s ({step_s / steps * 1e3:6.1f} ms/step), "
              f"resets {reset_s / episodes * 1e3:6.0f} ms/episode")


if __name__ == "__main__":
    main()
