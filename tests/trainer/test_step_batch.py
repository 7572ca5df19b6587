"""StepBatch: the one shape a step has from rollout to update. Built from real rollout records
(scripted policy on the real Sokoban pool, as in tests/rollout/test_collect.py), checked once, and
turned into the engines' samples without losing the row alignment."""
from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pytest
import torch

from gigpo.advantage.estimators import compute_advantages
from gigpo.advantage.rows import AdvantageInputError
from gigpo.config import load_config
from gigpo.trainer.nonfinite import NonFiniteError
from gigpo.trainer.step_batch import StepBatch, StepBatchError, with_advantages


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


def test_columns_estimators_and_samples_keep_every_row_aligned(played):
    config, tokenizer, records = played
    batch = StepBatch.from_records(records)
    assert len(batch) == len(records) > config.env.num_groups * config.env.group_size
    for i in (0, len(records) // 2, len(records) - 1):
        r = records[i]
        assert (batch.group[i], batch.traj[i], batch.step[i], batch.reward[i]) == (r.group, r.traj, r.step, r.reward)
        assert batch.prompt_ids[i] == r.prompt_ids and batch.behaviour_logprobs[i] == r.response_logprobs
    a = config.algorithm
    scored, result = with_advantages(batch, a)
    expected = compute_advantages(a.estimator, batch.rows, gamma=a.gamma, lam=a.lam, step_weight=a.step_weight,
                                  norm=a.norm, episode_stats=a.episode_stats, similarity=a.similarity,
                                  step_min_spread=a.step_min_spread)
    assert np.array_equal(scored.advantage, expected.advantage) and np.array_equal(scored.returns, expected.returns)
    assert np.abs(scored.advantage).max() > 0  # the scripted policy's episodes differ: a real signal
    samples = scored.train_samples(tokenizer, behaviour_as_old=True)
    for sample, record, adv in zip(samples, records, scored.advantage):
        assert sample.response_ids == record.response_ids and sample.advantage == float(adv)
        assert torch.equal(sample.logp_old, torch.tensor(record.response_logprobs, dtype=torch.float32))
        assert sample.action_mask.shape == (len(record.response_ids),)
    # a shuffled (placebo) batch has the same values in another order
    placebo, _ = with_advantages(batch, a, placebo=(0, 1))
    assert sorted(placebo.advantage) == sorted(scored.advantage) and not np.array_equal(placebo.advantage, scored.advantage)


def test_a_placebo_logs_and_records_the_advantages_it_trains_on(played):
    """`algorithm.shuffle_advantages`: the result the loop logs (adv/ metrics) and records (the viewer's
    per-step advantage) holds the permuted advantages the samples carry, parts moved alongside; before,
    it held the estimate each row lost to the permutation."""
    from gigpo.infra.seeds import placebo_advantages
    from gigpo.viewer.record_files import step_columns

    config, tokenizer, records = played
    a = config.algorithm
    assert a.estimator == "gigpo" and a.step_weight != 0  # both parts are non-trivial
    batch = StepBatch.from_records(records)
    scored, estimate = with_advantages(batch, a)
    placebo, result = with_advantages(batch, a, placebo=(0, 1))
    trained = [s.advantage for s in placebo.train_samples(tokenizer)]
    assert np.array_equal(placebo.advantage, placebo_advantages(scored.advantage, 0, 1))  # the same update as before
    assert not np.array_equal(placebo.advantage, scored.advantage)
    assert np.array_equal(result.advantage, trained) and np.array_equal(result.advantage, placebo.advantage)
    columns = step_columns(records, a.gamma, a.similarity, result, placebo.rows, a.estimator)
    assert np.array_equal(columns.advantage, placebo.advantage)
    # each row carries the episode and step parts of the advantage it got, which still add up to it
    assert np.allclose(result.episode_advantage + a.step_weight * result.step_advantage, result.advantage)
    assert not np.array_equal(result.episode_advantage, estimate.episode_advantage)
    # what belongs to the row's own state stays the row's
    assert np.array_equal(result.step_group_size, estimate.step_group_size)
    assert np.array_equal(result.returns, estimate.returns)


def test_selecting_groups_keeps_records_ids_and_advantages_together(played):
    config, _, records = played
    scored, _ = with_advantages(StepBatch.from_records(records), config.algorithm)
    kept = scored.select(scored.group != 1)
    assert set(kept.group.tolist()) == {0, 2}
    assert [r.group for r in kept.records] == kept.group.tolist()
    picked = np.flatnonzero(scored.group != 1)
    assert kept.response_ids == tuple(scored.response_ids[i] for i in picked)
    assert np.array_equal(kept.advantage, scored.advantage[picked])
    # what crosses processes (broadcast_object pickles it) comes back with the same rows
    again = pickle.loads(pickle.dumps(kept))
    assert np.array_equal(again.rows.traj, kept.rows.traj) and again.records == kept.records


def test_a_bad_step_is_refused_at_construction_naming_the_step(played):
    _, _, records = played
    nan = replace(records[2], reward=float("nan"))
    with pytest.raises(NonFiniteError, match="iteration 4, phase rollout: rewards .* index 2"):
        StepBatch.from_records([*records[:2], nan, *records[3:]], where="iteration 4, phase rollout")
    short = replace(records[1], response_logprobs=records[1].response_logprobs[:-1])
    with pytest.raises(StepBatchError, match="step 1 has .* behaviour log-probs"):
        StepBatch.from_records([records[0], short])
    with pytest.raises(StepBatchError, match="step 0 has an empty response"):
        StepBatch.from_records([replace(records[0], response_ids=[], response_logprobs=[])])
    with pytest.raises(AdvantageInputError, match="same step"):
        StepBatch.from_records([records[0], records[0]])
    with pytest.raises(StepBatchError, match="needs advantages"):
        StepBatch.from_records(records).train_samples(None)
