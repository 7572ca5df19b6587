"""StepRows from rollout to update: a real rollout's rows (scripted policy on the real Sokoban pool, as in
tests/rollout/test_collect.py), checked once, scored by the estimator and turned into the engines' samples
without losing the row alignment."""
from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pytest
import torch

from gigpo.advantage.estimators import compute_advantages
from gigpo.advantage.rows import AdvantageInputError, StepRows
from gigpo.config import load_config
from gigpo.trainer.nonfinite import NonFiniteError, stop_on_nonfinite_rows
from gigpo.trainer.samples import train_samples, with_advantages


@pytest.fixture(scope="module")
def played(tiny_model_dir):
    from transformers import AutoTokenizer

    from gigpo.infra.seeds import train_seeds
    from gigpo.rollout.collect import rollout
    from gigpo.trainer.setup import build_pool, build_prompt_fn, sampling

    from rollout.test_collect import ScriptedPolicy

    config = load_config("recipes/sokoban_tiny.yaml", ["env.num_groups=3", "env.group_size=4", "env.max_steps=4",
                                                       "env.workers=1"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with build_pool(config) as pool:
        result = rollout(pool, ScriptedPolicy(tokenizer, seed=0), build_prompt_fn(config, tokenizer),
                         train_seeds(config, 1), config.env.group_size, sampling(config, evaluation=False, seed=1),
                         config.rollout.max_prompt_tokens)
    return config, tokenizer, result.steps


def test_the_rollout_fills_one_record_that_the_estimator_scores_and_the_samples_keep_aligned(played):
    config, tokenizer, rows = played
    assert len(rows) > config.env.num_groups * config.env.group_size
    assert rows.prompt_ids is not None and rows.observation is not None and rows.advantage is None
    a = config.algorithm
    scored = with_advantages(rows, a, split_versions=True)
    expected = compute_advantages(a.estimator, rows, gamma=a.gamma, lam=a.lam, step_weight=a.step_weight,
                                  norm=a.norm, episode_stats=a.episode_stats, similarity=a.similarity,
                                  step_min_spread=a.step_min_spread)
    assert np.array_equal(scored.advantage, expected.advantage) and np.array_equal(scored.returns, expected.returns)
    assert np.abs(scored.advantage).max() > 0  # the scripted policy's episodes differ: a real signal
    assert scored.response_ids == rows.response_ids and scored.observation == rows.observation  # the same steps
    samples = train_samples(scored, tokenizer, behaviour_as_old=True)
    for i, (sample, adv) in enumerate(zip(samples, scored.advantage)):
        assert sample.response_ids == rows.response_ids[i] and sample.advantage == float(adv)
        assert torch.equal(sample.logp_old, torch.tensor(rows.behaviour_logprobs[i], dtype=torch.float32))
        assert sample.action_mask.shape == (len(rows.response_ids[i]),)
    # a shuffled (placebo) batch has the same values in another order
    placebo = with_advantages(rows, a, split_versions=True, placebo=(0, 1))
    assert sorted(placebo.advantage) == sorted(scored.advantage) and not np.array_equal(placebo.advantage, scored.advantage)


def test_a_placebo_logs_and_records_the_advantages_it_trains_on(played):
    """`algorithm.shuffle_advantages`: the rows the loop logs (adv/ metrics) and records (the viewer's
    per-step advantage) hold the permuted advantages the samples carry, parts moved alongside; before,
    they held the estimate each row lost to the permutation."""
    from gigpo.infra.seeds import placebo_advantages
    from gigpo.viewer.record_files import step_columns

    config, tokenizer, rows = played
    a = config.algorithm
    assert a.estimator == "gigpo" and a.step_weight != 0  # both parts are non-trivial
    estimate = with_advantages(rows, a, split_versions=True)
    placebo = with_advantages(rows, a, split_versions=True, placebo=(0, 1))
    trained = [s.advantage for s in train_samples(placebo, tokenizer)]
    assert np.array_equal(placebo.advantage, placebo_advantages(estimate.advantage, 0, 1))  # the same update as before
    assert not np.array_equal(placebo.advantage, estimate.advantage)
    assert np.array_equal(placebo.advantage, trained)
    columns = step_columns(placebo, a.gamma, a.similarity, True, a.estimator)
    assert np.array_equal(columns["advantage"], placebo.advantage)
    # each row carries the episode and step parts of the advantage it got, which still add up to it
    assert np.allclose(placebo.episode_advantage + a.step_weight * placebo.step_advantage, placebo.advantage)
    assert not np.array_equal(placebo.episode_advantage, estimate.episode_advantage)
    # what belongs to the row's own state stays the row's
    assert np.array_equal(placebo.step_group_size, estimate.step_group_size)
    assert np.array_equal(placebo.returns, estimate.returns)


def test_selecting_and_joining_rows_keeps_every_column_together(played):
    config, _, rows = played
    scored = with_advantages(rows, config.algorithm, split_versions=True)
    kept = scored.select(scored.group != 1)
    assert set(kept.group.tolist()) == {0, 2}
    picked = np.flatnonzero(scored.group != 1)
    assert kept.response_ids == tuple(scored.response_ids[i] for i in picked)
    assert kept.observation == tuple(scored.observation[i] for i in picked)
    assert np.array_equal(kept.advantage, scored.advantage[picked])
    assert np.array_equal(kept.policy_version, scored.policy_version[picked])
    # what crosses processes (broadcast_object pickles it) comes back with the same rows
    again = pickle.loads(pickle.dumps(kept))
    assert again.as_dicts() == kept.as_dicts() and np.array_equal(again.layout.order, kept.layout.order)
    # two draws joined: the rows of both, in order; rows without a column cannot join rows with it
    joined = StepRows.concat([kept, scored.select(scored.group == 1)])
    assert joined.as_dicts() == kept.as_dicts() + scored.select(scored.group == 1).as_dicts()
    with pytest.raises(AdvantageInputError, match="cannot concatenate"):
        StepRows.concat([rows, kept])


def test_a_bad_step_is_refused_at_construction_naming_the_step(played):
    _, _, rows = played
    nan_reward = np.where(np.arange(len(rows)) == 2, np.nan, rows.reward)
    with pytest.raises(AdvantageInputError, match="'reward' is NaN or infinite in rows 2"):
        replace(rows, reward=nan_reward)
    # in training it stops the run as any NaN does (exit code 3), naming the iteration and phase
    with pytest.raises(NonFiniteError, match="iteration 4, phase rollout: non-finite step rows: .*'reward'.* rows 2"):
        with stop_on_nonfinite_rows("iteration 4, phase rollout"):
            replace(rows, reward=nan_reward)
    short = list(rows.behaviour_logprobs)
    short[1] = short[1][:-1]
    with pytest.raises(AdvantageInputError, match="step 1 has .* behaviour log-probs"):
        rows.with_columns(behaviour_logprobs=short)  # a column set later is checked as it is set
    empty = list(rows.response_ids)
    empty[0] = []
    with pytest.raises(AdvantageInputError, match="step 0 has an empty response"):
        replace(rows, response_ids=empty)
    with pytest.raises(AdvantageInputError, match="observation has 1 entries"):
        rows.with_columns(observation=rows.observation[:1])
    with pytest.raises(AdvantageInputError, match="'advantage' has shape"):
        rows.with_columns(advantage=np.zeros(len(rows) + 1))
    with pytest.raises(AdvantageInputError, match="keeps the ids"):
        rows.with_columns(traj=rows.traj + 1)
    with pytest.raises(AdvantageInputError, match="same step"):
        StepRows.concat([rows, rows])
    with pytest.raises(ValueError, match="needs scored rows"):
        train_samples(rows, None)
