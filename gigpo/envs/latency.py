"""Injected step latency: any registered env made slow like a remote tool (web, search, code runner).

    gym.make("gigpo/Latency-v0", env="gigpo/Sokoban-v0", median_s=0.2, p99_s=2.0)

Every `step` first sleeps a lognormal time with the given median and 99th percentile (a long tail, as
tool calls have), then steps the wrapped env unchanged: observations, rewards, anchors and the expert
are the inner env's. Resets are not delayed. The sleep holds no CPU, so it measures waiting, not work.
"""
from __future__ import annotations

import math
import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import WrapperSpec

PRIOR_WRAPPERS = (WrapperSpec("EpisodeEndGuard", "gigpo.envs.episode_end:EpisodeEndGuard", kwargs={}),
                  WrapperSpec("StepLatency", "gigpo.envs.latency:StepLatency", kwargs=None))
"""The wrappers `with_latency`'s env already carries, as Gymnasium lists them (the inner env's guard, then
the latency): gigpo/Latency-v0's registration names them first, so `gym.make` adds the outer guard."""

Z_99 = 2.3263478740408408
"""The standard normal's 99th percentile: p99 = median * exp(Z_99 * sigma) for a lognormal."""


def lognormal_sigma(median_s: float, p99_s: float) -> float:
    """sigma of the lognormal whose median and 99th percentile are given."""
    if not 0 < median_s <= p99_s:
        raise ValueError(f"need 0 < median_s={median_s} <= p99_s={p99_s}")
    return math.log(p99_s / median_s) / Z_99


class StepLatency(gym.Wrapper):
    """Sleeps a lognormal(median_s, p99_s) draw before each step of `env`."""

    def __init__(self, env: gym.Env, median_s: float = 0.2, p99_s: float = 2.0, seed: Optional[int] = None) -> None:
        super().__init__(env)
        self.mu, self.sigma = math.log(median_s), lognormal_sigma(median_s, p99_s)
        self.rng = np.random.default_rng(seed)  # None: fresh entropy, so pool workers do not wait in step
        self.waited_s = 0.0

    def step(self, action: Any):
        delay = float(self.rng.lognormal(self.mu, self.sigma))
        time.sleep(delay)
        self.waited_s += delay
        return self.env.step(action)


def with_latency(env: str = "gigpo/Sokoban-v0", median_s: float = 0.2, p99_s: float = 2.0, seed: Optional[int] = None,
                 **env_kwargs: Any) -> gym.Env:
    """Entry point of gigpo/Latency-v0: the registered env `env` (made with `env_kwargs`), slowed down."""
    return StepLatency(gym.make(env, disable_env_checker=True, **env_kwargs), median_s, p99_s, seed)
