"""What a rollout produces (its steps as one StepRows, one summary per episode) and the tally that
fills them, shared by the turn-batched and the async drivers so both record a step the same way."""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from gigpo.advantage.anchors import anchor_keys
from gigpo.advantage.rows import StepRows
from gigpo.envs.base import UnfinishedResponse
from gigpo.envs.pool import EnvPool, EpisodeView
from gigpo.rollout.types import Completion

PromptFn = Callable[[list[EpisodeView]], list[list[int]]]
"""Episode views -> prompt token ids, one list per view (e.g. PromptBuilder.batch_token_ids)."""


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
    steps: StepRows
    """Every step played, in (step, traj) order."""
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
            f"{prefix}truncated_responses": float(np.sum(self.steps.truncated_response) if len(self.steps) else 0),
        }
        types = Counter(e.task_type for e in eps if e.task_type)
        if len(types) > 1:
            for task_type in sorted(types):
                won = [e.won for e in eps if e.task_type == task_type]
                out[f"{prefix}success/{task_type}"] = sum(won) / len(won)
        return out


def env_answer(completion: Completion) -> str:
    """The text an env steps with: an answer cut off by max_new_tokens is marked, and is then invalid."""
    return UnfinishedResponse(completion.text) if completion.finish_reason == "length" else completion.text


class RolloutTally:
    """Accumulates the steps' columns, returns, invalid counts, tokens and phase times while a rollout runs."""

    def __init__(self, views: Sequence[EpisodeView], group_offset: int, group_size: int, max_prompt_tokens: int) -> None:
        self.group_offset = group_offset
        self.traj_offset = group_offset * group_size  # ids stay unique when re-drawn groups join a batch
        self.max_prompt_tokens = max_prompt_tokens
        self.columns: defaultdict[str, list[Any]] = defaultdict(list)
        """StepRows' columns by name, one entry per step recorded; StepRows itself at the end (steps())."""
        self.returns = {v.episode_idx: 0.0 for v in views}
        self.invalid: Counter = Counter()
        self.tokens = 0
        self.cut = 0
        self.seconds = {"prompt": 0.0, "generate": 0.0, "env": 0.0}

    def prompts(self, prompt_fn: PromptFn, views: list[EpisodeView]) -> list[list[int]]:
        """The views' prompts, cut from the left to max_prompt_tokens (the count is reported)."""
        t0 = time.perf_counter()
        prompts = prompt_fn(views)
        for i, ids in enumerate(prompts):
            if len(ids) > self.max_prompt_tokens:
                prompts[i] = ids[-self.max_prompt_tokens:]
                self.cut += 1
        self.seconds["prompt"] += time.perf_counter() - t0
        return prompts

    def record(self, before: EpisodeView, prompt: list[int], completion: Completion, after: EpisodeView) -> None:
        """One step: the anchor is the state before the action; reward and validity come from after it."""
        valid = bool(after.info.get("action_valid", True))
        self.invalid[before.episode_idx] += not valid
        self.returns[before.episode_idx] += after.reward
        self.tokens += len(completion.token_ids)
        step = dict(group=self.group_offset + before.group_idx, traj=self.traj_offset + before.episode_idx,
                    step=before.step, prompt_ids=prompt, response_ids=list(completion.token_ids),
                    behaviour_logprobs=None if completion.logprobs is None else list(completion.logprobs), reward=float(after.reward),
                    anchor_text=str(before.anchor), action_valid=valid,
                    truncated_response=completion.finish_reason == "length", observation=before.observation,
                    response=completion.text, action=after.info.get("action"),
                    invalid_reason=str(after.info.get("invalid_reason", "")), policy_version=completion.weight_version)
        for name, value in step.items():
            self.columns[name].append(value)

    def steps(self) -> StepRows:
        """The steps recorded so far, in (step, traj) order, each state's anchor key hashed once here."""
        if not self.columns:
            return StepRows.empty()
        columns = dict(self.columns)
        present = [lp is not None for lp in columns["behaviour_logprobs"]]
        if not any(present):  # generation asked for no log-probs: the column is absent, not filled in
            columns["behaviour_logprobs"] = None
        elif not all(present):
            raise ValueError(f"{present.count(False)} of {len(present)} steps have no generator log-probs: one rollout "
                             "must sample with one setting of SamplingSettings.logprobs")
        rows = StepRows(anchor=anchor_keys(columns["anchor_text"]), **columns)
        return rows.in_step_order()

    def finish(self, pool: EnvPool) -> Rollout:
        episodes = [EpisodeSummary(traj=self.traj_offset + v.episode_idx, group=self.group_offset + v.group_idx,
                                   seed=v.seed, won=v.won, episode_return=self.returns[v.episode_idx], length=v.step,
                                   invalid_steps=self.invalid[v.episode_idx], task_type=v.task_type, error=v.error)
                    for v in pool.episodes]
        out = Rollout(self.steps(), episodes, self.tokens, self.seconds["generate"], self.seconds["env"],
                      self.seconds["prompt"])
        out.env_faults = {"rollout/cut_prompts": float(self.cut)}
        return out
