"""gigpo/Latency-v0: any env, slowed by lognormal step latency with the asked median and 99th percentile."""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import gigpo.envs  # noqa: F401  (registers the built-in envs)
from gigpo.envs.latency import StepLatency, lognormal_sigma


def test_sigma_gives_the_asked_median_and_99th_percentile():
    sigma = lognormal_sigma(0.2, 2.0)
    assert sigma == pytest.approx(math.log(10) / 2.3263478740408408)
    draws = np.random.default_rng(0).lognormal(math.log(0.2), sigma, 200_000)
    # sample quantiles of 200k draws: the median within ~1%, the 99th percentile within ~3% (its standard
    # error is about sqrt(0.99 * 0.01 / n) / density, ~1.5% here)
    assert np.median(draws) == pytest.approx(0.2, rel=0.01)
    assert np.quantile(draws, 0.99) == pytest.approx(2.0, rel=0.03)
    with pytest.raises(ValueError, match="median_s"):
        lognormal_sigma(2.0, 0.2)


def test_the_wrapped_env_plays_like_the_plain_one_and_waits_before_each_step():
    slow = gym.make("gigpo/Latency-v0", env="gigpo/Sokoban-v0", median_s=0.002, p99_s=0.01, seed=1, size=5)
    plain = gym.make("gigpo/Sokoban-v0", size=5)
    assert slow.reset(seed=4)[0] == plain.reset(seed=4)[0]
    assert slow.unwrapped.expert_action() == plain.unwrapped.expert_action()  # the pool reads the inner env
    for move in ("up", "left", "down", "nonsense"):
        got, want = slow.step(f"<action>{move}</action>"), plain.step(f"<action>{move}</action>")
        assert got[:4] == want[:4] and got[4]["anchor"] == want[4]["anchor"]
    latency = slow.env
    while not isinstance(latency, StepLatency):
        latency = latency.env
    assert latency.waited_s > 0
