"""Step-wise multi-turn rollout: env pool -> prompt -> generator -> one step row per env step.

Every turn, each live episode's prompt is rebuilt from its task, its last K (observation, action)
pairs and its current observation, so a sample is one step and the context does not grow with the
episode (the paper's setting). All live episodes are generated in one batched call per turn.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from gigpo.envs.base import UnfinishedResponse
from gigpo.envs.pool import EnvPool, EpisodeView
from gigpo.rollout.generator import Generator
from gigpo.rollout.types import Completion, SamplingSettings

PromptFn = Callable[[list[EpisodeView]], list[list[int]]]
"""Episode views -> prompt token ids, one list per view (e.g. PromptBuilder.batch_token_ids)."""


@dataclass
class StepRecord:
    """One environment step of one trajectory: the training sample and what GiGPO groups it by."""

    group: int
    traj: int
    step: int
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    """Log-probs of the response under the generator (behaviour policy), for diagnostics."""
    reward: float
    anchor: str
    action_valid: bool
    truncated_response: bool
    """The response hit max_new_tokens before ending."""
    observation: str = ""
    """What the model saw at this step (the env's observation text; the prompt adds task and history)."""
    response: str = ""
    action: Optional[str] = None
    """The action the env parsed from the response (None when it could not parse one)."""
    invalid_reason: str = ""
    policy_version: int = -1
    """Weight version of the generator that sampled the response."""


@dataclass
class EpisodeSummary:
    traj: int
    group: int
    seed: int
    won: bool
    episode_return: float
    length: int
    invalid_steps: int
    task_type: str
    error: Optional[str]


@dataclass
class Rollout:
    steps: list[StepRecord]
    episodes: list[EpisodeSummary]
    tokens_generated: int = 0
    seconds_generate: float = 0.0
    seconds_env: float = 0.0
    seconds_prompt: float = 0.0
    env_faults: dict[str, float] = field(default_factory=dict)

    def metrics(self, prefix: str = "rollout/") -> dict[str, float]:
        """Success, return, length and invalid-action rate, overall and per task type."""
        eps = self.episodes
        n = max(len(eps), 1)
        out = {
            f"{prefix}success": sum(e.won for e in eps) / n,
            f"{prefix}return": sum(e.episode_return for e in eps) / n,
            f"{prefix}episode_length": sum(e.length for e in eps) / n,
            f"{prefix}invalid_action_rate": sum(e.invalid_steps for e in eps) / max(sum(e.length for e in eps), 1),
            f"{prefix}episodes": float(len(eps)),
            f"{prefix}env_steps": float(len(self.steps)),
            f"{prefix}errors": float(sum(e.error is not None for e in eps)),
            f"{prefix}tokens_generated": float(self.tokens_generated),
            f"{prefix}truncated_responses": float(sum(s.truncated_response for s in self.steps)),
        }
        types = Counter(e.task_type for e in eps if e.task_type)
        if len(types) > 1:
            for task_type in sorted(types):
                won = [e.won for e in eps if e.task_type == task_type]
                out[f"{prefix}success/{task_type}"] = sum(won) / len(won)
        return out


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
) -> Rollout:
    """Play `len(seeds)` groups of `group_size` episodes to the end; return their step rows.

    A prompt longer than `max_prompt_tokens` is cut from the left (the task text comes first in the
    template, so the model would lose it: the env's template should keep prompts short; the count of
    cut prompts is reported as `rollout/cut_prompts`).
    """
    views = pool.reset(list(seeds), group_size)
    traj_offset = group_offset * group_size  # ids stay unique when re-drawn groups join a batch
    steps: list[StepRecord] = []
    returns = {v.episode_idx: 0.0 for v in views}
    invalid = Counter()
    tokens = 0
    t_gen = t_env = t_prompt = 0.0
    turn = 0
    cut = 0
    live = [v for v in views if not v.done]
    try:  # what the generator kept across turns (the HF prompt cache) goes when the rollout ends, even on error
        while live:
            t0 = time.perf_counter()
            prompts = prompt_fn(live)
            for i, ids in enumerate(prompts):
                if len(ids) > max_prompt_tokens:
                    prompts[i] = ids[-max_prompt_tokens:]
                    cut += 1
            t1 = time.perf_counter()
            turn_settings = settings if settings.seed is None else _reseed(settings, settings.seed * 1000 + turn)
            completions = generator.generate(prompts, turn_settings)
            t2 = time.perf_counter()
            results = pool.step({v.episode_idx: _answer(c) for v, c in zip(live, completions)})
            t3 = time.perf_counter()
            t_prompt, t_gen, t_env = t_prompt + t1 - t0, t_gen + t2 - t1, t_env + t3 - t2
            by_idx = {r.episode_idx: r for r in results}
            for view, prompt, completion in zip(live, prompts, completions):
                after = by_idx[view.episode_idx]
                valid = bool(after.info.get("action_valid", True))
                invalid[view.episode_idx] += not valid
                returns[view.episode_idx] += after.reward
                tokens += len(completion.token_ids)
                steps.append(StepRecord(
                    group=group_offset + view.group_idx, traj=traj_offset + view.episode_idx, step=view.step, prompt_ids=prompt,
                    response_ids=list(completion.token_ids), response_logprobs=list(completion.logprobs),
                    reward=float(after.reward), anchor=str(view.anchor), action_valid=valid,
                    truncated_response=completion.finish_reason == "length", observation=view.observation,
                    response=completion.text, action=after.info.get("action"),
                    invalid_reason=str(after.info.get("invalid_reason", "")), policy_version=completion.weight_version))
            live = [r for r in results if not r.done]
            turn += 1
            if progress is not None:
                progress(len(views) - len(live), len(views))
    finally:
        generator.end_rollout()
    episodes = [EpisodeSummary(traj=traj_offset + v.episode_idx, group=group_offset + v.group_idx, seed=v.seed, won=v.won,
                               episode_return=returns[v.episode_idx], length=v.step, invalid_steps=invalid[v.episode_idx],
                               task_type=v.task_type, error=v.error) for v in pool.episodes]
    out = Rollout(steps, episodes, tokens, t_gen, t_env, t_prompt)
    out.env_faults = {"rollout/cut_prompts": float(cut)}
    return out


def _answer(completion: Completion) -> str:
    """The text an env steps with: an answer cut off by max_new_tokens is marked, and is then invalid."""
    return UnfinishedResponse(completion.text) if completion.finish_reason == "length" else completion.text


def _reseed(settings: SamplingSettings, seed: int) -> SamplingSettings:
    from dataclasses import replace

    return replace(settings, seed=seed)
