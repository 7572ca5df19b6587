"""Step-wise multi-turn rollout: env pool -> prompt -> generator -> one StepRows row per env step.

Every turn, each live episode's prompt is rebuilt from its task, its last K (observation, action)
pairs and its current observation, so a sample is one step and the context does not grow with the
episode (the paper's setting). Two drivers give the same rows:

- "batched" turns: all live episodes are generated in one call, then stepped together; every turn
  waits for the slowest generation and the slowest env.
- "async" turns (gigpo.rollout.async_turns): each episode's prompt goes to the engine as soon as its
  own env step ends, and its action to the env as soon as its own generation ends.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Optional, Sequence

from gigpo.envs.pool import EnvPool
from gigpo.infra.seeds import turn_seed
from gigpo.rollout.async_turns import play_async
from gigpo.rollout.generator import Generator, Turns
from gigpo.rollout.records import EpisodeSummary, PromptFn, Rollout, RolloutTally, env_answer
from gigpo.rollout.types import SamplingSettings

__all__ = ["EpisodeSummary", "PromptFn", "Rollout", "rollout"]


def rollout(
    pool: EnvPool,
    generator: Generator,
    prompt_fn: PromptFn,
    seeds: Sequence[int],
    group_size: int,
    settings: SamplingSettings,
    max_prompt_tokens: int,
    group_offset: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
    turns: Optional[Turns] = None,
) -> Rollout:
    """Play `len(seeds)` groups of `group_size` episodes to the end; return their steps (a StepRows).

    `turns`: "batched" or "async" (None: the generator's own `turns`, set from `rollout.turns`). Rows
    come out in (step, traj) order either way. A prompt longer than `max_prompt_tokens` is cut from
    the left (the task text comes first in the template, so the model would lose it: the env's
    template should keep prompts short; the count of cut prompts is reported as `rollout/cut_prompts`).
    """
    turns = generator.turns if turns is None else turns
    if turns not in ("batched", "async"):
        raise ValueError(f"turns={turns!r} must be 'batched' or 'async'")
    if turns == "async" and not generator.can_submit:
        raise ValueError(f"async turns need a generator that takes requests one at a time (vllm, vllm-server); "
                         f"{type(generator).__name__} generates whole turns: use rollout.turns=batched")
    views = pool.reset(list(seeds), group_size)
    tally = RolloutTally(views, group_offset, group_size, max_prompt_tokens)
    try:  # what the generator kept across turns (the HF prompt cache) goes when the rollout ends, even on error
        if turns == "async":
            play_async(pool, generator, prompt_fn, settings, tally, progress)
        else:
            _play_batched(pool, generator, prompt_fn, settings, tally, progress)
    finally:
        generator.end_rollout()
    return tally.finish(pool)


def _play_batched(pool: EnvPool, generator: Generator, prompt_fn: PromptFn, settings: SamplingSettings,
                  tally: RolloutTally, progress: Optional[Callable[[int, int], None]]) -> None:
    """One generate call and one pool step per turn, over every live episode."""
    total = len(pool.episodes)
    live = [v for v in pool.episodes if not v.done]
    turn = 0
    while live:
        prompts = tally.prompts(prompt_fn, live)
        t1 = time.perf_counter()
        turn_settings = settings if settings.seed is None else replace(
            settings, seed=turn_seed(settings.seed, turn, len(prompts)))
        completions = generator.generate(prompts, turn_settings)
        t2 = time.perf_counter()
        results = pool.step({v.episode_idx: env_answer(c) for v, c in zip(live, completions)})
        tally.seconds["generate"] += t2 - t1
        tally.seconds["env"] += time.perf_counter() - t2
        by_idx = {r.episode_idx: r for r in results}
        for view, prompt, completion in zip(live, prompts, completions):
            tally.record(view, prompt, completion, by_idx[view.episode_idx])
        live = [r for r in results if not r.done]
        turn += 1
        if progress is not None:
            progress(total - len(live), total)
