"""Async turns: each episode steps as soon as its own action is ready, with the rows the batched driver gives."""
from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict

import pytest

import gigpo.envs  # noqa: F401  (registers the built-in envs)
from gigpo.config import load_config
from gigpo.envs.pool import EnvPool
from gigpo.rollout.collect import rollout
from gigpo.rollout.generator import Generator
from gigpo.rollout.types import Completion, SamplingSettings
from envs.faulty_envs import CounterEnv
from support.sokoban_pool import sokoban_tiny_pool

COUNTER_ID = "test/AsyncCounter-v0"
gigpo.envs.register_env(COUNTER_ID, CounterEnv)


@pytest.fixture(scope="module")
def sokoban(tiny_model_dir):
    """A real Sokoban pool and prompt builder with sokoban_tiny's settings and the tiny model's tokenizer."""
    with sokoban_tiny_pool(tiny_model_dir, workers=2) as shared:
        yield shared


def _play(sokoban, generator, turns, settings, seeds=(3, 4), group_size=3):
    config, pool, prompt_fn = sokoban
    return rollout(pool, generator, prompt_fn, list(seeds), group_size, settings,
                   config.rollout.max_prompt_tokens, turns=turns)


def test_greedy_async_turns_play_the_same_episodes_as_batched_turns(sokoban, vllm_generator):
    greedy = SamplingSettings(temperature=0, max_new_tokens=8, stop=("</action>",), seed=5)
    batched = _play(sokoban, vllm_generator, "batched", greedy)
    played = _play(sokoban, vllm_generator, "async", greedy)
    assert [asdict(e) for e in played.episodes] == [asdict(e) for e in batched.episodes]
    assert len(played.steps) == len(batched.steps) > len(played.episodes)  # several steps per episode
    for got, want in zip(played.steps.as_dicts(), batched.steps.as_dicts()):
        # same tokens; log-probs of one sequence computed in a different batch may differ in the last bits
        # of fp32 (the matmul splits change), far below 1e-4 for values of magnitude <= ~10
        assert got.pop("behaviour_logprobs") == pytest.approx(want.pop("behaviour_logprobs"), abs=1e-4)
        assert got == want


def test_sampled_async_rows_are_well_formed_and_repeat_under_the_same_seed(sokoban, vllm_generator):
    config, pool, prompt_fn = sokoban
    sampled = SamplingSettings(temperature=1.0, max_new_tokens=8, stop=("</action>",), seed=11)
    first = _play(sokoban, vllm_generator, "async", sampled)
    again = _play(sokoban, vllm_generator, "async", sampled)
    steps = first.steps.as_dicts()
    assert steps == again.steps.as_dicts()  # whatever order requests ended in
    assert [(s["step"], s["traj"]) for s in steps] == sorted((s["step"], s["traj"]) for s in steps)
    start = pool.reset([3, 4], group_size=3)
    for episode in first.episodes:
        rows = [s for s in steps if s["traj"] == episode.traj]
        assert [s["step"] for s in rows] == list(range(episode.length))
        assert sum(s["reward"] for s in rows) == pytest.approx(episode.episode_return)
        assert sum(not s["action_valid"] for s in rows) == episode.invalid_steps
        assert rows[0]["anchor_text"] == str(start[episode.traj].anchor)  # the state before the first action
        assert rows[0]["prompt_ids"] == prompt_fn([start[episode.traj]])[0]
        for row in rows:
            assert len(row["behaviour_logprobs"]) == len(row["response_ids"]) > 0
            assert all(lp <= 0 for lp in row["behaviour_logprobs"])
            assert row["group"] == episode.group and row["truncated_response"] == (len(row["response_ids"]) == 8
                                                                                    and not row["action_valid"])


def test_the_hf_backend_has_no_async_turns(tiny_model_dir, sokoban):
    from gigpo.rollout.hf_backend import HFGenerator

    with pytest.raises(ValueError, match="rollout.turns=batched"):
        _play(sokoban, HFGenerator(str(tiny_model_dir), dtype="fp32"), "async", SamplingSettings(max_new_tokens=4))
    with pytest.raises(ValueError, match="needs a vLLM backend"):
        load_config("recipes/sokoban_tiny.yaml", ["rollout.turns=async"])


class _ScriptedActions(Generator):
    """Answers each prompt [episode, step] with the action the script names, after a random delay, from
    its own threads. A real model cannot be made to ask an env to crash or hang on demand."""

    def __init__(self, script: dict[tuple[int, int], str]) -> None:
        super().__init__()
        self.script = script
        self.rng = random.Random(0)

    @property
    def can_submit(self) -> bool:
        return True

    def submit(self, prompt, settings, done) -> None:
        text = self.script.get((prompt[0], prompt[1]), "inc")
        answer = [Completion(0, [1, 2], text, [-0.5, -0.5], "stop", 0)]
        threading.Timer(self.rng.uniform(0.0, 0.05), done, args=(answer,)).start()

    def generate(self, prompts, settings):
        raise NotImplementedError

    def update_weights(self, named_tensors, version):
        raise NotImplementedError


def test_a_crashing_or_hanging_env_ends_only_its_own_episode():
    script = {(1, 1): "die", (2, 0): "hang", (4, 2): "boom"}
    with EnvPool(COUNTER_ID, env_kwargs={"hang_s": 60.0}, max_steps=4, workers=2, step_timeout_s=2.0) as pool:
        t0 = time.monotonic()
        played = rollout(pool, _ScriptedActions(script), lambda views: [[v.episode_idx, v.step] for v in views],
                         [7, 8, 9], 2, SamplingSettings(), max_prompt_tokens=16, turns="async")
        assert time.monotonic() - t0 < 30  # the hang cost one step timeout, not 60 s
        lengths = {e.traj: e.length for e in played.episodes}
        errors = {e.traj: e.error for e in played.episodes}
        assert lengths == {0: 4, 1: 1, 2: 0, 3: 4, 4: 2, 5: 4}
        assert "died" in errors[1] and "step_timeout_s" in errors[2] and "boom" in errors[4]
        assert all(errors[t] is None for t in (0, 3, 5))
        rows = {(s["traj"], s["step"]): s for s in played.steps.as_dicts()}
        # a faulted episode also has a row for the step that ended it (as the batched driver records it)
        assert sorted(rows) == [(t, k) for t in range(6) for k in range(lengths[t] + (errors[t] is not None))]
        assert rows[(1, 1)]["reward"] == 0.0 and rows[(0, 3)]["reward"] == 1.0  # the crash step earns nothing
        assert pool.stats().worker_restarts == 2
