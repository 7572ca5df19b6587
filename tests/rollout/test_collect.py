"""The collector's step records, checked against an independent replay of every trajectory.

A scripted policy (seeded random moves, some of them malformed) plays real Sokoban groups through
`rollout`; each trajectory is then replayed in a fresh env from its seed. Every record must carry the
group, trajectory and step it came from, the reward the env paid for that step, and the anchor of the
state BEFORE its action, the state GiGPO groups by. GiGPO's step groups on those records then merge
the states the group's episodes share and give non-zero step advantages.
"""
from __future__ import annotations

from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest

from gigpo.rollout.generator import Generator
from gigpo.rollout.types import Completion, SamplingSettings

MOVES = ("<action>up</action>", "<action>down</action>", "<action>left</action>", "<action>right</action>",
         "no action here")  # the last is invalid: the state stays, the step costs the penalty


class ScriptedPolicy(Generator):
    """Seeded random answers in place of a model: a policy that acts, so episodes differ within a group."""

    def __init__(self, tokenizer, seed: int) -> None:
        super().__init__()
        self.tokenizer, self.rng, self.texts = tokenizer, np.random.default_rng(seed), {}

    def generate(self, prompts: list[list[int]], settings: SamplingSettings) -> list[Completion]:
        out = []
        for i, _ in enumerate(prompts):
            text = MOVES[int(self.rng.choice(len(MOVES), p=[0.24, 0.24, 0.24, 0.24, 0.04]))]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            self.texts[tuple(ids)] = text
            out.append(Completion(i, ids, text, [-1.0] * len(ids) if settings.logprobs else None, "stop",
                                  self.version))
        return out

    def update_weights(self, named_tensors, version: int) -> None:
        raise NotImplementedError("a scripted policy has no weights")


@pytest.fixture(scope="module")
def played(tiny_model_dir):
    from transformers import AutoTokenizer

    from gigpo.config import load_config
    from gigpo.infra.seeds import train_seeds
    from gigpo.rollout.collect import rollout
    from gigpo.trainer.setup import build_pool, build_prompt_fn, sampling

    config = load_config("recipes/sokoban_tiny.yaml", ["env.num_groups=3", "env.group_size=4", "env.max_steps=5",
                                                       "env.workers=1"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    policy = ScriptedPolicy(tokenizer, seed=0)
    seeds = train_seeds(config, 1)
    with build_pool(config) as pool:
        result = rollout(pool, policy, build_prompt_fn(config, tokenizer), seeds, config.env.group_size,
                         sampling(config, evaluation=False, seed=1), config.rollout.max_prompt_tokens)
    return config, policy, seeds, result


def test_records_match_a_replay_with_the_anchor_before_the_action(played):
    config, policy, seeds, result = played
    by_traj: dict[int, list] = defaultdict(list)
    for record in result.steps.as_dicts():
        by_traj[record["traj"]].append(record)
    episodes = {e.traj: e for e in result.episodes}
    assert sorted(by_traj) == sorted(episodes) == list(range(len(seeds) * config.env.group_size))
    kwargs = {"invalid_action_penalty": config.env.invalid_action_penalty, **config.env.kwargs}
    for traj, records in by_traj.items():
        episode = episodes[traj]
        assert {r["group"] for r in records} == {episode.group} and episode.group == traj // config.env.group_size
        assert episode.seed == seeds[episode.group]  # a group's episodes play its one task
        assert [r["step"] for r in records] == list(range(len(records))) and len(records) == episode.length
        env = gym.make(config.env.id, **kwargs).unwrapped
        env.reset(seed=episode.seed)
        for record in records:
            assert record["anchor_text"] == env.anchor(), (traj, record["step"])  # the state the action was taken in
            _, reward, terminated, _, info = env.step(policy.texts[tuple(record["response_ids"])])
            assert record["reward"] == pytest.approx(reward) and record["action_valid"] == info["action_valid"]
        assert sum(r["reward"] for r in records) == pytest.approx(episode.episode_return)
        assert terminated or len(records) == config.env.max_steps


def test_gigpo_step_groups_merge_shared_states_and_carry_a_signal(played):
    from gigpo.advantage.estimators import compute_advantages

    config, _, _, result = played
    a = config.algorithm
    out = compute_advantages("gigpo", result.steps, gamma=a.gamma, lam=a.lam, step_weight=a.step_weight,
                             norm=a.norm, episode_stats=a.episode_stats, similarity=a.similarity,
                             step_min_spread=a.step_min_spread)
    first_steps = np.flatnonzero(result.steps.step == 0)
    # each group's episodes all start in its reset state: its step group holds those group_size rows at least
    # (more where an episode came back to it)
    assert min(out.step_group_size[first_steps].tolist()) >= config.env.group_size
    assert (out.step_group_size > 1).mean() > 0.3
    assert np.abs(out.step_advantage).max() > 0.05 and np.abs(out.episode_advantage).max() > 0.05
    assert np.isfinite(out.advantage).all()


def test_steps_sampled_without_log_probs_have_none_and_readers_refuse_them(tiny_model_dir, played):
    """A rollout sampled with logprobs=False records no behaviour log-probs (the column is absent, not filled
    with numbers); the gap metric then compares no token and is not logged, and the readers that need them
    (old log-probs from the generator, the rollout correction) stop with an error that says why."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    from gigpo.infra.seeds import train_seeds
    from gigpo.rollout.collect import rollout
    from gigpo.trainer.logprob_gap import gap_metrics, logprob_gap
    from gigpo.trainer.pipeline import RolloutPipeline
    from gigpo.trainer.rollout_correction import correction_from_config
    from gigpo.trainer.samples import train_samples
    from gigpo.trainer.setup import build_pool, build_prompt_fn, sampling

    config, _, _, result = played
    assert result.steps.behaviour_logprobs is not None  # the module's rollout asked for them
    config = config.model_copy(update={"env": config.env.model_copy(update={"num_groups": 1, "max_steps": 2})})
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    settings = replace(sampling(config, evaluation=False, seed=1), logprobs=False)
    with build_pool(config) as pool:
        rows = rollout(pool, ScriptedPolicy(tokenizer, seed=1), build_prompt_fn(config, tokenizer),
                       train_seeds(config, 1)[:1], config.env.group_size, settings,
                       config.rollout.max_prompt_tokens).steps
    assert len(rows) and rows.behaviour_logprobs is None
    assert gap_metrics(logprob_gap(rows.behaviour_logprobs or (), [])) == {}
    scored = rows.with_columns(advantage=np.zeros(len(rows)))
    with pytest.raises(ValueError, match="old_logprobs=generator.*logprobs=False"):
        train_samples(scored, tokenizer, behaviour_as_old=True)
    samples = train_samples(scored, tokenizer)
    corrected = config.model_copy(update={"algorithm": config.algorithm.model_copy(update={"rollout_correction": "token"})})
    pipeline = RolloutPipeline(None, None, correction=correction_from_config(corrected))
    with pytest.raises(ValueError, match="rollout_correction needs the generator's log-probs"):
        pipeline.correct(samples, [0] * len(samples), rows.behaviour_logprobs or ())
